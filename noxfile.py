"""Nox sessions generated from the matrix table in harness/core/matrix.toml; what a session does is
harness.core.pytestrun (its pytest command) and harness.core.venvs (its environment).

    nox                      the main job: the newest torch on CPU
    nox -l                   every session, one line each (* marks the one plain `nox` runs)
    nox -l --json            the same for a CI matrix
    nox -t cpu -l            a group by tag: cpu, cuda, registry, latest, oldest, nightly, lightning
    nox -s cpu_torch25_lightning_newest   torch 2.5 with the newest Lightning that supports it (Lightning cases only)
    nox -s cpu_torch25       run the cases with torch 2.5 on CPU; results/cpu_torch25.jsonl and .xml
    nox -s cpu_torch25 -- cases/test_checkpoint.py -k plain     narrow it, as with pytest
    nox -s cpu_torch25 -- --fresh              run every case afresh (by default a full session reuses
                                               the records of the last run that nothing has changed for)
    nox -s cuda12_torch25 -- --collect-only   build, check the pins and collect, without a GPU
    nox -s tests             the harness's own test suite
"""

from __future__ import annotations

import os
import pathlib
import sys

import nox

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))  # nox does not put it there

from harness.core import installs, limits, matrix, pytestrun, runsession, venvs  # noqa: E402
from harness.core.errors import BadInput  # noqa: E402

nox.needs_version = ">=2025.2.9"
nox.options.default_venv_backend = "uv|virtualenv"
nox.options.error_on_missing_interpreters = True
# Use the interpreters already on the machine: uv must not try to download CPython.
os.environ.setdefault("UV_PYTHON_DOWNLOADS", "never")

SESSIONS = matrix.load()
venvs.find_interpreters(s.python for s in SESSIONS)
# The main job, and the only session plain `nox` runs: the newest torch on CPU.
DEFAULT_SESSION = matrix.main_session(SESSIONS)


def link_venv_by_name(session: nox.Session, spec: matrix.Session) -> None:
    """The harness finds a session's venv by the session's name (venvs.venv_dir: the tools, the
    regression tests, a sweep). nox names it by a hash of the name instead where the path would be long
    (over 87 characters: a checkout under a deep folder, a CI workspace of a long repository name, act's),
    so the name is made a link to it."""
    location = pathlib.Path(session.virtualenv.location)
    by_name = venvs.venv_dir(spec.name, location.parent)
    if by_name.resolve() == location.resolve():  # nox's own name, or already linked to it
        return
    if by_name.is_symlink():  # a link to a venv nox no longer uses
        by_name.unlink()
    if not by_name.exists():
        by_name.symlink_to(location, target_is_directory=True)
        session.log(f"nox named this environment {location.name}: linked as {by_name.name}")


def run_cases(session: nox.Session, spec: matrix.Session) -> None:
    """What every case session does (harness.core.runsession, as `python -m harness run` does it in an
    environment that is already there): check the machine, install the pins, check them, run the
    cases (or, with `-- --collect-only`, collect them: a CUDA session checked without a GPU)."""
    link_venv_by_name(session, spec)

    def install() -> None:
        for name, value in installs.install_environment().items():
            session.log(f"installing with {name}={value} from the environment (recorded in the results)")
        venvs.install_pins(session, spec)

    try:
        runsession.run(spec, session.posargs, "python", session.virtualenv.location,
                       lambda argv, env: session.run(*argv, env=env), install=install)
    except (BadInput, runsession.CarriedFailures) as exc:
        session.error(str(exc))


def _define(spec: matrix.Session) -> None:
    def session_function(session: nox.Session) -> None:
        run_cases(session, spec)

    session_function.__doc__ = spec.description
    session_function.__name__ = spec.name
    nox.session(name=spec.name, python=spec.python, tags=list(spec.tags), reuse_venv=True,
                download_python="never", default=spec is DEFAULT_SESSION)(session_function)


for _spec in SESSIONS:
    _define(_spec)


SUITE_GIB_PER_WORKER = 6  # a test runs a session: torch, inductor, an xdist worker and a forked case at once


