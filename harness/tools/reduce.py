"""The smallest plain-torch script that still shows a case's bug: `python -m harness reduce CASE_ID --session S`.

The starting point is the script `repro` exports, less its plumbing (the EXPECTED table, the
OUTCOME classifier, the exit codes): the case's call at module level, so that the bug raises or
asserts and the script exits non-zero. pysource-minimize then removes what it can, keeping a
candidate only where the interestingness test holds:

- on the failing session (the one given), the candidate fails (not a crash or a timeout) with the
  exception type the matrix records and the message pattern (the declared `match` of a known bug or
  limitation, else the recorded message's first line, which keeps a semantic case's figure);
- on a session where the matrix records a pass (or fixed) for the case, the nearest one, the
  candidate passes. This rejects a reduction to `raise AssertionError(...)`.

Candidates run forked from a warm process per venv (harness.tools.scriptrun.WarmRunner), each result
cached by the candidate's text. Reduction stops at --time-limit keeping the smallest candidate
found; the result is then run afresh (a new process) on both versions. `--script SCRIPT` reduces a
user's script instead: its own failure on --session is the pattern, --passing names the session
it must pass on.
"""

from __future__ import annotations

import ast
import dataclasses
import hashlib
import pathlib
import re
import sys
import tempfile
import time

from harness.core import outcomes, paths, records, venvs
from harness.core.errors import BadInput
from harness.tools import preflight, reduce_passes, scriptrun
from harness.tools.repro.collector import collect
from harness.tools.repro.command import collect_env
from harness.tools.repro.errors import ReproError
from harness.tools.repro.issue import across_versions, issue_markdown
from harness.tools.repro.script import build_script, script_name
from harness.tools.repro.property_example import chosen_example

PLUMBING_NAMES = {"EXPECTED", "declared"}
PATTERN_CHARACTERS = 400


class TimeUp(Exception):
    """The reduction's time limit was reached."""


@dataclasses.dataclass(frozen=True)
class Signature:
    """What a candidate must show on the failing version."""

    exception: str  # the exception's class name ('AssertionError'), module left out
    pattern: str  # a regular expression the output must contain

    def shown_by(self, run: scriptrun.ScriptRun) -> bool:
        return (run.outcome == "fail" and run.exception.rsplit(".", 1)[-1] == self.exception
                and re.search(self.pattern, run.output) is not None)

    def __str__(self) -> str:
        return f"{self.exception} matching /{self.pattern}/"


def message_pattern(message: str) -> str:
    """A pattern for a recorded message: its whole first line (a semantic case's figure, both
    sides of the comparison), up to PATTERN_CHARACTERS, literal except memory addresses."""
    first = (message.strip().splitlines() or [""])[0][:PATTERN_CHARACTERS]
    return re.sub(r"0x[0-9a-f]+", "0x[0-9a-f]+", re.escape(first))


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


def line_count(source: str) -> int:
    return len([line for line in source.splitlines() if line.strip()])


def size(source: str) -> tuple[int, int]:
    """What a smaller candidate has less of: lines, then characters."""
    return line_count(source), len(source)


