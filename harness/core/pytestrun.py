"""How a matrix session runs its cases, in one place for the noxfile, the tools, the benchmarks and
the harness's tests: the pytest command, the environment variables it runs with (where its cases'
compile caches live), and the environment of a tool's run that must not inherit a session's or pytest's."""

from __future__ import annotations

import dataclasses
import os
import pathlib

from harness.core import caseid, envcheck, limits, matrix, paths
from harness.core.errors import BadInput

CASES = "cases/"
SESSION_ENV = "HARNESS_SESSION"  # the session a pytest run records as (nox sets it)
WORKERS_ENV = "HARNESS_WORKERS"  # how many xdist workers run a session's cases (default: choose_workers())
WORKERS_BASIS_ENV = "HARNESS_WORKERS_BASIS"  # why that many: the environment record keeps it
EXPLORE_ENV = "HARNESS_EXPLORE"  # N: the property cases draw N examples each (harness.plugin.properties)
# What one worker of a CUDA session may take of the GPU: its cases' CUDA context (about 0.5 GiB each,
# one per forked child at a time), their tensors, and what max-autotune's benchmarks allocate.
GPU_GIB_PER_WORKER = 4
# What one worker of a CPU session may take of the machine's memory: the warm worker (torch, inductor,
# Lightning: about 1.5 GiB) and its case's forked process compiling and running.
CPU_GIB_PER_WORKER = 4


@dataclasses.dataclass(frozen=True)
class Workers:
    """How many xdist workers run a session's cases, and why that many."""
    count: int
    basis: str


