"""One case as a short standalone script for an upstream issue: `python -m harness repro CASE_ID`.

The script is the case itself: its test function called with its parameters written as literals,
the helpers of its module it uses, and the comparison the matrix runs (`Case` of harness/casekit.py,
carried as it is). Its last line is `OUTCOME: ...` as the matrix would classify the run, and its exit
status that outcome's (harness.outcomes). It needs only torch, and Lightning where the case uses it.

`repro` finds the case by collecting the cases in the session's venv (this module is loaded there
as a pytest plugin), writes the script, runs it there with pytest and the harness unimportable, and
prints an issue: a title, what goes wrong, the torch versions where it passes and fails (from the
results files at hand), the script, its output, what was expected, collect_env folded away.
`repro --all --session S` does it for every case of a session and compares each script's outcome
with what the session's results file records.
"""

from __future__ import annotations

import ast
import concurrent.futures
import dataclasses
import difflib
import json
import os
import pathlib
import re
import statistics
import subprocess
import sys
import tempfile

from harness import outcomes, records, sessions
from harness.repro_issue import across_versions, issue_markdown
from harness.repro_property import chosen_example
from harness.repro_script import BLOCKED, ReproError, build_script, line_limit, script_name

__all__ = ["ReproError", "UnknownCase", "build_script", "line_limit", "script_name", "command", "collect", "run_script"]
ROOT = sessions.ROOT
CASES_DIR = ROOT / "cases"
DUMP_ENV = "HARNESS_REPRO_DUMP"  # set: this module, loaded as a pytest plugin, dumps the collection
CASE_ENV = "HARNESS_REPRO_CASES"  # the case ids to describe, one per line; "*": every case
OUTCOME_LINE = re.compile(r"^OUTCOME: (\w+)", re.M)
# Environment that must not leak from a nox session or a surrounding pytest into the runs.
DROP_ENV = ("HARNESS_SESSION", "HARNESS_RESULTS_DIR", "PYTEST_ADDOPTS", "PYTEST_PLUGINS")


class UnknownCase(ReproError):
    """No collected case has this id; the message lists the closest ones."""

    def __init__(self, case_id: str, ids: list[str]):
        close = difflib.get_close_matches(case_id, ids, n=5, cutoff=0.6)
        close += [c for c in difflib.get_close_matches(case_id, ids, n=5, cutoff=0.0) if c not in close]
        super().__init__(f"unknown case {case_id!r}; closest case ids:\n" + "\n".join(f"  {c}" for c in close[:5]))


# --- collecting (this module as a pytest plugin, inside the session's venv) ---------------------

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

    from harness.caseid import case_identity

    identity = case_identity(item)
    callspec = getattr(item, "callspec", None)
    return {
        **identity, "path": str(item.path), "name": item.name,
        "function": getattr(item, "originalname", None) or item.name.split("[")[0],
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
    from harness.caseid import case_identity

    wanted = set(filter(None, os.environ.get(CASE_ENV, "").split("\n")))
    ids, cases = [], {}
    for item in session.items:
        case_id = case_identity(item)["case"]
        ids.append(case_id)
        if ("*" in wanted or case_id in wanted) and case_id not in cases:
            cases[case_id] = _describe(item)
    pathlib.Path(target).write_text(json.dumps({"ids": ids, "cases": cases}, indent=1))


def clean_env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in DROP_ENV}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    return {**env, **extra}


def collect(python, case_ids: list[str], timeout: float = 900) -> dict:
    """Collect the cases with `python` (an interpreter with torch and pytest): every case id
    ("ids") and the description of each of `case_ids` ("cases"; ["*"]: all)."""
    with tempfile.TemporaryDirectory(prefix="harness-repro-") as tmp:
        dump = pathlib.Path(tmp) / "collected.json"
        command = [str(python), "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                   "-p", "no:harness.plugin", "-p", "harness.repro", str(CASES_DIR)]
        try:
            done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                                  env=clean_env(**{DUMP_ENV: str(dump), CASE_ENV: "\n".join(case_ids)}))
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


# --- running ---------------------------------------------------------------------------------------------

