"""`python -m harness explore SESSION [--examples N] [pytest args]` (`nox -s explore`): the property
cases with many more examples, in a matrix session's venv, shrinking what fails; its records go to
results/explore/, apart from the table's (what it found: `python -m harness explore-summary`)."""

from __future__ import annotations

import os
import subprocess

from harness.core import matrix, paths, pytestrun, runsession, venvs
from harness.core.errors import BadInput


def command(session: str | None, examples: int, pytest_args: list[str]) -> int:
    if not session or session.startswith("-"):
        raise BadInput("name a matrix session first: nox -s explore -- cpu_torch215 [--examples N] [pytest args]")
    spec = matrix.find(session)  # an unknown session is bad input, before any build
    if examples < 1:
        raise BadInput(f"--examples wants a positive number of examples, not {examples}")
    python = venvs.ensure_venv(spec.name)
    assert python is not None  # ensure_venv builds the venv or raises
    env = {**os.environ, **runsession.session_env(spec, venvs.venv_of(python)), pytestrun.EXPLORE_ENV: str(examples)}
    select = [] if "-k" in pytest_args else ["-k", "property"]
    explored = paths.results_subdir(paths.EXPLORE)  # apart from the table's records
    argv = [str(python), *pytestrun.pytest_args(spec, [*select, "--results-dir", str(explored), *pytest_args])]
    return subprocess.run(argv, cwd=paths.ROOT, env=env).returncode
