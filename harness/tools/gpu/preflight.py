"""GO or NO-GO for measuring a CUDA row on this machine, in at most PREFLIGHT_SECONDS, before any row is
measured: a loaned GPU is minutes, and a row that fails for a reason the machine could have told costs
all of them.

    python -m harness gpu preflight SESSION [--wheels DIR] [--work DIR]

The checks, each one line (`ok` or `NO`), then the verdict:
1. facts: the GPUs nvidia-smi lists, their driver and memory, MIG mode, CUDA_VISIBLE_DEVICES;
2. the pins: carried wheels installed where the environment lacks them, then `python -m harness check-env`;
3. at once, within what is left of the time:
   - a warm process built as a worker builds one, that has not touched CUDA, then children forked from it
     at once, each initialising CUDA, running a cuBLAS matmul with its backward pass and a Triton kernel
     forward and backward under the runner's memory limit (python -m harness.plugin.gpuprobe);
   - the session's own pytest command collecting its cases, under the runner's guard and its probe;
   then one case of each family through `python -m harness run SESSION`: recorded, none the harness's.
Exit status 0 for GO, 1 for NO-GO, 2 for bad input.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

from harness.core import caseid, matrix, outcomes, paths, pytestrun, records
from harness.core.errors import BadInput
from harness.tools.gpu import wheels

PREFLIGHT_SECONDS = 90
FORKED_CHILDREN = 8  # at most: "several at once", as the workers of a session fork theirs
HANDFUL_WORKERS = 4


@dataclasses.dataclass
class Check:
    name: str
    ok: bool
    says: str

    def line(self) -> str:
        return f"{'ok' if self.ok else 'NO'}  {self.name}: {self.says}"


def _run(argv: list[str], timeout: float, env: dict | None = None) -> subprocess.CompletedProcess | None:
    """A command from the checkout, None past `timeout` (it is killed)."""
    try:
        return subprocess.run(argv, cwd=paths.ROOT, capture_output=True, text=True, timeout=max(1.0, timeout),
                              env={**os.environ, **(env or {})})
    except subprocess.TimeoutExpired:
        return None


def _last_line(done: subprocess.CompletedProcess) -> str:
    text = (done.stderr.strip() or done.stdout.strip()).splitlines()
    return text[-1] if text else f"exit {done.returncode}"


def facts(deadline: float) -> Check:
    query = ["nvidia-smi", "--query-gpu=name,driver_version,memory.total,mig.mode.current", "--format=csv,noheader"]
    try:
        done = _run(query, deadline - time.monotonic())
    except FileNotFoundError:
        return Check("facts", False, "no nvidia-smi on PATH: no NVIDIA driver here")
    if done is None or done.returncode != 0 or not done.stdout.strip():
        return Check("facts", False, f"nvidia-smi lists no GPU ({_last_line(done) if done else 'no answer'})")
    gpus = [[field.strip() for field in line.split(",")] for line in done.stdout.strip().splitlines()]
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    said = "; ".join(f"GPU {i}: {g[0]}, driver {g[1]}, {g[2]}, MIG {g[3] if len(g) > 3 else '?'}"
                     for i, g in enumerate(gpus))
    said += f"; CUDA_VISIBLE_DEVICES {visible!r}" if visible is not None else "; CUDA_VISIBLE_DEVICES unset"
    if any(len(g) > 3 and g[3].lower() == "enabled" for g in gpus):
        return Check("facts", False, said + ": MIG is on, and NVML cannot count MIG devices for the harness's guard")
    if visible is not None and not visible.strip():
        return Check("facts", False, said + ": no GPU is visible to CUDA")
    return Check("facts", True, said)


def pins(spec: matrix.Session, carried: pathlib.Path | None, site: pathlib.Path, deadline: float) -> Check:
    installed = []
    if carried is not None:
        try:
            installed = wheels.install(spec, carried, site)
        except BadInput as exc:
            return Check("pins", False, str(exc))
    done = _run([sys.executable, "-m", "harness", "check-env", spec.name], deadline - time.monotonic())
    if done is None:
        return Check("pins", False, "check-env gave no answer in time")
    carried_note = f" (carried in: {', '.join(installed)})" if installed else ""
    return Check("pins", done.returncode == 0, _last_line(done) + carried_note)


def forked_children(workers: pytestrun.Workers, deadline: float) -> Check:
    children = max(1, min(workers.count, FORKED_CHILDREN))
    limit = deadline - time.monotonic()
    done = _run([sys.executable, "-m", "harness.plugin.gpuprobe", "--children", str(children),
                 "--workers", str(workers.count), "--timeout", str(max(5, int(limit) - 15))], limit)
    if done is None:
        return Check("forked children", False, "the warm process and its children gave no answer in time")
    try:
        answer = json.loads(done.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return Check("forked children", False, f"the probe printed no answer: {_last_line(done)}")
    warm = answer["warm"]
    if "error" in warm:
        return Check("forked children", False, f"the warm process: {warm['error']}")
    if warm["guard"]["refused"]:
        return Check("forked children", False, f"the warm process asked for CUDA: {warm['guard']['refused']}")
    good = [c for c in answer["children"] if c["ok"]]
    failed = sorted({c["error"] for c in answer["children"] if not c["ok"]})
    if failed:
        return Check("forked children", False, f"{len(good)} of {len(answer['children'])} children forked at once from "
                     f"the warm process ran a GPU case; {'; '.join(failed[:3])} (the warm process's probe: "
                     f"{warm['guard']['probe']})")
    slowest = max(sum(c["seconds"].values()) for c in good)
    return Check("forked children", True, f"{len(good)} children forked at once from a warm process that has not "
                 f"touched CUDA ({warm['guard']['probe']}) each initialised CUDA, ran a cuBLAS matmul forward and "
                 f"backward and a Triton kernel forward and backward under a {warm['memory_limit_gib']} GiB memory "
                 f"limit; slowest {slowest:.1f} s")


def collection(spec: matrix.Session, workers: pytestrun.Workers, cache_root: pathlib.Path,
               deadline: float) -> tuple[Check, list[str]]:
    """The session's pytest command, collecting only: its cases' node ids."""
    env = pytestrun.run_env(spec, cache_root, workers)
    collect_only = ["--collect-only", "-q", "-p", "no:cacheprovider"]
    done = _run([sys.executable, *pytestrun.pytest_args(spec, collect_only, workers)], deadline - time.monotonic(), env)
    if done is None:
        return Check("collection", False, "collecting the cases gave no answer in time"), []
    ids = [line.strip() for line in done.stdout.splitlines() if caseid.is_nodeid(line.strip())]
    if done.returncode != 0 or not ids:
        stop = [line for line in done.stdout.splitlines() + done.stderr.splitlines()
                if "harness:" in line or "rror" in line]
        return Check("collection", False, (stop or [_last_line(done)])[-1]), ids
    return Check("collection", True, f"{len(ids)} cases collected by the session's command, under the guard "
                                     "and its probe of a forked child"), ids


def handful(spec: matrix.Session, ids: list[str], work: pathlib.Path, deadline: float) -> Check:
    """The first case of each family, through `python -m harness run`: recorded, none the harness's fault."""
    chosen = list({caseid.nodeid_file(nodeid): nodeid for nodeid in reversed(ids)}.values())[::-1]
    results = work / "handful"
    done = _run([sys.executable, "-m", "harness", "run", spec.name, *chosen], deadline - time.monotonic(),
                {paths.RESULTS_ENV: str(results), pytestrun.WORKERS_ENV: str(min(HANDFUL_WORKERS, len(chosen)))})
    if done is None:
        return Check("real cases", False, f"{len(chosen)} cases through `python -m harness run` gave no answer in time")
    path = paths.results_path(spec.name, results)
    back = [r for r in records.read(path) if r["kind"] == "case"] if path.is_file() else []
    harness_faults = [f"{r['case']}: {r.get('message')}" for r in back
                      if r["outcome"] in outcomes.HARNESS_FAULTS or "harness" in (r.get("message") or "")]
    said = f"{len(back)} of {len(chosen)} cases recorded through `python -m harness run` (" + ", ".join(
        f"{r['case']} {r['outcome']}" for r in back) + ")"
    if len(back) != len(chosen):
        return Check("real cases", False, said + f"; {_last_line(done)}")
    return Check("real cases", not harness_faults,
                 said + (f"; the harness's: {harness_faults[:2]}" if harness_faults else ""))