def run_script(python, script: pathlib.Path, timeout: float = 900) -> dict:
    """Run the script with `python` in isolated mode (-I), from an empty directory, with pytest
    and the harness unimportable: proof that it needs neither."""
    code = ("import runpy, sys\n"
            f"for name in {BLOCKED!r}:\n    sys.modules[name] = None\n"
            f"sys.argv = [{str(script)!r}]\n"
            f"runpy.run_path({str(script)!r}, run_name='__main__')\n")
    with tempfile.TemporaryDirectory(prefix="harness-repro-run-") as cwd:
        try:
            done = subprocess.run([str(python), "-I", "-c", code], cwd=cwd, env=clean_env(), timeout=timeout,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace")
            output, returncode = done.stdout, done.returncode
        except subprocess.TimeoutExpired as exc:
            output = exc.stdout if isinstance(exc.stdout, str) else (exc.stdout or b"").decode(errors="replace")
            output, returncode = output + f"\n[timed out after {timeout:.0f} s]", None
    found = OUTCOME_LINE.findall(output)
    return {"returncode": returncode, "output": output, "outcome": found[-1] if found else None}


def collect_env(python, timeout: float = 300) -> str:
    try:
        done = subprocess.run([str(python), "-m", "torch.utils.collect_env"], cwd=tempfile.gettempdir(),
                              env=clean_env(), capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"collect_env failed: {exc}"
    return (done.stdout.strip() or done.stderr.strip()) or f"collect_env printed nothing (exit {done.returncode})"


# --- the commands ------------------------------------------------------------------------------------------

def _session_python(args) -> tuple[pathlib.Path, str | None]:
    if args.python:
        return pathlib.Path(args.python), None
    session = args.session or default_session(args.envdir)
    return sessions.ensure_venv(session, args.envdir), session


def default_session(envdir=None) -> str:
    """The newest plain CPU session whose venv exists, else the newest plain CPU session."""
    from harness import matrix

    plain = [s for s in matrix.load() if s.device == "cpu" and not s.nightly and not s.label]
    existing = [s for s in plain if sessions.venv_python(s.name, envdir).exists()]
    return (existing or plain)[-1].name


def command(args) -> int:
    """`python -m harness repro CASE_ID`: writes the script and the issue; 0 once the script ran
    and printed an outcome (or was written, with --no-run), 1 when it printed none."""
    if args.all:
        return check_session(args)
    python, session = _session_python(args)
    info = collect(python, [args.case])["cases"][args.case]
    if session:  # a property case replays the failing example the session's record lists
        _, record = records.find_case(records.results_path(records.results_dir(ROOT / "results"), session), args.case)
        info["property_example"] = chosen_example(record, info["expected"])
    out = pathlib.Path(args.out) if args.out else records.results_dir(ROOT / "results") / "repro" / script_name(args.case)
    text = build_script(info)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    print(f"wrote {out} ({text.count(chr(10))} lines)", file=sys.stderr)
    if args.no_run:
        return 0
    print(f"running it with {python} ...", file=sys.stderr, flush=True)
    result = run_script(python, out)
    rows = across_versions(args.case, [records.results_dir(ROOT / "results"), *(args.results or [])])
    issue = issue_markdown(info, text, out, result, collect_env(python), rows)
    out.with_suffix(".md").write_text(issue)
    print(issue)
    print(f"wrote {out} and {out.with_suffix('.md')}", file=sys.stderr)
    if result["outcome"] is None:
        print("error: the script printed no OUTCOME line (crashed or timed out)", file=sys.stderr)
        return 1
    recorded = next((r["outcome"] for r in rows if r["session"] == session), None)
    if recorded and recorded != result["outcome"]:
        print(f"note: the matrix records {recorded} in {session}, the script gave {result['outcome']}", file=sys.stderr)
    return 0


def check_session(args) -> int:
    """Every case of a session as a script, run in its venv, against what its results file records:
    0 when every outcome matches and every script is within its line limit (repro_script.line_limit)."""
    python, session = _session_python(args)
    results = records.results_path(records.results_dir(ROOT / "results"), session)
    found = {} if args.no_run else {r["case"]: r for r in records.read(results) if r["kind"] == "case"}
    recorded = {case_id: r["outcome"] for case_id, r in found.items()}
    collected = collect(python, ["*"])
    for case_id, info in collected["cases"].items():
        info["property_example"] = chosen_example(found.get(case_id), info["expected"])
    out = pathlib.Path(args.out or tempfile.mkdtemp(prefix=f"repro-{session}-"))
    out.mkdir(parents=True, exist_ok=True)
    lengths, limits, mismatches, unexported, scripts = {}, {}, [], [], {}
    for case_id in collected["cases"]:
        try:
            text = build_script(collected["cases"][case_id])
        except ReproError as exc:
            unexported.append(f"{case_id}: {exc}")
            continue
        scripts[case_id] = out / script_name(case_id)
        scripts[case_id].write_text(text)
        lengths[case_id] = text.count("\n")
        limits[case_id] = line_limit(collected["cases"][case_id])
    # Scripts are separate processes: --jobs of them at a time, reported in the order of the cases.
    with concurrent.futures.ThreadPoolExecutor(max(args.jobs, 1)) as pool:
        runs = {case_id: pool.submit(run_script, python, path) for case_id, path in scripts.items()} \
            if not args.no_run else {}
        for number, case_id in enumerate(scripts, 1):
            got = runs[case_id].result()["outcome"] if runs else None
            want = recorded.get(case_id, "not run")
            if runs and got != want:
                mismatches.append(f"{case_id}: script {got}, matrix {want}")
            print(f"[{number}/{len(scripts)}] {lengths[case_id]:4d} lines  {got or '-':10s} {case_id}", flush=True)
    over = sorted((n, c) for c, n in lengths.items() if n > limits[c])
    print(f"{session}: {len(lengths)} scripts in {out}; lines median {statistics.median(lengths.values()):.0f}, "
          f"largest {max(lengths.values())}; over their limit: {len(over)}; outcome mismatches: {len(mismatches)}; "
          f"not exported: {len(unexported)}")
    for line in [f"{c}: {n} lines" for n, c in over] + mismatches + unexported:
        print(f"  {line}")
    return 0 if not (over or mismatches or unexported) else 1
