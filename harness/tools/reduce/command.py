"""The smallest plain-torch script that still shows a case's bug: `python -m harness reduce CASE_ID --session S`.

The starting point is the script `repro` exports, less its plumbing (the EXPECTED table, the
OUTCOME classifier, the exit codes): the case's call at module level, so that the bug raises or
asserts and the script exits non-zero. The rewrites (harness.tools.reduce: inline, materialise,
tensors, passes) and pysource-minimize's deletions then shorten it in turn, keeping a
candidate only where the interestingness test of harness.tools.reduce.check holds: it fails on the
failing session (the one given) with the recorded exception type and message pattern (the declared
`match` of a known bug or limitation, else the recorded message's first line, which keeps a
semantic case's figure), and passes on a session where the matrix records a pass (or fixed), the
nearest one, or, where no row passes, on the failing session with torch.compile replaced by the
identity (the differential check).

Candidates run forked from a warm process per venv (harness.tools.scriptrun.WarmRunner), each result
cached by the candidate's text. Reduction stops when it has made --max-runs candidate runs (work,
so that what a maintainer receives does not depend on what else the machine ran), or at --time-limit
where one is given, keeping the smallest candidate found; a script stopped early says so in its
header. The result is then run afresh (new processes) on both versions, or with and without
torch.compile. `--script SCRIPT` reduces a user's script instead: its own failure on --session is the
pattern, --passing names the session it must pass on (without it: the differential check).
"""

from __future__ import annotations

import ast
import hashlib
import pathlib
import sys
import tempfile
import time

from harness.core import outcomes, paths, records, venvs
from harness.core.errors import BadInput
from harness.tools import preflight, scriptrun
from harness.tools.reduce import inline as reduce_inline
from harness.tools.reduce import materialise as reduce_materialise
from harness.tools.reduce import names as reduce_names
from harness.tools.reduce import passes as reduce_passes
from harness.tools.reduce import tensors as reduce_tensors
from harness.tools.reduce.check import (
    BudgetSpent,
    Interestingness,
    Signature,
    check_words,
    line_count,
    message_pattern,
    script_signature,
    size,
)
from harness.tools.repro.collector import collect
from harness.tools.repro.command import collect_env
from harness.tools.repro.errors import ReproError
from harness.tools.repro.issue import across_versions, issue_markdown
from harness.tools.repro.property_example import chosen_example
from harness.tools.repro.script import build_script, script_name

PLUMBING_NAMES = {"EXPECTED", "declared"}


def signature_of(record: dict, expected: list[dict]) -> Signature:
    """The signature of a recorded failure: a known bug or limitation by the declaration it
    matched (its exception names and `match`), a plain failure by its exception and message."""
    exception = (record.get("exc_type") or "").rsplit(".", 1)[-1]
    if not exception:
        raise ReproError(f"the record of {record.get('case')} names no exception: nothing to reduce against")
    refs = [record["reference"]] if record.get("reference") else []
    declared = next((e for e in expected if e["kind"] == record["outcome"] and e["ref"] in refs and e.get("match")),
                    None)
    return Signature(exception, declared["match"] if declared else message_pattern(record.get("message") or ""))


def strip_plumbing(source: str) -> str:
    """A `repro` script as a plain one: no EXPECTED table or classifier, the `__main__` block's
    statements at module level with the case's call out of its try, no OUTCOME line or exit code."""
    tree = ast.parse(source)
    body = []
    for node in tree.body:
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and node is tree.body[0]:
            continue  # the docstring
        if isinstance(node, (ast.Assign, ast.FunctionDef)) and (
                getattr(node, "name", None) in PLUMBING_NAMES
                or any(isinstance(t, ast.Name) and t.id in PLUMBING_NAMES for t in getattr(node, "targets", []))):
            continue
        if isinstance(node, ast.If) and "__name__" in ast.unparse(node.test):
            for statement in node.body:
                if isinstance(statement, ast.Try):
                    body.extend(statement.body)
                elif not (isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call)
                          and ast.unparse(statement.value.func) in ("print", "sys.exit")):
                    body.append(statement)
            continue
        body.append(node)
    tree.body = body
    return ast.unparse(ast.fix_missing_locations(tree)) + "\n"