def choose_workers(spec: matrix.Session) -> Workers:
    """$HARNESS_WORKERS where set; else as many as the machine's cores and its memory both allow: for a
    CPU session CPU_GIB_PER_WORKER of memory each, for a CUDA session GPU_GIB_PER_WORKER of the GPU's.
    Outcomes do not depend on the count (each case runs in a process of its own with compile caches of
    its own; benchmarks/speed.py --parts workers compares a row at 1 and at N, cell for cell); the count
    and its reason are in the environment record, beside which a case's duration is read."""
    chosen = os.environ.get(WORKERS_ENV, "").strip()
    if chosen:
        if not chosen.isdigit() or int(chosen) < 1:
            raise BadInput(f"${WORKERS_ENV} is {chosen!r}: a number of workers, 1 or more")
        return Workers(int(chosen), f"${WORKERS_ENV}={chosen}")
    cores = os.cpu_count() or 1
    if spec.device != "cuda":
        memory = limits.machine_memory_gib()
        count = max(1, min(cores, int(memory // CPU_GIB_PER_WORKER)))
        return Workers(count, f"{cores} cores, {memory:.0f} GiB of memory at {CPU_GIB_PER_WORKER} GiB a worker")
    gpu_memory = envcheck.gpu_memory_gib()
    if gpu_memory is None:
        return Workers(1, "a CUDA session on a machine whose GPU memory nvidia-smi does not give: one worker")
    count = max(1, min(cores, int(gpu_memory // GPU_GIB_PER_WORKER)))
    return Workers(count, f"{cores} cores, {gpu_memory:.0f} GiB of GPU memory at {GPU_GIB_PER_WORKER} GiB a worker")


COMPILE_CACHES_ENV = "HARNESS_COMPILE_CACHES"  # where a session's cases keep their compile caches, one each


def compile_caches(venv: os.PathLike) -> pathlib.Path:
    """The root of a session's per-case compile caches (harness.plugin.compilecaches): in its venv, so a
    rebuilt venv (changed pins) starts without stale ones."""
    return pathlib.Path(venv) / "compile-caches"


def case_cache_env(spec: matrix.Session, venv: os.PathLike) -> dict:
    """Environment of a session's pytest run as far as compiling goes: each case compiles into caches of
    its own under compile_caches(venv), with torch's own cache defaults but for what the row declares
    (its `env`)."""
    return {COMPILE_CACHES_ENV: str(compile_caches(venv)), **dict(spec.env)}


def script_cache_env(venv: os.PathLike) -> dict:
    """Inductor's and Triton's caches of a tool's script runs in a session venv (repro, reduce, sweep):
    one place in the venv that a run reuses, torch's cache defaults otherwise."""
    root = pathlib.Path(venv) / "script-caches"
    return {"TORCHINDUCTOR_CACHE_DIR": str(root / "inductor"), "TRITON_CACHE_DIR": str(root / "triton")}


# pytest options whose value is the next argument: that value is not a path to run.
_TAKES_VALUE = {"-k", "-m", "-p", "-c", "-o", "-n", "-W", "--maxfail", "--timeout", "--timeout-method",
                "--results-dir", "--session-name", "--case-reruns", "--memory-limit", "--isolation", "--deselect",
                "--ignore", "--ignore-glob", "--rootdir", "--basetemp", "--durations", "--junitxml", "--junit-xml",
                "--dist", "--max-worker-restart", "--capture", "--tb", "-r", "--log-level", "--confcutdir"}


def targets_in(args) -> list[str]:
    """The files, directories and node ids among pytest arguments."""
    found, skip_next = [], False
    for arg in args:
        if skip_next:
            skip_next = False
            continue
        if arg.startswith("-"):
            skip_next = arg in _TAKES_VALUE
            continue
        path = caseid.nodeid_file(arg)
        if (paths.ROOT / path).exists() or pathlib.Path(path).exists():
            found.append(arg)
    return found


def missing_files(args) -> list[str]:
    """The arguments that name a Python file or a node id in one, and are not there."""
    given = set(targets_in(args))
    return [arg for arg in args if not arg.startswith("-") and arg not in given
            and caseid.nodeid_file(arg).endswith(".py")]


def _values(args, option: str) -> list[str]:
    """The values given to `option` among pytest arguments (`--opt V` and `--opt=V`)."""
    found = []
    for index, arg in enumerate(args):
        if arg == option and index + 1 < len(args):
            found.append(args[index + 1])
        elif arg.startswith(option + "="):
            found.append(arg.split("=", 1)[1])
    return found


def _number(text: str, kind=float, least: float = 0) -> bool:
    try:
        return kind(text) >= least
    except ValueError:
        return False


def check_args(args) -> None:
    """BadInput for a session's pytest argument that cannot be right, said before anything is installed or
    run: a case file that is not there, a time limit or rerun count below zero or not a number, a worker
    count that is not one, a memory limit that does not read."""
    args = list(args)
    missing = missing_files(args)
    if missing:
        raise BadInput(f"no such case file: {missing[0]}")
    for option, kind, what in (("--timeout", float, "a number of seconds, 0 or more"),
                               ("--case-reruns", int, "a number of reruns, 0 or more"),
                               ("-n", int, "a number of workers, 0 or more"),
                               ("--numprocesses", int, "a number of workers, 0 or more")):
        for value in _values(args, option):
            if not _number(value, kind) and not (option in ("-n", "--numprocesses") and value in ("auto", "logical")):
                raise BadInput(f"{option} {value!r}: {what}")
    for value in _values(args, "--memory-limit"):
        limits.memory_limit_bytes(value)


def case_options(spec: matrix.Session, workers: Workers | None = None) -> list[str]:
    """How a session runs its cases: in an xdist worker, so that a crash or a hang costs one
    case and not the session (a dead worker is replaced, and xdist's `load` scheduling does
    not hand the case it died on to the next one; its file-grouping modes do, see
    pytest-dev/pytest-xdist#1371), each attempt of a case in a child forked from the warm worker
    (harness.plugin.isolation: no case meets what an earlier one changed), within the row's time limit
    (pytest-timeout's thread method also ends hangs in native code)."""
    return [
        "-p", "harness.plugin",  # cases/conftest.py loads it too: the command does not depend on that
        "--isolation=fork",
        "-p", "xdist", "-n", str((workers or Workers(1, "")).count), "--dist=load",
        "--max-worker-restart=100000",  # each crash costs one case: bounded by the cases
        "--capture=tee-sys",  # sys-level capture only: a dying worker's output reaches its log
        f"--timeout={limits.case_timeout(spec.case_timeout)}", "--timeout-method=thread",
        "-rfEX",
        "--continue-on-collection-errors",  # a file that cannot be collected is its own record; the others run
        *(["--lightning-cases"] if spec.lightning_of else []),  # the Lightning axis: only what Lightning touches
        *(["--cuda-cases"] if spec.device == "cuda" else []),  # the row's CPU cells are its CPU session's
    ]


COLLECT_ONLY = ("--collect-only", "--co")
FRESH = "--fresh"  # after `--`: reuse nothing from the last run (harness/plugin/reuse.py)


def collect_only(args) -> bool:
    """The session builds its environment, checks its pins and collects its cases, running none:
    how a CUDA session is checked on a machine without a GPU."""
    return any(arg in COLLECT_ONLY for arg in args)


def pytest_args(spec: matrix.Session, args=(), workers: Workers | None = None) -> list[str]:
    """`python` arguments of the session's pytest run: every case file, unless `args` name
    files or node ids, which then narrow the run to them; `workers` (default: choose_workers(spec))."""
    args = list(args)
    workers = workers or choose_workers(spec)
    return ["-m", "pytest", *([] if targets_in(args) else [CASES]), *case_options(spec, workers), *args]


def run_env(spec: matrix.Session, venv: os.PathLike, workers: Workers | None = None) -> dict:
    """Environment variables of the session's pytest run. Python writes bytecode where a machine told it not
    to (PYTHONDONTWRITEBYTECODE, empty: unset): else every worker and every tool's process compiles torch's
    thousands of modules from source again, 10-20 s of CPU each, and nothing they run differs."""
    workers = workers or choose_workers(spec)
    return {SESSION_ENV: spec.name, WORKERS_BASIS_ENV: workers.basis, "PYTHONDONTWRITEBYTECODE": "",
            **case_cache_env(spec, venv)}


# Environment that must not leak from a nox session or a surrounding pytest into a tool's runs.
DROP_ENV = (SESSION_ENV, paths.RESULTS_ENV, COMPILE_CACHES_ENV, "PYTEST_ADDOPTS", "PYTEST_PLUGINS")


def clean_env(**extra) -> dict:
    """The environment of a tool's run in a session venv (a collection, a script): this one less
    what a session or a surrounding pytest set, the checkout on PYTHONPATH, then `extra`."""
    env = {k: v for k, v in os.environ.items() if k not in DROP_ENV}
    env["PYTHONPATH"] = os.pathsep.join([str(paths.ROOT)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    return {**env, **extra}
