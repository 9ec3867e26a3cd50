"""Checks of a command's input that cost no download: run before any session venv is built.

A case id is looked up in the results files at hand (results/*.jsonl), then in the collection of
a session venv that exists (or of this interpreter, when it has torch). Only where neither can
answer is the id checked by the environment the command builds anyway, and `note()` says so
before the build starts. A script must exist and be Python.
"""

from __future__ import annotations

import importlib.util
import os
import pathlib
import sys

from harness.core import matrix, paths, records, venvs
from harness.core.caseid import UnknownCase
from harness.core.errors import BadInput
from harness.tools.repro.collector import collect


def recorded_ids(directories=None) -> set[str]:
    """The case ids of every results file in `directories` (default: the results directory), each
    file read as it may be damaged (harness.core.records.salvaged)."""
    found: set[str] = set()
    for directory in directories or [paths.results_dir()]:
        for path in paths.results_files(directory):
            try:
                found.update(r["case"] for r in records.salvaged(path) if r["kind"] == "case")
            except OSError as error:  # the other files and a collection still answer
                print(f"note: {path} passed over: {error.strerror or error}", file=sys.stderr)
    return found


def collecting_python(envdir=None, prefer: str | None = None) -> pathlib.Path | None:
    """An interpreter that can collect the cases without building anything: `prefer`'s venv, the
    newest CPU session venv that exists, or this interpreter when it has torch and pytest."""
    names = ([prefer] if prefer else []) + [s.name for s in reversed(matrix.load()) if s.device == "cpu"]
    for name in names:
        python = venvs.venv_python(name, envdir)
        if python.exists():
            return python
    if importlib.util.find_spec("torch") and importlib.util.find_spec("pytest"):
        return pathlib.Path(sys.executable)
    return None


def check_case(case_id: str, envdir=None, session: str | None = None, results=None) -> pathlib.Path | None:
    """Raise UnknownCase (exit 2, the closest ids listed) for a case id that neither the
    results at hand nor a collection in an existing environment knows. Returns the interpreter
    that collected, if one did; where none could, says so on stderr: the id is then checked by
    the environment the command builds."""
    if case_id in recorded_ids(results):
        return None
    python = collecting_python(envdir, session)
    if python is None:
        print(f"note: {case_id!r} is not in the results at hand and no environment exists to collect the cases: "
              "it is checked once the session's environment is built", file=sys.stderr, flush=True)
        return None
    ids = collect(python, [])["ids"]
    if case_id not in ids:
        raise UnknownCase(case_id, sorted(set(ids) | recorded_ids(results)))
    return python


def check_script(path: os.PathLike) -> pathlib.Path:
    """The script as an absolute path; BadInput (exit 2) when it is missing or is not Python."""
    script = pathlib.Path(path).expanduser()
    if not script.is_file():
        raise BadInput(f"no such script: {path}")
    try:
        compile(script.read_bytes(), str(script), "exec")
    except (SyntaxError, ValueError) as exc:  # ValueError: the source holds a null byte
        raise BadInput(f"{path} is not Python: {exc}") from None
    return script.resolve()


def check_session(name: str | None) -> None:
    """matrix.MatrixError (exit 2) for a session the matrix does not have."""
    if name:
        matrix.find(name)
