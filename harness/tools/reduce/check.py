"""What `reduce` keeps: a candidate script is interesting when it still shows the bug.

- On the failing session the candidate fails (not a crash or a timeout) with the recorded exception
  type and message pattern (Signature);
- and it passes where the bug is not: on a session where the matrix records a pass (the passing
  row), or, where no row passes, on the failing session itself with torch.compile replaced by the
  identity (the differential check, harness.tools.scriptrun.WITHOUT_COMPILE): the failure is then the
  compile's, not the script's own. Either rejects a reduction to `raise AssertionError(...)`.

Before any run, a candidate is refused that creates a zero-size tensor where the starting script
created none (harness.tools.reduce.tensors.zero_size), or that carries pysource-minimize's
`unique_name_N` renames: names stay the script's own.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import pathlib
import re
import sys
import tempfile
import time

from harness.tools import scriptrun
from harness.tools.reduce import tensors as reduce_tensors

PATTERN_CHARACTERS = 400
RENAMED = "unique_name_"


class BudgetSpent(Exception):
    """The reduction's budget is spent: its candidate runs (the work, the same on any machine) or its
    time limit, as the message says."""


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
    sides of the comparison), up to PATTERN_CHARACTERS, literal except memory addresses; where that
    line only announces its cause (`backend='inductor' raised:`), the cause's line too."""
    lines = [line.strip() for line in message.strip().splitlines() if line.strip()] or [""]
    shown = lines[:2] if lines[0].endswith(":") else lines[:1]
    return r"\s*".join(re.sub(r"0x[0-9a-f]+", "0x[0-9a-f]+", re.escape(line[:PATTERN_CHARACTERS])) for line in shown)


def script_signature(run: scriptrun.ScriptRun) -> Signature:
    """The signature of a script's own failure: its last exception, and the message from its output
    (the line after the exception's where the exception's line ends with a colon)."""
    lines = run.output.splitlines()
    ending = [i for i, line in enumerate(lines) if line.startswith(f"{run.exception}:")]
    message = ("\n".join(lines[ending[-1]:ending[-1] + 3]).partition(": ")[2] if ending
               else run.message.partition(": ")[2])
    return Signature(run.exception.rsplit(".", 1)[-1], message_pattern(message))


def line_count(source: str) -> int:
    return len([line for line in source.splitlines() if line.strip()])


def size(source: str) -> tuple[int, int]:
    """What a smaller candidate has less of: lines, then characters."""
    return line_count(source), len(source)


def check_words(session: str, passing: str | None) -> str:
    """The check in words, for the output and the issue text."""
    if passing:
        return f"it passes on {passing} (a row where the matrix records a pass)"
    return (f"it passes on {session} with torch.compile replaced by the identity (the differential check: "
            "no row passes)")


# Runs a candidate with `exec` and `compile` recording the source texts the candidate itself hands them.
PROBE = '''
import builtins, json, runpy, sys
TARGET, RECORD = {target!r}, {record!r}
seen = []
def recording(original, caller_scope):
    def record(text, *args, **kwargs):
        caller = sys._getframe(1)
        if isinstance(text, str) and caller.f_code.co_filename == TARGET:
            seen.append([caller.f_lineno, text])
        if caller_scope and not args and "globals" not in kwargs:  # exec(text): the caller's scope, not this one's
            args = (caller.f_globals, caller.f_locals)
        return original(text, *args, **kwargs)
    return record
builtins.exec, builtins.compile = recording(builtins.exec, True), recording(builtins.compile, False)
try:
    runpy.run_path(TARGET, run_name="__main__")
finally:
    with open(RECORD, "w") as handle:
        json.dump(seen, handle)
'''


