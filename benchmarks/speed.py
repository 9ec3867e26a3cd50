"""Speed of the matrix, measured side by side on this machine. Prints figures; asserts nothing.

    python benchmarks/speed.py [--session cpu_torch25] [--parts env,session,overhead,matrix] [-k EXPR]
                               [--rounds 3] [--skip-cold-pip] [--results DIR] [--changed-family autocast]
                               [--tag lightning]

Parts:
  env       environment creation for the session's pins: uv cold (empty cache) and warm, against
            pip cold (no cache) and warm (its cache filled by the cold run); each builds a new venv
  session   the session's wall time through nox: cold (new venv dir, empty compile caches) and warm
            (the same command again: venv reused, inductor cache filled); then time per family
  overhead  in the session's venv (built if missing), the session's own pytest command (xdist
            worker, time and memory limits, reruns, torch state reset; harness.core.pytestrun, as the
            noxfile runs it) against plain `pytest cases/` with the same selection and caches,
            alternated --rounds times; the median of each
  isolation the session's own pytest command, every case forked from the warm worker (the default)
            against every case in the worker (`--isolation=none`), each run cold, alternated
  matrix    every CPU session of the matrix through nox, one after another, in the checkout's venvs:
            cold (every case afresh, `-- --fresh`, compile caches emptied; results into --results),
            warm with nothing changed (into a copy of those results), and warm after one family's
            file changed (a copy of the project with a line of code added to it); per session (through nox
            and in pytest), per family; --tag narrows it (`--tag lightning`: the Lightning axis)
  workers   the session through nox, cold (every case afresh, `-- --fresh`, compile caches emptied) at one
            worker and at the count chosen for this machine (HARNESS_WORKERS unset): wall and pytest
            times, and every cell whose outcome differs between the two
  rerun     the session through nox, then again with nothing changed: the second run's wall time, and
            whether its results file is byte-identical to the first's
  suite     the harness's own suite as CI runs it, `bash .ci/run` in a fresh clone of HEAD (benchmarks/suite.py,
            which prints its files and tests too): wall, CPU and pytest time
Targets: warm environment <= 5 s; warm session <= 1/3 of cold; harness overhead < 5 %;
matrix warm with nothing changed < 60 s in all.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # the checkout, for `harness`

from benchmarks import suite  # noqa: E402
from harness.core import installs, matrix, paths, pytestrun, records, timings, venvs  # noqa: E402
from harness.core.paths import ROOT  # noqa: E402


def timed(command, env=None, cwd=ROOT) -> float:
    start = time.perf_counter()
    result = subprocess.run(command, cwd=cwd, env={**os.environ, **(env or {})},
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    elapsed = time.perf_counter() - start
    if result.returncode not in (0, 1):  # 1: some case failed, which is a finding, not a broken run
        raise SystemExit(f"{' '.join(map(str, command))} failed ({result.returncode}): {result.stderr[-2000:]}")
    return elapsed


def python_for(spec: matrix.Session) -> str:
    found = shutil.which(f"python{spec.python}")
    if not found:
        raise SystemExit(f"no python{spec.python} on PATH")
    return found


def env_creation(spec, work: pathlib.Path, skip_cold_pip: bool) -> dict:
    requirements = [*spec.requirements, *installs.HARNESS_REQUIREMENTS]
    python = python_for(spec)
    figures = {}
    uv_cold_cache = work / "uv-cache"
    pip_cache = work / "pip-cache"
    no_local_wheels = {"PIP_FIND_LINKS": "", "PIP_EXTRA_INDEX_URL": ""}  # the registry only, as uv sees it

    def uv(name, cache):
        venv = work / name
        start = time.perf_counter()
        subprocess.run(["uv", "venv", "-q", "-p", python, str(venv)], check=True)
        subprocess.run(["uv", "pip", "install", "-q", "--python", str(venvs.python_in(venv)), *requirements],
                       check=True, env={**os.environ, **({"UV_CACHE_DIR": str(cache)} if cache else {})})
        figures[name] = time.perf_counter() - start
        shutil.rmtree(venv)

    def pip(name, cache_args):
        venv = work / name
        start = time.perf_counter()
        subprocess.run([python, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(venvs.python_in(venv)), "-m", "pip", "install", "-q", *cache_args, *requirements],
                       check=True, env={**os.environ, **no_local_wheels})
        figures[name] = time.perf_counter() - start
        shutil.rmtree(venv)

    uv("uv cold", uv_cold_cache)
    shutil.rmtree(uv_cold_cache)
    uv("uv warm (cache filled)", None)
    uv("uv warm (cache filled)", None)  # the first warm run may still fill the default cache
    if not skip_cold_pip:
        pip("pip cold", ["--cache-dir", str(pip_cache)])
        pip("pip warm (cache filled)", ["--cache-dir", str(pip_cache)])
        shutil.rmtree(pip_cache, ignore_errors=True)
    return figures


def venv_bytes(venv: pathlib.Path) -> int:
    """What the venv holds on disk, each file once (links to the interpreter not counted): a case's
    precompiled headers are hard links to the warm-up's (156 MB on torch 2.13, linked by every case
    that compiles with inductor), and summing each link counted a 1.09 GB venv as 4.05 GB."""
    sizes = {}
    for found in venv.rglob("*"):
        if found.is_file() and not found.is_symlink():
            info = found.stat()
            sizes[info.st_dev, info.st_ino] = info.st_size
    return sum(sizes.values())


def session_runs(spec, work: pathlib.Path, select: list[str]) -> dict:
    envdir = work / "envs"
    results = work / "results"
    command = [sys.executable, "-m", "nox", "-f", str(ROOT / "noxfile.py"), "-s", spec.name,
               "--envdir", str(envdir), "--", *select]
    env = {paths.RESULTS_ENV: str(results)}
    figures = {"session cold": timed(command, env), "session warm": timed(command, env)}
    figures["warm/cold"] = figures["session warm"] / figures["session cold"]
    venv = venvs.venv_dir(spec.name, envdir)
    figures["venv bytes"] = venv_bytes(venv)
    figures["torch wheel"] = installs.installed_torch_wheel(venv)
    figures["families"] = per_family(results / f"{spec.name}.jsonl")
    return figures


def overhead(spec, work: pathlib.Path, select: list[str], rounds: int) -> dict:
    python = str(venvs.ensure_venv(spec.name))
    env = {**pytestrun.run_env(spec, venvs.venv_dir(spec.name)), paths.RESULTS_ENV: str(work / "overhead")}
    plain = [python, "-m", "pytest", "cases/", "-q", "-p", "no:cacheprovider", *select]
    harness = [python, *pytestrun.pytest_args(spec, ["-q", "-p", "no:cacheprovider", *select])]
    timed(plain, env)  # fills the compile caches both runs below read
    figures = {"plain pytest cases/": [], "session's pytest command": []}
    for _ in range(rounds):  # alternate: drift of the machine hits both alike
        figures["plain pytest cases/"].append(timed(plain, env))
        figures["session's pytest command"].append(timed(harness, env))
    medians = {name: statistics.median(values) for name, values in figures.items()}
    medians["overhead"] = medians["session's pytest command"] / medians["plain pytest cases/"] - 1
    medians["rounds"] = figures
    return medians


def isolation_cost(spec, work: pathlib.Path, select: list[str], rounds: int) -> dict:
    """The session's own pytest command with each case forked from the warm worker (the default)
    against every case in the worker itself (`--isolation=none`, state reset between cases),
    alternated; every run cold: its own empty compile caches."""
    python = str(venvs.ensure_venv(spec.name))
    figures = {"fork": [], "none": []}
    for number in range(rounds):
        for mode in figures:
            caches = work / f"isolation-{mode}-{number}"
            env = {**pytestrun.run_env(spec, caches), paths.RESULTS_ENV: str(caches / "results")}
            command = [python, *pytestrun.pytest_args(spec, ["-q", "-p", "no:cacheprovider", *select,
                                                            f"--isolation={mode}"])]
            figures[mode].append(timed(command, env))
    medians = {mode: statistics.median(values) for mode, values in figures.items()}
    medians["cost"] = medians["fork"] / medians["none"] - 1
    medians["rounds"] = figures
    return medians


def matrix_runs(work: pathlib.Path, results: pathlib.Path, changed_family: str, tag: str | None = None) -> dict:
    names = [s.name for s in matrix.load() if s.device == "cpu" and not s.nightly and (tag is None or tag in s.tags)]
    for name in names:
        venvs.ensure_venv(name)

    def run_all(project: pathlib.Path, into: pathlib.Path, *extra) -> dict:
        seconds = {}
        for name in names:
            seconds[name] = timed([sys.executable, "-m", "nox", "-f", str(project / "noxfile.py"), "-s", name,
                                   "--envdir", str(ROOT / ".nox"), *(["--", *extra] if extra else [])],
                                  env={paths.RESULTS_ENV: str(into)}, cwd=project)
            end = timings.read(into / f"{name}.jsonl")
            print(f"    {name:34s} {seconds[name]:7.1f} s through nox, {end.get('seconds', 0):7.1f} s in pytest",
                  flush=True)
        return seconds

    for name in names:  # cold: inductor and Triton compile afresh
        shutil.rmtree(pytestrun.compile_caches(venvs.venv_dir(name)), ignore_errors=True)
    figures = {}
    print("  matrix cold (every case afresh, empty compile caches):", flush=True)
    figures["cold"] = run_all(ROOT, results, "--fresh")
    figures["cold_pytest"] = {name: timings.read(results / f"{name}.jsonl").get("seconds", 0) for name in names}
    figures["families"] = {name: per_family(results / f"{name}.jsonl") for name in names}
    warm = work / "warm-results"
    shutil.copytree(results, warm, ignore=shutil.ignore_patterns(paths.PREVIOUS, paths.REPRO, paths.TIMINGS))
    print("  matrix warm, nothing changed:", flush=True)
    figures["warm"] = run_all(ROOT, warm)
    figures["same_outcomes"] = {name: _outcomes(results / f"{name}.jsonl") == _outcomes(warm / f"{name}.jsonl")
                                for name in names}
    if changed_family == "none":
        return figures
    project = work / "project"
    for folder in ("cases", "harness"):
        shutil.copytree(ROOT / folder, project / folder, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("noxfile.py", "pyproject.toml"):
        shutil.copy2(ROOT / name, project / name)
    case_file = project / "cases" / f"test_{changed_family}.py"
    # A change of code: a comment alone re-runs nothing (harness.core.sources).
    case_file.write_text(case_file.read_text() + "\nCHANGED_FOR_THE_BENCHMARK = True\n")
    changed = work / "changed-results"
    shutil.copytree(results, changed, ignore=shutil.ignore_patterns(paths.PREVIOUS, paths.REPRO, paths.TIMINGS))
    print(f"  matrix warm, cases/test_{changed_family}.py changed:", flush=True)
    figures["changed"] = run_all(project, changed)
    figures["changed_family"] = changed_family
    figures["reran"] = {name: sorted({r["family"] for r in records.read(changed / f"{name}.jsonl")
                                      if r["kind"] == "case" and not r.get("reused_from")}) for name in names}
    return figures


def _nox_session(spec, results: pathlib.Path, *args, workers: str | None = None) -> float:
    env = {paths.RESULTS_ENV: str(results), pytestrun.WORKERS_ENV: workers or ""}
    return timed([sys.executable, "-m", "nox", "-f", str(ROOT / "noxfile.py"), "-s", spec.name, "--envdir",
                  str(ROOT / ".nox"), *(["--", *args] if args else [])], env=env)


def worker_counts(spec, work: pathlib.Path) -> dict:
    """The session cold at 1 worker and at the count chosen here; outcomes compared cell for cell."""
    venvs.ensure_venv(spec.name)
    chosen = pytestrun.choose_workers(spec) if not os.environ.get(pytestrun.WORKERS_ENV) else None
    figures = {"chosen": chosen and chosen.basis}
    for label, count in (("1", "1"), ("chosen", None)):
        shutil.rmtree(pytestrun.compile_caches(venvs.venv_dir(spec.name)), ignore_errors=True)
        results = work / f"workers-{label}"
        figures[f"wall {label}"] = _nox_session(spec, results, "--fresh", workers=count)
        figures[f"pytest {label}"] = timings.read(results / f"{spec.name}.jsonl").get("seconds")
        figures[f"outcomes {label}"] = _outcomes(results / f"{spec.name}.jsonl")
    one, many = figures.pop("outcomes 1"), figures.pop("outcomes chosen")
    figures["cells"] = len(one)
    figures["differ"] = sorted((c, one.get(c), many.get(c)) for c in set(one) | set(many) if one.get(c) != many.get(c))
    return figures


def rerun(spec, work: pathlib.Path) -> dict:
    """The session, then again with nothing changed: the second's time, and whether the file is the same."""
    results = work / "rerun"
    _nox_session(spec, results)
    path = results / f"{spec.name}.jsonl"
    before = path.read_bytes()
    seconds = _nox_session(spec, results)
    return {"second run": seconds, "byte-identical": path.read_bytes() == before,
            "records": sum(1 for r in records.read(path) if r["kind"] == "case")}


