"""What a case's run can come to: each outcome defined once, and the rules that classify a run.

Every part of the harness that shows or acts on an outcome reads it from OUTCOMES: the plugin
(records, pytest's report), the regression table, the JUnit file, the reproduction script's exit
code and bisect; a set of outcomes that one of them acts on is named here too.
"""

from __future__ import annotations

import dataclasses
import pathlib
import re
import signal
from collections.abc import Iterable, Iterator

from harness.core import versions
from harness.core.errors import BadInput


@dataclasses.dataclass(frozen=True)
class Outcome:
    name: str
    severity: int  # when several phases of a case report, the most severe names the case
    symbol: str  # REPORT.md
    cell: str  # report.html: plain text, the colour does the rest
    meaning: str
    verdict: str  # "passing", "failing" or "neutral": what a change between two runs means
    fails_session: bool  # the session (pytest) exits non-zero when a case has this outcome
    exit_code: int | None  # of a reproduction script that ends this way (None: it cannot print it)
    junit: str  # the testcase's status in results/<session>.xml: passed, skipped, failure or error
    style: str  # report.html: the CSS of its cells and chips


OUTCOMES = {o.name: o for o in (
    Outcome("pass", 0, "✅", "pass", "passed", "passing", False, 0, "passed", "background: #a6e3a1;"),
    Outcome("fixed", 1, "🎉", "fixed", "a recorded upstream bug no longer reproduces", "passing", False, 0, "passed",
            "background: #7dd3fc;"),
    Outcome("skip", 2, "⏭️", "skip", "did not run here (reason on the cell)", "neutral", False, 125, "skipped",
            "background: #e5e7eb;"),
    Outcome("limitation", 3, "🚧", "limit", "raises as a documented limitation of torch.compile", "failing",
            False, 5, "skipped", "background: #fef3c7; background-image: repeating-linear-gradient(135deg, "
            "transparent 0 5px, rgba(180,120,0,.18) 5px 7px);"),
    Outcome("known", 4, "🐛", "known", "fails as a recorded upstream bug", "failing", False, 3, "skipped",
            "background: #fde68a;"),
    Outcome("fail", 5, "❌", "FAIL", "failed (not a recorded upstream bug or limitation)", "failing", True, 1,
            "failure", "background: #f87171;"),
    Outcome("flaky", 6, "🔀", "flaky", "attempts disagreed", "neutral", False, None, "passed", "background: #f9a8d4;"),
    Outcome("error", 7, "⚠️", "ERROR", "the harness or environment broke", "failing", True, 4, "error",
            "background: #c084fc;"),
    Outcome("timeout", 8, "⏱️", "T/O", "ran past its time limit", "failing", True, None, "error",
            "background: #fb923c;"),
    Outcome("crash", 9, "💥", "CRASH", "its process died, or ran out of memory", "failing", True, None, "error",
            "background: #991b1b; color: #fff;"),
)}
NAMES = tuple(OUTCOMES)
PASSING = frozenset(n for n, o in OUTCOMES.items() if o.verdict == "passing")  # pass, fixed
FAILING = frozenset(n for n, o in OUTCOMES.items() if o.verdict == "failing")
HARD = tuple(n for n, o in OUTCOMES.items() if o.fails_session)  # fail, error, timeout, crash
DECLARED = ("known", "limitation")  # outcomes a case declares, each with its reference
REFERENCED = (*DECLARED, "fixed")  # outcomes whose record names the one reference they met or no longer meet
RAISED = ("fail", *DECLARED)  # the case raised (its own failure, a known bug, a limitation): a bug to reduce
# A case cut short: its process may have stopped mid-write, so nothing it built is shared.
CUT_SHORT = frozenset({"error", "timeout", "crash"})
RETRIED = frozenset({"fail", "error"})  # a case that ends so runs again (--case-reruns)
HARNESS_FAULTS = frozenset({"error"})  # the harness or its environment broke, not the case
NOT_CARRIED = HARNESS_FAULTS  # the harness failed to run the case: never carried to a later run
# What a script's exit status says (the codes reproduction scripts exit with; `fixed` exits 0 too, and
# says so on its OUTCOME line).
BY_EXIT_CODE = {OUTCOMES[name].exit_code: name for name in ("pass", "skip", *DECLARED)}


def worst(items, outcome=lambda item: item):
    """The item of `items` with the most severe outcome (`outcome(item)`: its name; by default the
    item is one): the outcome of a case whose phases, attempts or failures differ."""
    return max(items, key=lambda item: OUTCOMES[outcome(item)].severity)


# --- what a raised exception means ----------------------------------------------------------

