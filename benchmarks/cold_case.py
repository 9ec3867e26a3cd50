"""Where a cold case's time goes, in the session's own command. Prints figures; asserts nothing.

    python benchmarks/cold_case.py [--session cpu_torch215] [--cases N] [-k EXPR]

In the session's venv (built with nox if missing), the session's own pytest command (one worker, each
case forked from the warm worker, every case's compile caches empty but for the C++ builds the cases
before it in this run shared: harness/plugin/compilecaches.py) runs `--cases` real cases, by
default the first cpu/inductor case of each family that ran in the committed row (`-k` narrows them by
substring). A probe plugin loaded beside the harness times, in each case's own process, the case's call
and what torch's own compile metrics (torch._dynamo.utils.compile_times) say it spent on:
  dynamo+aot   tracing the Python (Dynamo) and AOTAutograd's joint graph, partitioning
  inductor     inductor's lowering and Python codegen, less the C++ build
  C++ build    inductor's C++ compiler runs (`compile_file`: each kernel module, and the compile of
               anything the warm-up did not leave in the case's caches)
  other        the rest of the call: eager runs, the checks, the graph recording
and, in the worker, the case's whole protocol (the fork, the report's way back, the cache directory).
Apart from the cases: a fresh interpreter importing torch and lightning, with the venv's bytecode and
with none (what a worker pays once, before its first case, where Python cannot write bytecode).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # the checkout, for `harness`

from harness.core import matrix, paths, pytestrun, records, venvs  # noqa: E402

# Loaded with `-p cold_case_probe` in the worker: its call hook runs in the case's own (forked) process.
PROBE = r'''
import json, os, time
import pytest

OUT = os.environ["COLD_CASE_PROBE_OUT"]

def _metrics():
    try:
        from torch._dynamo.utils import compilation_time_metrics
    except ImportError:
        return None
    return compilation_time_metrics

def _write(data):
    with open(OUT, "a") as out:
        out.write(json.dumps(data) + "\n")

@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    metrics = _metrics()
    if metrics is not None:
        metrics.clear()  # what the warm-up compiled is not the case's
    started = time.perf_counter()
    yield
    seconds = time.perf_counter() - started
    spent = {key: sum(values) for key, values in (metrics or {}).items()}
    counts = {key: len(values) for key, values in (metrics or {}).items()}
    _write({"where": "call", "nodeid": item.nodeid, "seconds": seconds, "spent": spent, "counts": counts})

@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    started = time.perf_counter()
    yield
    _write({"where": "protocol", "nodeid": item.nodeid, "seconds": time.perf_counter() - started})
'''


def chosen_cases(spec: matrix.Session, count: int, narrow: str | None) -> list[dict]:
    """The first cpu/inductor case of each family that ran in the committed row, families in turn."""
    ran = [r for r in records.read(paths.results_path(spec.name)) if r["kind"] == "case"
           and r["outcome"] != "skip" and r["params"].get("device") == "cpu"
           and r["params"].get("backend") == "inductor" and (not narrow or narrow in r["case"])]
    by_family = collections.defaultdict(list)
    for record in ran:
        by_family[record["family"]].append(record)
    chosen = []
    while len(chosen) < count and any(by_family.values()):
        for family in sorted(by_family):
            if by_family[family] and len(chosen) < count:
                chosen.append(by_family[family].pop(0))
    return chosen


def import_seconds(python: pathlib.Path, bytecode: bool) -> float:
    with tempfile.TemporaryDirectory(prefix="cold-case-pycache-") as empty:
        env = pytestrun.clean_env(**({} if bytecode else {"PYTHONPYCACHEPREFIX": empty}))
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        started = time.perf_counter()
        subprocess.run([str(python), "-c", "import torch, lightning"], env=env, check=True, capture_output=True)
        return time.perf_counter() - started


def split(call: dict) -> dict[str, float]:
    """The call's seconds by part (see the module docstring); parts torch did not time are 0."""
    spent = call["spent"]
    compiling = spent.get("_compile.compile_inner", 0.0) + spent.get("compile_fx.<locals>.bw_compiler", 0.0)
    inductor = spent.get("compile_fx_inner", 0.0)
    cpp = spent.get("compile_file", 0.0)
    return {"dynamo+aot": max(compiling - inductor, 0.0), "inductor": max(inductor - cpp, 0.0), "C++ build": cpp,
            "other": max(call["seconds"] - compiling, 0.0)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--session", default=matrix.main_session().name)
    parser.add_argument("--cases", type=int, default=5)
    parser.add_argument("-k", dest="narrow", help="only case ids containing this text")
    args = parser.parse_args()
    spec = matrix.find(args.session)
    cases = chosen_cases(spec, args.cases, args.narrow)
    if not cases:
        raise SystemExit(f"error: no cpu/inductor case of {spec.name}'s committed row matches")
    python = venvs.ensure_venv(spec.name)
    for bytecode in (True, False):
        print(f"import torch, lightning, fresh interpreter, {'with the venv bytecode' if bytecode else 'no bytecode'}: "
              f"{import_seconds(python, bytecode):.1f} s")
    with tempfile.TemporaryDirectory(prefix="cold-case-") as scratch:
        scratch = pathlib.Path(scratch)
        (scratch / "cold_case_probe.py").write_text(PROBE)
        out = scratch / "probe.jsonl"
        workers = pytestrun.Workers(1, "benchmarks/cold_case.py: one worker, so that cases do not share the CPU")
        env = {**pytestrun.clean_env(), **pytestrun.run_env(spec, scratch / "venv-caches", workers),
               pytestrun.COMPILE_CACHES_ENV: str(scratch / "compile-caches"), "COLD_CASE_PROBE_OUT": str(out)}
        env["PYTHONPATH"] += os.pathsep + str(scratch)  # where the probe plugin is
        command = [str(python), *pytestrun.pytest_args(spec, [*[c["nodeid"] for c in cases], "-p", "cold_case_probe",
                                                             f"--results-dir={scratch / 'results'}",
                                                             "--session-name=cold-case", "-q"], workers)]
        started = time.perf_counter()
        done = subprocess.run(command, cwd=paths.ROOT, env=env, capture_output=True, text=True)
        wall = time.perf_counter() - started
        lines = [json.loads(line) for line in out.read_text().splitlines()] if out.exists() else []
    calls = {d["nodeid"]: d for d in lines if d["where"] == "call"}
    protocols = {d["nodeid"]: d for d in lines if d["where"] == "protocol"}
    if not calls:
        raise SystemExit(f"error: the probe saw no case (pytest exit {done.returncode}): {done.stdout[-2000:]}")
    print(f"{spec.name}: {len(cases)} cases cold, one worker, {wall:.0f} s wall for the session's command")
    print(f"  {'case':70} {'protocol':>8} {'call':>6} {'dynamo+aot':>10} {'inductor':>8} {'C++ build':>9} "
          f"{'(runs)':>6} {'other':>6}")
    totals = collections.Counter()
    for case in cases:
        call = calls.get(case["nodeid"])
        if call is None:
            print(f"  {case['case'][:70]:70} not timed (no call: a skip or a setup failure)")
            continue
        parts = split(call)
        totals.update(parts)
        totals["call"] += call["seconds"]
        totals["protocol"] += protocols.get(case["nodeid"], {}).get("seconds", 0.0)
        print(f"  {case['case'][:70]:70} {protocols.get(case['nodeid'], {}).get('seconds', 0.0):8.1f} "
              f"{call['seconds']:6.1f} {parts['dynamo+aot']:10.1f} {parts['inductor']:8.1f} {parts['C++ build']:9.1f} "
              f"{call['counts'].get('compile_file', 0):6} {parts['other']:6.1f}")
    share = {k: totals[k] / totals["call"] * 100 if totals["call"] else 0 for k in ("dynamo+aot", "inductor",
                                                                                       "C++ build", "other")}
    print(f"  of the calls' {totals['call']:.0f} s: " + ", ".join(f"{k} {v:.0f} %" for k, v in share.items())
          + f"; protocol beyond the call (fork, report, caches): {totals['protocol'] - totals['call']:.1f} s in all"
          + f"; median call {statistics.median(c['seconds'] for c in calls.values()):.1f} s")


if __name__ == "__main__":
    main()