def _outcomes(path: pathlib.Path) -> dict:
    return {r["case"]: r["outcome"] for r in records.read(path) if r["kind"] == "case"}


def per_family(path: pathlib.Path) -> dict:
    times: dict[str, float] = {}
    for record in timings.merged(records.read(path), timings.read(path)):
        if record["kind"] == "case":
            times[record["family"]] = times.get(record["family"], 0.0) + (record.get("duration") or 0.0)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--session", default="cpu_torch25")
    parser.add_argument("--parts", default="env,session,overhead")
    parser.add_argument("-k", dest="select", default=None, help="pytest -k expression for the runs")
    parser.add_argument("--rounds", type=int, default=3, help="alternations of the overhead runs")
    parser.add_argument("--skip-cold-pip", action="store_true", help="pip's cold install downloads GBs again")
    parser.add_argument("--results", default=None, help="matrix: where the cold run's results go (default: a temp dir)")
    parser.add_argument("--changed-family", default="autocast",
                        help="matrix: the family whose file is changed (`none`: no such run)")
    parser.add_argument("--tag", default=None, help="matrix: only the CPU sessions with this tag (lightning: the "
                        "Lightning axis)")
    args = parser.parse_args()
    spec = matrix.find(args.session)
    parts = set(args.parts.split(","))
    select = ["-k", args.select] if args.select else []
    figures = {}
    with tempfile.TemporaryDirectory(prefix="harness-bench-") as tmp:
        work = pathlib.Path(tmp)
        print(f"benchmark: session {spec.name} ({spec.requirements[0]}), {os.cpu_count()} cores, "
              f"selection {args.select or 'all cases'}", flush=True)
        if "env" in parts:
            figures["environments"] = env_creation(spec, work, args.skip_cold_pip)
            for name, seconds in figures["environments"].items():
                print(f"  environment, {name:28s} {seconds:7.1f} s", flush=True)
        if "session" in parts:
            runs = figures["sessions"] = session_runs(spec, work, select)
            print(f"  session cold                             {runs['session cold']:7.1f} s")
            print(f"  session warm                             {runs['session warm']:7.1f} s")
            print(f"  warm/cold session ratio                  {runs['warm/cold']:7.2f}  (target <= 0.33)")
            wheel = runs["torch wheel"] or {}
            print(f"  session venv                             {runs['venv bytes'] / 1e9:7.2f} GB  (torch: the "
                  f"{wheel.get('build', 'unknown')} build{' from ' + wheel['index'] if wheel.get('index') else ''}; "
                  f"target < 1.5 GB for a CPU build)")
            for family, seconds in sorted(runs["families"].items()):
                print(f"  family {family:33s} {seconds:7.1f} s")
        if "overhead" in parts:
            costs = figures["overhead"] = overhead(spec, work, select, args.rounds)
            for name in ("plain pytest cases/", "session's pytest command"):
                rounds = ", ".join(f"{s:.1f}" for s in costs["rounds"][name])
                print(f"  {name:40s} {costs[name]:7.1f} s  (median of {rounds})")
            print(f"  harness overhead                         {costs['overhead'] * 100:6.1f} %  (target < 5 %)")
        if "isolation" in parts:
            costs = figures["isolation"] = isolation_cost(spec, work, select, args.rounds)
            for mode in ("none", "fork"):
                rounds = ", ".join(f"{s:.1f}" for s in costs["rounds"][mode])
                print(f"  session's command, --isolation={mode:5s}       {costs[mode]:7.1f} s  "
                      f"(median of {rounds}; cold)")
            print(f"  cost of a process per case               {costs['cost'] * 100:6.1f} %  (budget 25 %)")
        if "workers" in parts:
            runs = figures["workers"] = worker_counts(spec, work)
            print(f"  session cold at 1 worker                 {runs['wall 1']:7.1f} s  "
                  f"(pytest {runs['pytest 1']} s)")
            print(f"  session cold at the chosen count         {runs['wall chosen']:7.1f} s  "
                  f"(pytest {runs['pytest chosen']} s; {runs['chosen']})")
            print(f"  cells that differ between the two        {len(runs['differ']):7d} of {runs['cells']}: "
                  f"{runs['differ'][:10]}")
        if "rerun" in parts:
            runs = figures["rerun"] = rerun(spec, work)
            print(f"  a second run, nothing changed            {runs['second run']:7.1f} s  "
                  f"({runs['records']} records; results file byte-identical: {runs['byte-identical']}; "
                  "target < 5 s)")
        if "suite" in parts:
            run = figures["suite"] = suite.run_suite(work / "suite-clone")
            print(f"  suite, bash .ci/run in a fresh clone     {run['wall']:7.1f} s  (exit {run['returncode']}; "
                  f"pytest {run['pytest'][1] if run['pytest'] else '?'} s; CPU {run['user']:.0f} s user, "
                  f"{run['system']:.0f} s system; target < 1,500 s)")
            run.pop("tests")  # the JUnit's hundreds of rows: benchmarks/suite.py prints them
        if "matrix" in parts:
            results = pathlib.Path(args.results).resolve() if args.results else work / "matrix-results"
            runs = figures["matrix"] = matrix_runs(work, results, args.changed_family, args.tag)
            for kind in ("cold", "warm", "changed"):
                if kind in runs:
                    print(f"  matrix {kind:8s} {sum(runs[kind].values()):8.1f} s in all")
            print(f"  matrix cold      {sum(runs['cold_pytest'].values()):8.1f} s of pytest time in all")
            if "reran" in runs:
                print(f"  after the change, sessions re-ran: {sorted(set(map(tuple, runs['reran'].values())))}")
            print(f"  warm outcomes equal cold outcomes in every session: {all(runs['same_outcomes'].values())}")
            families: dict[str, float] = {}
            for per_session in runs["families"].values():
                for family, seconds in per_session.items():
                    families[family] = families.get(family, 0.0) + seconds
            for family, seconds in sorted(families.items()):
                print(f"  family {family:20s} {seconds:8.1f} s of cases over the matrix (cold)")
        print(json.dumps(figures, indent=None, default=str))


if __name__ == "__main__":
    main()