class Interestingness:
    """The test a candidate must pass, with its runs cached by the candidate's text. `passing`: the
    passing row's runner, or None for the differential check on the failing runner."""

    def __init__(self, signature: Signature, failing, passing=None, *, deadline: float | None, timeout: float,
                 start: str = "", out=sys.stderr, max_runs: int | None = None):
        """`start`: the starting script; what it has (a zero-size tensor, a `unique_name_N`) candidates may have.
        `max_runs`: the candidate runs the reduction may make, the budget that makes its result the same on a
        loaded machine as on a quiet one; `deadline` (time.monotonic()), a limit of time besides, or None."""
        self.signature, self.failing, self.passing = signature, failing, passing
        self.deadline, self.timeout, self.out, self.max_runs = deadline, timeout, out, max_runs
        self.zero_size_allowed, self.renames_allowed = reduce_tensors.zero_size(start), RENAMED in start
        self.cache: dict[str, bool] = {}
        self.checks = self.runs = 0
        self.best: str | None = None
        self.stopped_by: str | None = None  # what ended the reduction early (minimize sets it)
        self.why = ""  # why the last candidate run was not interesting
        self.started = time.monotonic()
        self.folder = tempfile.TemporaryDirectory(prefix="harness-reduce-")
        self.observed: dict[str, dict[int, set[str]]] = {}

    def _run(self, runner, source: str, **options) -> scriptrun.ScriptRun:
        path = pathlib.Path(self.folder.name) / "candidate.py"
        path.write_text(source)
        self.runs += 1
        return runner.run(path, timeout=self.timeout, **options)

    def refused(self, source: str) -> str:
        """Why `source` is not worth a run, or ''."""
        if RENAMED in source and not self.renames_allowed:
            return "renamed"
        if not self.zero_size_allowed and reduce_tensors.zero_size(source):
            return "a zero-size tensor"
        return ""

    def _interesting(self, source: str) -> bool:
        failing = self._run(self.failing, source)
        if not self.signature.shown_by(failing):
            self.why = f"it gave {failing.outcome} ({failing.exit}: {failing.message[:200]})"
            return False
        if self.passing is not None:
            other = self._run(self.passing, source)
            self.why = f"it did not pass on the passing row: {other.outcome} ({other.exit}: {other.message[:200]})"
        else:
            other = self._run(self.failing, source, without_compile=True)
            self.why = ("it does not show a compile bug: it fails without torch.compile too "
                        f"({other.outcome}, {other.exit}: {other.message[:200]})")
        return other.outcome == "pass"

    def __call__(self, source: str) -> bool:
        self.checks += 1
        if self.deadline is not None and time.monotonic() > self.deadline:  # cached answers too: a loop must end
            raise BudgetSpent(f"the time limit, after {self.runs} runs")
        key = hashlib.sha256(source.encode()).hexdigest()
        if key in self.cache:
            return self.cache[key]
        if self.max_runs is not None and self.runs >= self.max_runs:
            raise BudgetSpent(f"its budget of {self.max_runs} runs")
        refusal = self.refused(source)
        interesting = not refusal and self._interesting(source)
        self.cache[key] = interesting
        if refusal:
            return False
        if interesting and (self.best is None or size(source) < size(self.best)):
            self.best = source
        elapsed = time.monotonic() - self.started
        print(f"[{elapsed:6.1f} s] check {self.checks:4d} ({self.runs} runs): {line_count(source):4d} lines "
              f"{'kept' if interesting else 'no  '}  best {line_count(self.best or source)} lines", file=self.out,
              flush=True)
        return interesting

    def exec_texts(self, source: str) -> dict[int, set[str]]:
        """{line: the source texts `exec` or `compile` got there} when `source` runs on the failing venv."""
        key = hashlib.sha256(source.encode()).hexdigest()
        if key not in self.observed:
            folder = pathlib.Path(self.folder.name)
            target, record = folder / "observed.py", folder / "observed.json"
            target.write_text(source)
            record.unlink(missing_ok=True)
            probe = folder / "probe.py"
            probe.write_text(PROBE.format(target=str(target.resolve()), record=str(record)))
            self.runs += 1
            self.failing.run(probe, timeout=self.timeout)
            seen = json.loads(record.read_text()) if record.exists() else []
            texts: dict[int, set[str]] = {}
            for line, text in seen:
                texts.setdefault(line, set()).add(text)
            self.observed[key] = texts
        return self.observed[key]

    def close(self) -> None:
        self.folder.cleanup()
