"""Collecting the cases for a reproduction, bisect and the commands' input checks: `collect(python,
ids)` runs pytest's collection with `python` (a session's venv), where this module is loaded as a
pytest plugin (`-p harness.tools.repro.collector`, without the harness's own plugin) and writes what
it found: every case id, and for the ids asked for what a script needs (its function, its
parameters as literals, what it declares for that torch, its skip marks)."""

from __future__ import annotations

import ast
import dataclasses
import json
import os
import pathlib
import subprocess
import tempfile

from harness.core import caseid, outcomes, paths, pytestrun
from harness.core.caseid import UnknownCase
from harness.tools.repro.errors import ReproError

DUMP_ENV = "HARNESS_REPRO_DUMP"  # set: this module, loaded as a pytest plugin, dumps the collection
CASE_ENV = "HARNESS_REPRO_CASES"  # the case ids to describe, one per line; "*": every case
PLUGIN = "harness.tools.repro.collector"


def _literal(value) -> str | None:
    """Source text that rebuilds `value` (a torch dtype, or a Python literal), else None."""
    import torch

    if isinstance(value, torch.dtype):
        return repr(value)  # 'torch.bfloat16'
    try:
        text = repr(value)
        rebuilt = ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None
    return text if rebuilt == value and type(rebuilt) is type(value) else None


def _skips(item) -> list[dict]:
    """The item's skip marks: a string condition is kept to be evaluated where the script runs; a
    condition pytest evaluated here is kept only when it holds (a CUDA case gets its own guard)."""
    found = []
    for mark in item.iter_markers("skip"):
        found.append({"condition": "True", "reason": mark.kwargs.get("reason") or (mark.args or ["skip"])[0]})
    for mark in item.iter_markers("skipif"):
        for condition in mark.args or [mark.kwargs.get("condition", True)]:
            reason = mark.kwargs.get("reason", "")
            if isinstance(condition, str):
                found.append({"condition": condition, "reason": reason})
            elif condition and "CUDA" not in reason:
                found.append({"condition": "True", "reason": reason})
    return found


def _describe(item) -> dict:
    import inspect

    import torch

    identity = caseid.case_identity(item)
    callspec = getattr(item, "callspec", None)
    return {
        **identity, "path": str(item.path), "name": item.name,
        "function": caseid.function_name(item),
        "argnames": list(inspect.signature(item.function).parameters),
        "params": {n: _literal(v) for n, v in (callspec.params.items() if callspec else ())},
        "expected": [dataclasses.asdict(e) for e in outcomes.declared_for(item, torch.__version__)],
        "skips": _skips(item), "doc": inspect.getdoc(item.function) or "",
        "torch": torch.__version__,
    }


def pytest_collection_finish(session):
    target = os.environ.get(DUMP_ENV)
    if not target:
        return
    wanted = set(filter(None, os.environ.get(CASE_ENV, "").split("\n")))
    ids, cases = [], {}
    for item in session.items:
        case_id = caseid.case_identity(item)["case"]
        ids.append(case_id)
        if ("*" in wanted or case_id in wanted) and case_id not in cases:
            cases[case_id] = _describe(item)
    pathlib.Path(target).write_text(json.dumps({"ids": ids, "cases": cases}, indent=1))


def collect(python, case_ids: list[str], timeout: float = 900) -> dict:
    """Collect the cases with `python` (an interpreter with torch and pytest): every case id
    ("ids") and the description of each of `case_ids` ("cases"; ["*"]: all)."""
    with tempfile.TemporaryDirectory(prefix="harness-repro-") as tmp:
        dump = pathlib.Path(tmp) / "collected.json"
        command = [str(python), "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                   "-p", "no:harness.plugin", "-p", PLUGIN, str(paths.CASES)]
        try:
            done = subprocess.run(command, cwd=paths.ROOT, capture_output=True, text=True, timeout=timeout,
                                  env=pytestrun.clean_env(**{DUMP_ENV: str(dump), CASE_ENV: "\n".join(case_ids)}))
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise ReproError(f"collecting the cases with {python} failed: {exc}") from exc
        if not dump.exists():
            output = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
            raise ReproError(f"collecting the cases with {python} failed (exit {done.returncode}):\n{output}")
        collected = json.loads(dump.read_text())
    missing = [c for c in case_ids if c != "*" and c not in collected["cases"]]
    if missing:
        raise UnknownCase(missing[0], collected["ids"])
    return collected