class Interestingness:
    """The test a candidate must pass, with its runs cached by the candidate's text."""

    def __init__(self, signature: Signature, failing: scriptrun.WarmRunner, passing: scriptrun.WarmRunner | None,
                 deadline: float, timeout: float, out=sys.stderr):
        self.signature, self.failing, self.passing = signature, failing, passing
        self.deadline, self.timeout, self.out = deadline, timeout, out
        self.cache: dict[str, bool] = {}
        self.checks = self.runs = 0
        self.best: str | None = None
        self.started = time.monotonic()
        self.folder = tempfile.TemporaryDirectory(prefix="harness-reduce-")

    def _run(self, runner: scriptrun.WarmRunner, source: str) -> scriptrun.ScriptRun:
        path = pathlib.Path(self.folder.name) / "candidate.py"
        path.write_text(source)
        self.runs += 1
        return runner.run(path, timeout=self.timeout)

    def __call__(self, source: str) -> bool:
        self.checks += 1
        if time.monotonic() > self.deadline:  # cached answers too: a loop of them must end
            raise TimeUp()
        key = hashlib.sha256(source.encode()).hexdigest()
        if key in self.cache:
            return self.cache[key]
        failing = self._run(self.failing, source)
        interesting = self.signature.shown_by(failing)
        if interesting and self.passing is not None:
            interesting = self._run(self.passing, source).outcome == "pass"
        self.cache[key] = interesting
        if interesting and (self.best is None or size(source) < size(self.best)):
            self.best = source
        elapsed = time.monotonic() - self.started
        print(f"[{elapsed:6.1f} s] check {self.checks:4d} ({self.runs} runs): {line_count(source):4d} lines "
              f"{'kept' if interesting else 'no  '}  best {line_count(self.best or source)} lines", file=self.out,
              flush=True)
        return interesting

    def close(self) -> None:
        self.folder.cleanup()


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


def minimize(source: str, test: Interestingness) -> tuple[str, bool]:
    """(the smallest interesting source found, whether the reducer finished before the deadline):
    pysource-minimize's deletions and harness.tools.reduce_passes' rewrites in turn, tidied where the
    tidy version is interesting too."""
    import pysource_minimize

    test.best = source
    result, finished, seen = source, True, set()
    try:
        while result not in seen:  # deletions, then the rewrites that let more go, until neither finds anything
            seen.add(result)
            result = reduce_passes.improve(pysource_minimize.minimize(result, test), test)
        result = reduce_passes.improve(result, test, reduce_passes.FINAL_PASSES)
    except TimeUp:
        result, finished = test.best, False
    if not test.cache.get(hashlib.sha256(result.encode()).hexdigest()) or size(test.best) < size(result):
        result = test.best  # a rewrite that split a line and let nothing go is not kept
    tidied = tidy(result)
    test.deadline = max(test.deadline, time.monotonic() + 120)  # one more check, past the limit if need be
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
    return paths.results_dir() / "reduce" / name