def imported_modules(source: str) -> list[str]:
    """The modules `source` imports, and those its `need("module.name")` calls import."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module)
        elif (isinstance(node, ast.Call) and getattr(node.func, "id", None) == "need" and node.args
              and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            found.add(node.args[0].value.rpartition(".")[0])
    return sorted(found - {""})


def tidy(source: str) -> str:
    """`source` less the bare constants (`0`) the reducer leaves where it emptied a statement."""
    tree = ast.parse(source)
    for node in ast.walk(tree):
        for field in ("body", "orelse", "finalbody"):
            body = getattr(node, field, None)
            if isinstance(body, list) and body and all(isinstance(s, ast.stmt) for s in body):
                kept = [s for s in body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
                setattr(node, field, kept or ([] if field != "body" else [ast.Pass()]))
    return ast.unparse(ast.fix_missing_locations(tree)) + "\n"


def passes(test: Interestingness) -> tuple:
    """The rewrites, in the order `improve` tries them: what removes the harness's shapes first (calls
    inlined, lookups and generated code materialised), then names put where they are read, literal
    tensors, and the small ones."""
    return (reduce_inline.PASSES + (reduce_materialise.materialise_exec(test.exec_texts),) + reduce_materialise.PASSES
            + reduce_names.PASSES + reduce_tensors.PASSES + reduce_passes.PASSES)


def minimize(source: str, test: Interestingness) -> tuple[str, bool]:
    """(the smallest interesting source found, whether the reducer finished before the deadline):
    the rewrites (passes), then pysource-minimize's deletions, in turn until neither finds anything,
    tidied where the tidy version is interesting too."""
    import pysource_minimize

    test.best = source
    result, finished, seen = source, True, set()
    try:
        # The rewrites first: inlined and materialised, the script has far less for the deletions to try.
        result = reduce_passes.improve(result, test, passes(test))
        while result not in seen:  # deletions, then the rewrites that let more go, until neither finds anything
            seen.add(result)
            result = reduce_passes.improve(pysource_minimize.minimize(result, test), test, passes(test))
        result = reduce_passes.improve(result, test, reduce_passes.FINAL_PASSES)
    except BudgetSpent as spent:
        result, finished, test.stopped_by = test.best, False, str(spent)
    if not test.cache.get(hashlib.sha256(result.encode()).hexdigest()) or size(test.best) < size(result):
        result = test.best  # a rewrite that split a line and let nothing go is not kept
    tidied = tidy(result)
    # one more check, past the budget if need be
    test.deadline = None if test.deadline is None else max(test.deadline, time.monotonic() + 120)
    test.max_runs = None if test.max_runs is None else max(test.max_runs, test.runs + 2)
    return (tidied if tidied == result or test(tidied) else result), finished


# --- the command --------------------------------------------------------------------------------------------

def recorded_failure(case_id: str, session: str) -> dict:
    path = paths.results_path(session)
    _, record = records.find_case(path, case_id)
    if record is None:
        raise BadInput(f"{path} has no record of {case_id}: run `nox -s {session}` first")
    if record["outcome"] not in outcomes.RAISED:
        raise BadInput(f"the matrix records {record['outcome']} for {case_id} on {session}: nothing to reduce")
    return record


def passing_session(case_id: str, session: str, envdir=None) -> str | None:
    """A plain row where the matrix records a pass (or fixed) for the case: one whose venv is built
    if any, the nearest torch to the failing session's otherwise."""
    rows = across_versions(case_id, [paths.results_dir()])
    failing = next((i for i, r in enumerate(rows) if r["session"] == session), len(rows))
    passing = [(i, r["session"]) for i, r in enumerate(rows)
               if r["outcome"] in outcomes.PASSING and r["label"] is None and not r["nightly"]]
    passing.sort(key=lambda item: (not venvs.venv_python(item[1], envdir).exists(), abs(item[0] - failing)))
    return passing[0][1] if passing else None


