"""Speed of the matrix, measured side by side on this machine. Prints figures; asserts nothing.

    python benchmarks/speed.py [--session cpu_torch25] [-k EXPR] [--skip-cold-pip]

1. Environment creation for the session's pins: uv cold (empty cache) and warm, against pip
   cold (no cache) and warm (its cache filled by the cold run). Each builds a new venv.
2. The session's wall time through nox: cold (new venv dir, empty compile caches) and warm
   (the same command again: venv reused, inductor cache filled).
3. Harness overhead: in the warm venv, the session's pytest command (xdist worker, timeouts,
   reruns, isolation) against plain `pytest cases/` with the same selection and caches.
4. Per-family time, from the warm session's results file.
Targets: warm environment <= 5 s; warm session <= 1/3 of cold; harness overhead < 5 %.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness import matrix, records  # noqa: E402


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
    from noxfile import HARNESS_REQUIREMENTS

    requirements = [*spec.requirements, *HARNESS_REQUIREMENTS]
    python = python_for(spec)
    figures = {}
    uv_cold_cache = work / "uv-cache"
    pip_cache = work / "pip-cache"
    no_local_wheels = {"PIP_FIND_LINKS": "", "PIP_EXTRA_INDEX_URL": ""}  # the registry only, as uv sees it

    def uv(name, cache):
        venv = work / name
        start = time.perf_counter()
        subprocess.run(["uv", "venv", "-q", "-p", python, str(venv)], check=True)
        subprocess.run(["uv", "pip", "install", "-q", "--python", str(venv / "bin" / "python"), *requirements],
                       check=True, env={**os.environ, **({"UV_CACHE_DIR": str(cache)} if cache else {})})
        figures[name] = time.perf_counter() - start
        shutil.rmtree(venv)

    def pip(name, cache_args):
        venv = work / name
        start = time.perf_counter()
        subprocess.run([python, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", *cache_args, *requirements],
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


def session_runs(spec, work: pathlib.Path, select: list[str]) -> tuple[dict, pathlib.Path]:
    envdir = work / "envs"
    results = work / "results"
    command = [sys.executable, "-m", "nox", "-f", str(ROOT / "noxfile.py"), "-s", spec.name,
               "--envdir", str(envdir), "--", *select]
    env = {records.RESULTS_ENV: str(results)}
    return {"session cold": timed(command, env), "session warm": timed(command, env)}, envdir / spec.name


def overhead(spec, venv: pathlib.Path, work: pathlib.Path, select: list[str]) -> dict:
    from noxfile import case_run_options

    python = str(venv / "bin" / "python")
    caches = {"TORCHINDUCTOR_CACHE_DIR": str(venv / "inductor-cache"), "TRITON_CACHE_DIR": str(venv / "triton-cache"),
              "TORCHINDUCTOR_FX_GRAPH_CACHE": "1", records.RESULTS_ENV: str(work / "overhead")}
    bare = [python, "-m", "pytest", "cases/", "-q", "-p", "no:cacheprovider", *select]
    harness = [python, "-m", "pytest", "cases/", "-q", "-p", "no:cacheprovider", *case_run_options(spec), *select]
    figures = {"plain pytest cases/": [], "session's pytest command": []}
    for _ in range(2):  # alternate, keep the better of two
        figures["plain pytest cases/"].append(timed(bare, caches))
        figures["session's pytest command"].append(timed(harness, caches))
    return {name: min(values) for name, values in figures.items()}


def per_family(path: pathlib.Path) -> dict:
    times: dict[str, float] = {}
    for record in records.read(path):
        if record["kind"] == "case":
            times[record["family"]] = times.get(record["family"], 0.0) + record["duration"]
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--session", default="cpu_torch25")
    parser.add_argument("-k", dest="select", default=None, help="pytest -k expression for the session runs")
    parser.add_argument("--skip-cold-pip", action="store_true", help="pip's cold install downloads GBs again")
    args = parser.parse_args()
    spec = matrix.find(args.session)
    select = ["-k", args.select] if args.select else []
    with tempfile.TemporaryDirectory(prefix="harness-bench-") as tmp:
        work = pathlib.Path(tmp)
        print(f"benchmark: session {spec.name} ({spec.requirements[0]}), {os.cpu_count()} cores, "
              f"selection {args.select or 'all cases'}")
        envs = env_creation(spec, work, args.skip_cold_pip)
        for name, seconds in envs.items():
            print(f"  environment, {name:28s} {seconds:7.1f} s")
        sessions, venv = session_runs(spec, work, select)
        for name, seconds in sessions.items():
            print(f"  {name:40s} {seconds:7.1f} s")
        print(f"  warm/cold session ratio                  {sessions['session warm'] / sessions['session cold']:7.2f}"
              "  (target <= 0.33)")
        costs = overhead(spec, venv, work, select)
        for name, seconds in costs.items():
            print(f"  {name:40s} {seconds:7.1f} s")
        extra = costs["session's pytest command"] / costs["plain pytest cases/"] - 1
        print(f"  harness overhead                         {extra * 100:6.1f} %  (target < 5 %)")
        for family, seconds in sorted(per_family(work / "results" / f"{spec.name}.jsonl").items()):
            print(f"  family {family:33s} {seconds:7.1f} s")
        print(json.dumps({"environments": envs, "sessions": sessions, "overhead": costs}, indent=None))


if __name__ == "__main__":
    main()
