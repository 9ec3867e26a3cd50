"""How a matrix session runs its cases, in one place for the noxfile, the tools, the benchmarks and
the harness's tests: the pytest command, the environment variables it runs with (the compile caches
in its venv), and the environment of a tool's run that must not inherit a session's or pytest's."""

from __future__ import annotations

import os
import pathlib

from harness.core import caseid, matrix, paths

CASES = "cases/"
SESSION_ENV = "HARNESS_SESSION"  # the session a pytest run records as (nox sets it)


def compile_cache_env(venv: os.PathLike) -> dict:
    """Inductor's and Triton's caches live in the session's venv: a re-run reuses compiled
    kernels, and a rebuilt venv (changed pins) starts without stale ones."""
    root = pathlib.Path(venv)
    return {
        "TORCHINDUCTOR_CACHE_DIR": str(root / "inductor-cache"),
        "TRITON_CACHE_DIR": str(root / "triton-cache"),
        "TORCHINDUCTOR_FX_GRAPH_CACHE": "1",  # off by default before torch 2.4
    }


# pytest options whose value is the next argument: that value is not a path to run.
_TAKES_VALUE = {"-k", "-m", "-p", "-c", "-o", "-n", "-W", "--maxfail", "--timeout", "--timeout-method",
                "--results-dir", "--session-name", "--case-reruns", "--memory-limit", "--isolation", "--deselect", "--ignore",
                "--ignore-glob", "--rootdir", "--basetemp", "--durations", "--junitxml", "--junit-xml",
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


def case_options(spec: matrix.Session) -> list[str]:
    """How a session runs its cases: in an xdist worker, so that a crash or a hang costs one
    case and not the session (a dead worker is replaced, and xdist's `load` scheduling does
    not hand the case it died on to the next one; its file-grouping modes do, see
    pytest-dev/pytest-xdist#1371), each attempt of a case in a child forked from the warm worker
    (harness.plugin.isolation: no case meets what an earlier one changed), within the row's time limit
    (pytest-timeout's thread method also ends hangs in native code)."""
    return [
        "-p", "harness.plugin",  # cases/conftest.py loads it too: the command does not depend on that
        "--isolation=fork",
        "-p", "xdist", "-n", os.environ.get("HARNESS_WORKERS", "1"), "--dist=load",
        "--max-worker-restart=100000",  # each crash costs one case: bounded by the cases
        "--capture=tee-sys",  # sys-level capture only: a dying worker's output reaches its log
        f"--timeout={spec.case_timeout}", "--timeout-method=thread",
        "-rfEX",
        *(["--lightning-cases"] if spec.lightning_of else []),  # the Lightning axis: only what Lightning touches
    ]


COLLECT_ONLY = ("--collect-only", "--co")
FRESH = "--fresh"  # after `--`: reuse nothing from the last run (harness/plugin/reuse.py)


def collect_only(args) -> bool:
    """The session builds its environment, checks its pins and collects its cases, running none:
    how a CUDA session is checked on a machine without a GPU."""
    return any(arg in COLLECT_ONLY for arg in args)


def pytest_args(spec: matrix.Session, args=()) -> list[str]:
    """`python` arguments of the session's pytest run: every case file, unless `args` name
    files or node ids, which then narrow the run to them."""
    args = list(args)
    return ["-m", "pytest", *([] if targets_in(args) else [CASES]), *case_options(spec), *args]


def run_env(spec: matrix.Session, venv: os.PathLike) -> dict:
    """Environment variables of the session's pytest run."""
    return {SESSION_ENV: spec.name, **compile_cache_env(venv)}


# Environment that must not leak from a nox session or a surrounding pytest into a tool's runs.
DROP_ENV = (SESSION_ENV, paths.RESULTS_ENV, "PYTEST_ADDOPTS", "PYTEST_PLUGINS")


def clean_env(**extra) -> dict:
    """The environment of a tool's run in a session venv (a collection, a script): this one less
    what a session or a surrounding pytest set, the checkout on PYTHONPATH, then `extra`."""
    env = {k: v for k, v in os.environ.items() if k not in DROP_ENV}
    env["PYTHONPATH"] = os.pathsep.join([str(paths.ROOT)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    return {**env, **extra}