def default_out(name: str) -> pathlib.Path:
    return paths.results_subdir(paths.REDUCE) / name


def command(args) -> int:
    """0 when a reduced script was written and, run afresh, fails on the failing version and passes
    where the check says (the passing row, or without torch.compile); 1 when the starting script
    does not show the bug or the result does not hold afresh; 2 for bad input (before any
    environment is built)."""
    if bool(args.case) == bool(args.script):
        raise BadInput("reduce takes a CASE_ID or --script SCRIPT (one of them)")
    if args.max_runs < 1 or (args.time_limit is not None and args.time_limit <= 0):
        raise BadInput(f"--max-runs must be a positive number of runs and --time-limit of seconds "
                       f"(got {args.max_runs} and {args.time_limit})")
    preflight.check_session(args.session)
    preflight.check_session(args.passing)
    script = preflight.check_script(args.script) if args.script else None
    record: dict | None  # the case's recorded failure; None for --script
    if args.case:
        preflight.check_case(args.case, args.envdir, args.session)
        record = recorded_failure(args.case, args.session)
        passing = args.passing or passing_session(args.case, args.session, args.envdir)
    else:
        record, passing = None, args.passing
    if passing and args.no_build and not venvs.venv_python(passing, args.envdir).exists():
        print(f"warning: {passing} has no environment (--no-build): the differential check instead", file=sys.stderr)
        passing = None
    python = venvs.ensure_venv(args.session, args.envdir, build=not args.no_build)
    if python is None:
        raise venvs.SessionError(f"{args.session} has no environment (--no-build)")
    passing_python = venvs.ensure_venv(passing, args.envdir) if passing else None
    print(f"the check: {check_words(args.session, passing)}", file=sys.stderr, flush=True)
    if record is not None:  # a case: its export, less the plumbing
        info = collect(python, [args.case])["cases"][args.case]
        example = chosen_example(record, info["expected"])
        if example:  # a property case: the script replays that example, and the bug is the example's error
            info["property_example"] = example
            exception, _, message = example["error"].partition(": ")
            record = {**record, "exc_type": exception, "message": message}
        full = build_script(info)
        start, signature = strip_plumbing(full), signature_of(record, info["expected"])
        name = script_name(args.case).replace("repro_", "reduced_", 1)
        origin = args.case
    else:
        assert script is not None  # a CASE_ID or a --script, one of them (checked above)
        info, full = None, script.read_text()
        start, signature = (strip_plumbing(full) if "OUTCOME:" in full else full), None
        name = f"{script.stem}_reduced.py"
        origin = script.name
    out = pathlib.Path(args.out) if args.out else default_out(name)
    started = time.monotonic()
    reduced, signature, test, finished = _reduce(args, start, signature, python, passing_python, passing, script)
    seconds = time.monotonic() - started
    header = (f"# Reduced from {origin} by torch-compile-matrix: fails on {args.session}, "
              + (f"passes on {passing}" if passing else "passes there without torch.compile") + ".\n"
              + ("" if finished else f"# Stopped early, at {test.stopped_by}: a larger --max-runs may shorten it.\n"))
    text = header + reduced
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    print(f"reduced {origin}: {line_count(start)} -> {line_count(text)} lines in {seconds:.0f} s "
          f"({test.checks} checks, {test.runs} runs; {'done' if finished else f'stopped at {test.stopped_by}'})")
    holds, verdict = _verdict(args, out, signature, python, passing_python, passing)
    print(f"wrote {out}", file=sys.stderr)
    print(text)
    if record is not None and holds:  # a case's issue: the reduced script, the whole export folded below it
        result = {"returncode": verdict.code, "output": verdict.output, "outcome": record["outcome"]}
        rows = across_versions(args.case, [paths.results_dir()])
        issue = issue_markdown(info, text, out, result, collect_env(python), rows, full=full)
        out.with_suffix(".md").write_text(_with_check(issue, args.session, passing, signature))
        print(f"wrote {out.with_suffix('.md')}", file=sys.stderr)
    if not holds:
        print("error: run afresh, the reduced script does not show the bug as the candidates did", file=sys.stderr)
        return 1
    return 0