def preflight(session: str, carried: pathlib.Path | None = None, work: pathlib.Path | None = None,
              seconds: float = PREFLIGHT_SECONDS, say=print, site: pathlib.Path | None = None) -> bool:
    """The checks in order, each said as it ends; True for GO."""
    spec = matrix.find(session)
    if spec.device != "cuda":
        raise BadInput(f"{session} is not a CUDA session: the GPU preflight is for cuda* sessions")
    started = time.monotonic()
    deadline = started + seconds
    work = pathlib.Path(work or tempfile.mkdtemp(prefix=f"gpu-preflight-{spec.name}-"))
    work.mkdir(parents=True, exist_ok=True)
    checks = [facts(deadline)]
    say(checks[-1].line())
    if checks[0].ok:  # each check below says its own reason: all of them run, but the cases need the pins
        checks.append(pins(spec, carried, site or work / "site", deadline))
        say(checks[-1].line())
        workers = pytestrun.choose_workers(spec)
        with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
            children = pool.submit(forked_children, workers, deadline)
            collected, ids = collection(spec, workers, work / "caches", deadline)
            checks.append(collected)
            say(collected.line())
            if collected.ok and checks[1].ok:
                checks.append(handful(spec, ids, work, deadline))
                say(checks[-1].line())
            checks.append(children.result())
            say(checks[-1].line())
    failed = [c for c in checks if not c.ok]
    took = time.monotonic() - started
    if failed:
        say(f"NO-GO for {spec.name} after {took:.0f} s: {', '.join(c.name for c in failed)} (above)")
    else:
        say(f"GO for {spec.name} after {took:.0f} s")
    return not failed