def qualname(cls) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def exception_chain(exc: BaseException | None) -> Iterator[BaseException]:
    """`exc` and what it was raised from or during, innermost last."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


def exception_text(exc: BaseException) -> str:
    """`str(exc)`; for an exception whose `str()` raises, a text that says so and names its type
    (the case still failed: its record must not turn into a harness error or a crash)."""
    try:
        return str(exc)
    except Exception as error:
        try:
            why = f"{type(error).__name__}: {error}"
        except Exception:
            why = type(error).__name__
        return f"<unprintable {qualname(type(exc))}: its str() raised {why}>"


def message_line(exc: BaseException) -> str:
    """The exception's first line; when it only announces what follows ("backend='x' raised:"),
    the next line too."""
    lines = [line.strip() for line in exception_text(exc).strip().splitlines() if line.strip()]
    if not lines:
        return ""
    return f"{lines[0]} {lines[1]}" if lines[0].endswith(":") and len(lines) > 1 else lines[0]


# What differs between two raises of one bug: addresses, paths, quoted values, numbers.
NORMALISE = [(re.compile(r"0x[0-9a-fA-F]+"), "0x…"), (re.compile(r"(?:<\w+>)?(?<![\w.<])(?:/[\w.@+-]+)+/?"), "<path>"),
             (re.compile(r"\b\d+(?:\.\d+)*\b"), "N")]
SIGNATURE_CHARACTERS = 160


def bug_signature(exc_type: str, message: str | None) -> str:
    """The exception type (its class name) and its message's first line with numbers, addresses and
    paths taken out: two failures with one signature fail the same way (the report groups cases
    by it; explore shrinks one example per signature)."""
    lines = [line.strip() for line in (message or "").strip().splitlines() if line.strip()]
    # A first line that only announces what follows ("backend='inductor' raised:") takes the next.
    line = f"{lines[0]} {lines[1]}" if len(lines) > 1 and lines[0].endswith(":") else (lines[0] if lines else "")
    for pattern, replacement in NORMALISE:
        line = pattern.sub(replacement, line)
    if len(line) > SIGNATURE_CHARACTERS:
        line = line[:SIGNATURE_CHARACTERS - 1] + "…"
    name = exc_type.rsplit(".", 1)[-1]
    return f"{name}: {line}" if line else name


def is_instance_named(exc: BaseException, name: str) -> bool:
    """`exc` is an instance of a class called `name` (bare or qualified): no import needed."""
    return any(name in (cls.__name__, qualname(cls)) for cls in type(exc).__mro__)


@dataclasses.dataclass(frozen=True)
class Expected:
    """A failure a case declares: an upstream bug (`upstream_bug` marker) or a documented
    limitation (`limitation` marker), recognised by the exception's class and message, on the
    torch versions from `since` to `until` (both inclusive, either open). A case may declare the
    same reference several times, one message per version range."""

    kind: str  # "known" (an upstream bug) or "limitation"
    ref: str  # 'owner/repo#123' or a documentation URL
    raises: tuple[str, ...]
    match: str | None = None
    since: str | None = None  # the first torch release it was measured on ("2.4": 2.4.0 and later)
    until: str | None = None  # the last one ("2.4": every 2.4.x)

    def applies_to(self, torch_version: str) -> bool:
        """Whether this torch lies in the declaration's range: outside it a failure is `fail` and
        a pass a plain `pass`, whatever other versions did."""
        return versions.in_range(torch_version, self.since, self.until)

    def matches(self, exc: BaseException) -> bool:
        return any(any(is_instance_named(candidate, name) for name in self.raises)
                   and (self.match is None or re.search(self.match, exception_text(candidate)))
                   for candidate in exception_chain(exc))

    def as_record(self) -> dict:
        return {"kind": self.kind, "ref": self.ref, "raises": list(self.raises), "match": self.match,
                "since": self.since, "until": self.until}


EXPECTED_MARKERS = {"upstream_bug": "known", "limitation": "limitation"}


def upstream_link(ref: str | None) -> str:
    """A declaration's reference as a link: 'owner/repo#123' -> its GitHub issue or pull request;
    'owner/repo:path' -> the file on the default branch; a URL (a documentation page) as it is."""
    match = re.fullmatch(r"([\w.-]+/[\w.-]+)#(\d+)", ref or "")
    if match:
        return f"https://github.com/{match[1]}/issues/{match[2]}"
    match = re.fullmatch(r"([\w.-]+/[\w.-]+):([\w./-]+)", ref or "")
    if match:
        return f"https://github.com/{match[1]}/blob/HEAD/{match[2]}"
    return ref if ref and re.match(r"https?://", ref) else ""


def expected_failures(item) -> list[Expected]:
    """The failures `item` (a pytest item) declares, on any torch, closest marker first."""
    found = []
    for marker_name, kind in EXPECTED_MARKERS.items():
        for marker in item.iter_markers(marker_name):
            args, kwargs = list(marker.args), marker.kwargs
            ref = args[0] if args else kwargs["ref"]
            raises = kwargs.get("raises") or (args[1] if len(args) > 1 else None)
            if raises is None:  # the marker requires it: said, rather than an AttributeError on None
                raise BadInput(f"@pytest.mark.{marker_name}({ref!r}) names no `raises` (the exception types)")
            names = raises if isinstance(raises, (list, tuple)) else [raises]
            found.append(Expected(kind, ref, tuple(n if isinstance(n, str) else n.__name__ for n in names),
                                  kwargs.get("match"), kwargs.get("since"), kwargs.get("until")))
    return found


def declared_for(item, torch_version: str) -> list[Expected]:
    """The failures `item` declares for this torch version."""
    return [e for e in expected_failures(item) if e.applies_to(torch_version)]


MEMORY_EXHAUSTED = re.compile(r"can't allocate memory|not enough memory|out of memory", re.I)


def out_of_memory(exc: BaseException) -> bool:
    return any(isinstance(e, MemoryError) or is_instance_named(e, "OutOfMemoryError")
               or (isinstance(e, RuntimeError) and MEMORY_EXHAUSTED.search(exception_text(e)))
               for e in exception_chain(exc))


def leaf_exceptions(exc: BaseException) -> list[BaseException]:
    """The exceptions an ExceptionGroup holds (a property case's distinct failures), else [exc]."""
    inners = getattr(exc, "exceptions", None) if is_instance_named(exc, "BaseExceptionGroup") else None
    if inners:
        return [leaf for inner in inners for leaf in leaf_exceptions(inner)]
    return [exc]


def clean_outcome(declared_kinds: Iterable[str]) -> str:
    """The outcome of a case's run that raised nothing, given the kinds of failure it declares for this torch:
    `fixed` where one is an upstream bug (it no longer reproduces), else `pass`. The runner's rule and every
    reproduction script's."""
    return "fixed" if "known" in set(declared_kinds) else "pass"


def classify_exception(exc: BaseException, declared: list[Expected]) -> tuple[str, str | None]:
    """(outcome, the one reference it met) of a case that raised `exc` while running (not setting
    up); `declared`: what the case declares for this torch version. A group of failures is
    classified leaf by leaf: the most severe wins (one no declaration matches: `fail`)."""
    leaves = leaf_exceptions(exc)
    if len(leaves) > 1 or leaves[0] is not exc:
        return worst((classify_exception(leaf, declared) for leaf in leaves), outcome=lambda found: found[0])
    if out_of_memory(exc):
        return "crash", None
    for expected in declared:
        if expected.matches(exc):
            return expected.kind, expected.ref
    return "fail", None


# --- what a dead process's output means (a case's process, a worker, a script) ----------------------------

_FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+),? in (?P<func>\S+)')