def _reduce(args, start: str, signature: Signature | None, python, passing_python, passing: str | None, script):
    """(the reduced source, the signature, the test, whether it finished) from warm runners of both venvs
    (the failing one alone for the differential check)."""
    preload = imported_modules(start)  # each candidate then pays its own work only
    started = time.monotonic()
    with scriptrun.WarmRunner(python, venvs.venv_of(python), preload=preload) as failing_runner:
        passing_runner = scriptrun.WarmRunner(passing_python, venvs.venv_of(passing_python), preload=preload) \
            if passing_python else None
        try:
            first = failing_runner.run(_write(start), timeout=args.timeout)
            if signature is None:  # --script: the script's own failure is what it must keep showing
                if first.outcome != "fail" or not first.exception:
                    raise ReproError(f"{script} does not fail with an exception on {args.session} "
                                     f"({first.outcome}, {first.exit}): nothing to reduce")
                signature = script_signature(first)
            print(f"the bug: {signature} on {args.session}", file=sys.stderr, flush=True)
            test = Interestingness(signature, failing_runner, passing_runner,
                                   deadline=None if args.time_limit is None else started + args.time_limit,
                                   timeout=max(60.0, 5 * first.seconds), start=start, max_runs=args.max_runs)
            if not test(start):
                raise ReproError(f"the starting script does not show {signature} on {args.session} as the check "
                                 f"needs ({check_words(args.session, passing)}): {test.why}")
            reduced, finished = minimize(start, test)
            test.close()
        finally:
            if passing_runner:
                passing_runner.close()
    return reduced, signature, test, finished


def _verdict(args, out: pathlib.Path, signature: Signature, python, passing_python, passing: str | None):
    """(whether the written script, run afresh in new processes, fails on the failing version and passes
    on the passing one or without torch.compile; the failing run)."""
    verdict = scriptrun.run(python, out, timeout=args.timeout, cache_dir=venvs.venv_of(python))
    print(f"{args.session}: {verdict.outcome} ({verdict.exit}) {verdict.message[:160]}".rstrip())
    if passing_python:
        again = scriptrun.run(passing_python, out, timeout=args.timeout, cache_dir=venvs.venv_of(passing_python))
        print(f"{passing}: {again.outcome} ({again.exit}) {again.message[:160]}".rstrip())
    else:
        again = scriptrun.run(python, out, timeout=args.timeout, cache_dir=venvs.venv_of(python), without_compile=True)
        print(f"{args.session} without torch.compile: {again.outcome} ({again.exit}) {again.message[:160]}".rstrip())
    return signature.shown_by(verdict) and again.outcome == "pass", verdict


def _with_check(issue: str, session: str, passing: str | None, signature: Signature) -> str:
    """The issue text with a line saying what the reduced script was checked to do."""
    line = (f"Reduced by `python -m harness reduce`: the script fails on {session} with {signature.exception}, "
            f"and {check_words(session, passing)}; both checked afresh.\n\n")
    return issue.replace("**Reproduction**", line + "**Reproduction**", 1)


def _write(source: str) -> pathlib.Path:
    handle = tempfile.NamedTemporaryFile("w", suffix=".py", prefix="harness-reduce-start-", delete=False)
    with handle:
        handle.write(source)
    return pathlib.Path(handle.name)