def command(args) -> int:
    """0 when a reduced script was written and, run afresh, fails on the failing version (and
    passes on the passing one); 1 when the starting script does not show the bug or the result
    does not hold afresh; 2 for bad input (before any environment is built)."""
    if bool(args.case) == bool(args.script):
        raise BadInput("reduce takes a CASE_ID or --script SCRIPT (one of them)")
    preflight.check_session(args.session)
    preflight.check_session(args.passing)
    script = preflight.check_script(args.script) if args.script else None
    if args.case:
        preflight.check_case(args.case, args.envdir, args.session)
        record = recorded_failure(args.case, args.session)
        passing = args.passing or passing_session(args.case, args.session, args.envdir)
    else:
        record, passing = None, args.passing
    if passing and args.no_build and not venvs.venv_python(passing, args.envdir).exists():
        print(f"warning: {passing} has no environment (--no-build): candidates are not checked to pass there",
              file=sys.stderr)
        passing = None
    if passing is None:
        print("warning: no version where the case passes: a candidate is only checked to fail as recorded",
              file=sys.stderr)
    python = venvs.ensure_venv(args.session, args.envdir, build=not args.no_build)
    if python is None:
        raise venvs.SessionError(f"{args.session} has no environment (--no-build)")
    passing_python = venvs.ensure_venv(passing, args.envdir) if passing else None
    if args.case:
        info = collect(python, [args.case])["cases"][args.case]
        example = chosen_example(record, info["expected"])
        if example:  # a property case: the script replays that example, and the bug is the example's error
            info["property_example"] = example
            exception, _, message = example["error"].partition(": ")
            record = {**record, "exc_type": exception, "message": message}
        full = build_script(info)
        start, signature = strip_plumbing(full), signature_of(record, info["expected"])
        name = script_name(args.case).replace("repro_", "reduced_", 1)
    else:
        full = script.read_text()
        start, signature = (strip_plumbing(full) if "OUTCOME:" in full else full), None
        name = f"{script.stem}_reduced.py"
    out = pathlib.Path(args.out) if args.out else default_out(name)
    print(f"starting the warm runners of {args.session}" + (f" and {passing}" if passing else ""), file=sys.stderr,
          flush=True)
    started = time.monotonic()
    preload = imported_modules(start)  # each candidate then pays its own work only
    with scriptrun.WarmRunner(python, python.parent.parent, preload=preload) as failing_runner:
        passing_runner = scriptrun.WarmRunner(passing_python, passing_python.parent.parent, preload=preload) \
            if passing_python else None
        try:
            first = failing_runner.run(_write(start), timeout=args.timeout)
            if signature is None:  # --script: the script's own failure is what it must keep showing
                if first.outcome != "fail" or not first.exception:
                    raise ReproError(f"{script} does not fail with an exception on {args.session} "
                                           f"({first.outcome}, {first.exit}): nothing to reduce")
                signature = Signature(first.exception.rsplit(".", 1)[-1], message_pattern(first.message.partition(": ")[2]))
            print(f"the bug: {signature} on {args.session}" + (f", a pass on {passing}" if passing else ""),
                  file=sys.stderr, flush=True)
            test = Interestingness(signature, failing_runner, passing_runner, deadline=started + args.time_limit,
                                   timeout=max(60.0, 5 * first.seconds))
            if not test(start):
                raise ReproError(f"the starting script does not show {signature} on {args.session}"
                                       + (f" and pass on {passing}" if passing else "")
                                       + f": it gave {first.outcome} ({first.exit}: {first.message[:200]})")
            reduced, finished = minimize(start, test)
            test.close()
        finally:
            if passing_runner:
                passing_runner.close()
    seconds = time.monotonic() - started
    header = (f"# Reduced from {args.case or script.name} by torch-compile-matrix: fails on {args.session}"
              + (f", passes on {passing}" if passing else "") + ".\n")
    text = header + reduced
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    print(f"reduced {args.case or script.name}: {line_count(start)} -> {line_count(text)} lines in {seconds:.0f} s "
          f"({test.checks} checks, {test.runs} runs; {'done' if finished else 'stopped at the time limit'})")
    # The verdict: the written script run afresh, in a new process, on both versions.
    verdict = scriptrun.run(python, out, timeout=args.timeout, cache_dir=python.parent.parent)
    holds = signature.shown_by(verdict)
    print(f"{args.session}: {verdict.outcome} ({verdict.exit}) {verdict.message[:160]}")
    if passing_python:
        again = scriptrun.run(passing_python, out, timeout=args.timeout, cache_dir=passing_python.parent.parent)
        holds = holds and again.outcome == "pass"
        print(f"{passing}: {again.outcome} ({again.exit}) {again.message[:160]}".rstrip())
    print(f"wrote {out}", file=sys.stderr)
    print(text)
    if args.case and holds:  # the issue: the reduced script, the whole export folded below it
        result = {"returncode": verdict.code, "output": verdict.output, "outcome": record["outcome"]}
        rows = across_versions(args.case, [paths.results_dir()])
        issue = issue_markdown(info, text, out, result, collect_env(python), rows, full=full)
        out.with_suffix(".md").write_text(issue)
        print(f"wrote {out.with_suffix('.md')}", file=sys.stderr)
    if not holds:
        print("error: run afresh, the reduced script does not show the bug as the candidates did", file=sys.stderr)
        return 1
    return 0


def _write(source: str) -> pathlib.Path:
    handle = tempfile.NamedTemporaryFile("w", suffix=".py", prefix="harness-reduce-start-", delete=False)
    with handle:
        handle.write(source)
    return pathlib.Path(handle.name)
