"""What a case's run can come to: each outcome defined once, and the rules that classify a run.

Every part of the harness that shows or acts on an outcome reads it from OUTCOMES: the plugin
(records, pytest's report), the regression table, the JUnit file, the reproduction script's exit
code and bisect.
"""

from __future__ import annotations

import dataclasses
import re


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


OUTCOMES = {o.name: o for o in (
    Outcome("pass", 0, "✅", "pass", "passed", "passing", False, 0, "passed"),
    Outcome("fixed", 1, "🎉", "fixed", "a recorded upstream bug no longer reproduces", "passing", False, 0, "passed"),
    Outcome("skip", 2, "⏭️", "skip", "did not run here (reason on the cell)", "neutral", False, 125, "skipped"),
    Outcome("limitation", 3, "🚧", "limit", "raises as a documented limitation of torch.compile", "failing",
            False, 5, "skipped"),
    Outcome("known", 4, "🐛", "known", "fails as a recorded upstream bug", "failing", False, 3, "skipped"),
    Outcome("fail", 5, "❌", "FAIL", "failed (not a recorded upstream bug or limitation)", "failing", True, 1,
            "failure"),
    Outcome("flaky", 6, "🔀", "flaky", "attempts disagreed", "neutral", False, None, "passed"),
    Outcome("error", 7, "⚠️", "ERROR", "the harness or environment broke", "failing", True, 4, "error"),
    Outcome("timeout", 8, "⏱️", "T/O", "ran past its time limit", "failing", True, None, "error"),
    Outcome("crash", 9, "💥", "CRASH", "its process died, or ran out of memory", "failing", True, None, "error"),
)}
NAMES = tuple(OUTCOMES)
PASSING = frozenset(n for n, o in OUTCOMES.items() if o.verdict == "passing")
FAILING = frozenset(n for n, o in OUTCOMES.items() if o.verdict == "failing")


def worst(names) -> str:
    return max(names, key=lambda name: OUTCOMES[name].severity)


# --- what a raised exception means ----------------------------------------------------------

def qualname(cls) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def exception_chain(exc: BaseException):
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


def first_line(exc: BaseException) -> str:
    """The exception's first line; when it only announces what follows ("backend='x' raised:"),
    the next line too."""
    lines = [line.strip() for line in exception_text(exc).strip().splitlines() if line.strip()]
    if not lines:
        return ""
    return f"{lines[0]} {lines[1]}" if lines[0].endswith(":") and len(lines) > 1 else lines[0]


def is_instance_named(exc: BaseException, name: str) -> bool:
    """`exc` is an instance of a class called `name` (bare or qualified): no import needed."""
    return any(name in (cls.__name__, qualname(cls)) for cls in type(exc).__mro__)


def _release(version: str) -> tuple[int, ...]:
    from packaging.version import Version

    return Version(version).release


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
        found = _release(torch_version)
        if self.since is not None and found < _release(self.since):
            return False
        if self.until is not None:
            until = _release(self.until)
            return found[:len(until)] <= until
        return True

    def matches(self, exc: BaseException) -> bool:
        return any(any(is_instance_named(candidate, name) for name in self.raises)
                   and (self.match is None or re.search(self.match, exception_text(candidate)))
                   for candidate in exception_chain(exc))

    def as_record(self) -> dict:
        return {"kind": self.kind, "ref": self.ref, "raises": list(self.raises), "match": self.match,
                "since": self.since, "until": self.until}


EXPECTED_MARKERS = {"upstream_bug": "known", "limitation": "limitation"}


def expected_failures(item) -> list[Expected]:
    """The failures `item` (a pytest item) declares, on any torch, closest marker first."""
    found = []
    for marker_name, kind in EXPECTED_MARKERS.items():
        for marker in item.iter_markers(marker_name):
            args, kwargs = list(marker.args), marker.kwargs
            ref = args[0] if args else kwargs["ref"]
            raises = kwargs.get("raises") or (args[1] if len(args) > 1 else None)
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
    if is_instance_named(exc, "BaseExceptionGroup") and getattr(exc, "exceptions", None):
        return [leaf for inner in exc.exceptions for leaf in leaf_exceptions(inner)]
    return [exc]


def classify_exception(exc: BaseException, declared: list[Expected]) -> tuple[str, str | None]:
    """(outcome, the one reference it met) of a case that raised `exc` while running (not setting
    up); `declared`: what the case declares for this torch version. A group of failures is
    classified leaf by leaf: the most severe wins (one no declaration matches: `fail`)."""
    leaves = leaf_exceptions(exc)
    if len(leaves) > 1 or leaves[0] is not exc:
        return max((classify_exception(leaf, declared) for leaf in leaves), key=lambda c: OUTCOMES[c[0]].severity)
    if out_of_memory(exc):
        return "crash", None
    for expected in declared:
        if expected.matches(exc):
            return expected.kind, expected.ref
    return "fail", None