def suite_workers() -> int:
    """pytest-xdist workers of the harness's own suite: one a core, as far as memory allows (one more was
    no faster from a clean clone: docs/speed.md, 2026-12-03). Each worker's first test that needs the
    checkout's session venvs builds or checks them, one worker at a time (a lock: tests/conftest.py)."""
    memory_gib = limits.memory_limit_bytes("100%") / 2**30  # all of this machine's memory
    return max(1, min(os.cpu_count() or 1, int(memory_gib // SUITE_GIB_PER_WORKER)))


@nox.session(python=DEFAULT_SESSION.python, download_python="never", default=False)
def tests(session: nox.Session) -> None:
    """Run the harness's own test suite (real torch, real compile, real nox), a worker a core; then the stale rows.

    pytest arguments narrow it (`-- tests/test_x.py -k y`, `-n 1`)."""
    args = list(session.posargs)
    missing = pytestrun.missing_files(args)
    if missing:  # before any install; and under pytest-xdist, pytest's own "not found" error is lost
        session.error(f"no such test file: {missing[0]}")
    wheel = venvs.torch_wheel(DEFAULT_SESSION)  # the main job's torch build, chosen as its session chooses
    session.log(venvs.describe_wheel(wheel))
    for step in venvs.install_steps(DEFAULT_SESSION, wheel, tools=["-e", ".[dev]"]):  # the main job's pins, the tools
        session.install(*step)
    spread = [] if any(a.startswith(("-n", "--numprocesses", "--dist")) or a == "no:xdist" for a in args) \
        else ["-n", str(suite_workers()), "--dist", "loadgroup"]
    # The slowest tests, named in every run's output (CI's too): where the suite's time goes, to keep it in bounds.
    durations = [] if any(a.startswith("--durations") for a in args) else ["--durations=25"]
    # ... and every test's time, in a JUnit file beside the tests venv, to sum by file or by fixture.
    junit = [] if any(a.startswith(("--junitxml", "--junit-xml")) for a in args) else \
        [f"--junitxml={os.path.join(session.virtualenv.location, 'suite-junit.xml')}"]
    # A passing test's temporary folder goes at its end: the workflow tests' act caches hold a torch
    # venv each (5 GB), and kept to the run's end they fill a disk that holds other work.
    retention = ["-o", "tmp_path_retention_policy=failed"]
    session.run("python", "-m", "pytest", *([] if pytestrun.targets_in(args) else ["tests/"]), *spread, *durations,
                *junit, *retention, *args)
    # What a fresh clone's `nox` would measure again: reported here, never a failure of the suite.
    session.run("python", "-m", "harness", "stale")


@nox.session(venv_backend="none", default=False)
def lint(session: nox.Session) -> None:
    """ruff on the project and mypy on the harness (pyproject.toml's rules), with the set-up venv's tools.

    ruff's rules: pycodestyle with the line length, pyflakes, import order, bugbear."""
    session.run(sys.executable, "-m", "ruff", "check", *(session.posargs or ["."]))
    session.run(sys.executable, "-m", "mypy")


# Sessions that run a `python -m harness` command with the session's arguments: name -> what it does.
COMMANDS = {
    "report": "Merge results/*.jsonl into REPORT.md, report.html and report.json (args: python -m harness report -h).",
    "repro": "Write one case as a standalone script, run it in a session's venv, print an issue-ready report (args: "
             "CASE_ID [--session S] [--out FILE] [--no-run]).",
    "bisect": "Run one case across the matrix's torch versions (or Lightning releases at one torch) and name where its "
              "outcome changes (args: CASE_ID [--from 2.1] [--to 2.15] [--no-build] [--along lightning --torch 2.5]).",
    "sweep": "Run a script in the venv of every torch row in a range (or Lightning release at one torch) and print the "
             "version table (args: SCRIPT [--from 2.12] [--to 2.15] [--no-build] [--along lightning --torch 2.5]).",
    "explore": "Draw many more examples for the property cases in a session's venv, shrinking what fails, into "
               "results/explore/ (args: SESSION [--examples N] [pytest args]).",
    "reduce": "Reduce a case's export (or a script) to the smallest plain-torch script that still shows its bug (args: "
              "CASE_ID --session S [--time-limit 600] | --script SCRIPT --session S).",
}


def _command_session(command: str, description: str) -> None:
    def session_function(session: nox.Session) -> None:
        session.run(sys.executable, "-m", "harness", command, *session.posargs)

    session_function.__doc__ = description
    session_function.__name__ = command
    nox.session(name=command, venv_backend="none", default=False)(session_function)


for _command, _description in COMMANDS.items():
    _command_session(_command, _description)