def _innermost_case_frame(lines: list[str], case_file: str | None) -> str | None:
    """`file:line in function` of the innermost frame in the case's own file, from a stack dump
    (pytest-timeout prints most recent call last, faulthandler most recent first)."""
    if not case_file:
        return None
    frames = [m for m in map(_FRAME.search, lines) if m and m["file"].endswith(case_file)]
    if not frames:
        return None
    newest_first = any(line.endswith("(most recent call first):") for line in lines)
    frame = frames[0] if newest_first else frames[-1]
    return f"{pathlib.PurePath(frame['file']).name}:{frame['line']} in {frame['func']}"


def signal_name(status: int | None) -> str | None:
    """The signal that ended a process (`status`: minus its number), None for an exit."""
    if status is None or status >= 0:
        return None
    try:
        return signal.Signals(-status).name
    except ValueError:
        return f"signal {-status}"


def crash_summary(output: str, exit_status: int | None = None, case_file: str | None = None,
                  time_limit: float | None = None) -> tuple[str, str]:
    """(outcome, message) for a case whose worker died, from what it printed and how it ended:
    a time-limit report means `timeout`, anything else `crash`."""
    lines = [line.rstrip() for line in output.splitlines()
             if line.strip() and not line.startswith("Extension modules:")]
    where = _innermost_case_frame(lines, case_file)
    at = f" at {where}" if where else ""
    limit = f" of {time_limit:g} s" if time_limit else ""
    for line in lines:
        banner = re.search(r"\+{3,} (Timeout.*?) \+{3,}", line)
        if banner:  # pytest-timeout
            return "timeout", f"ran past its time limit{limit}{at} (pytest-timeout)"
        backstop = re.search(r"Timeout \(\d+:\d\d:\d\d(?:\.\d+)?\)!", line)
        if backstop:  # the runner's faulthandler watchdog: pytest-timeout could not act
            return "timeout", (f"ran past its time limit{limit}{at} holding the GIL; "
                               f"ended by faulthandler ({backstop[0]})")
    fatal = next((line[line.index("Fatal Python error:"):] for line in lines if "Fatal Python error:" in line), None)
    cause = next((line.strip() for line in lines if line.strip().startswith(("what():", "terminate called"))), None)
    if fatal:
        return "crash", fatal + (f" ({cause})" if cause else "") + at
    killed = signal_name(exit_status)
    if killed:
        last = f"; last output: {lines[-1]}" if lines else ""
        return "crash", f"killed by {killed}{last}"
    if lines:
        status = f" with status {exit_status}" if exit_status else ""
        return "crash", f"worker exited{status}; last output: {lines[-1]}"
    return "crash", "worker died without output" + (f" (exit status {exit_status})" if exit_status else "")
