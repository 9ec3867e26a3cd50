"""Each finding's regression test (results/reductions/fixes/test_SCRIPT.py) held to the rows of the table.

    python -m harness regressions SESSION [SESSION ...] [--finding N ...] [--python PYTHON] [--results DIR]

For each session (a row of the committed table), every regression test file runs in the row's venv
(or PYTHON, whose torch must be the row's), each file by pytest in a process of its own, with compile
caches and a temporary directory of its own, outside the checkout (its pytest settings stay out); only
inductor's precompiled headers of torch's own, global by torch's design, are shared by a row's files.
Each test is then held to what the table says of that row, as the catalogue says (findings.toml,
`tests`, by test name):
- not named: the test runs the table's own program. It fails exactly on the rows where the finding
  holds a cell (a failing cell of its cases with its signature), and passes or skips elsewhere;
- "cause": it meets the root cause directly. It fails where the finding holds a cell; elsewhere it
  may fail too (the cause is older than the table's cells show), which is said, not held against it;
- "works": what a fix must keep working. It passes where the finding holds a cell; elsewhere it may
  fail (on the oldest rows some fail for bugs of their own), which is said, not held against it.
  "works since X": the same from torch X on; before X the bug reached what it checks, and it is held
  as a "cause".
A row where the finding's cells are flaky holds either way, and so does one where its cells are
property cells that did not meet it (they draw their programs: a draw that missed the bug says
nothing of the row). A file that cannot be collected is
"cannot run": a disagreement where the finding holds a cell, otherwise the row lacks what the test
needs (nested_compile_region before torch 2.8). Exit status: 0 when every test agrees with the
table on every row given, 1 when one does not, 2 for bad input (nothing run).
"""

from __future__ import annotations

import dataclasses
import pathlib
import sys
import tempfile
from collections.abc import Callable

from packaging import version

from harness.core import matrix, paths, records
from harness.core.errors import BadInput
from harness.report import cards
from harness.report import findings as catalogue

CAUSE, WORKS = "cause", "works"
PROPERTY = "/property_"  # in a property case's id
KINDS = (CAUSE, WORKS)
# "works since 2.5": what a fix must keep working from that torch on; before it the bug reached it too
SINCE = " since "


@dataclasses.dataclass
class Held:
    """One test on one row: what it did, what the table expects of it, and whether the two agree."""
    test: str
    status: str  # passed, failed, skipped, or "cannot run" for the whole file
    expected: str  # "fail", "pass", "either" (flaky cells), "fail or pass" (a cause where the finding holds no cell)
    agrees: bool
    note: str = ""


def finding_on_row(finding: catalogue.Finding, cases: list[dict]) -> str:
    """"flaky" (one of its cells is: the bug comes and goes on this row, so one run of a test may go
    either way), else "holds" (a failing cell of its cases with its signature, not declared as a
known bug or a limitation), else "silent" (its
    cells are property cells, which did not meet it here) or "absent"."""
    mine = [record for record in cases if record["case"].startswith(finding.cases)]
    if any(record["outcome"] == "flaky" for record in mine):
        return "flaky"
    # a failure the case declares (a known upstream bug, a limitation) is that, not the finding, whatever its text
    if any(finding.signature.search(failure["signature"]) for record in mine for failure in cards.failures(record)
           if cards.status(failure) == "new"):
        return "holds"
    # A property cell draws its programs: one that did not meet the bug on a row says nothing of it there.
    return "silent" if all(PROPERTY in prefix for prefix in finding.cases) else "absent"


def split_kind(kind: str) -> tuple[str, str | None]:
    """A declared kind as (kind, the torch it holds since, or None): "works since 2.5" -> ("works", "2.5")."""
    kind, _, since = kind.partition(SINCE)
    return kind, since or None


def kind_of(kind: str | None, torch: str | None) -> str | None:
    """A test's kind on a row of `torch`: "works since X" is "works" from torch X on, and before it
    "cause" (the bug reached what it checks: it fails where the finding holds, and may elsewhere)."""
    if not kind:
        return kind
    kind, since = split_kind(kind)
    if since and torch and version.Version(torch) < version.Version(since):
        return CAUSE
    return kind


def hold(finding: catalogue.Finding, ran: dict[str, str] | str, cases: list[dict],
         torch: str | None = None) -> list[Held]:
    """Each test of the finding's file on one row, held to the row's cells."""
    on_row = finding_on_row(finding, cases)
    if isinstance(ran, str):
        return [Held("(the file)", "cannot run", "fail" if on_row == "holds" else "either",
                     on_row != "holds", ran)]
    kinds = dict(finding.tests)
    held = []
    for test, status in sorted(ran.items()):
        kind, failed = kind_of(kinds.get(test), torch), status == "failed"
        if on_row == "flaky":
            held.append(Held(test, status, "either", True, "the finding's cells are flaky on this row"))
        elif on_row == "silent":
            held.append(Held(test, status, "either", True, "the finding's property cells did not meet it on this row"))
        elif kind == WORKS:
            if on_row == "holds":
                held.append(Held(test, status, "pass", not failed))
            else:
                held.append(Held(test, status, "fail or pass", True, "fails for a bug of this row" if failed else ""))
        elif on_row == "holds":
            held.append(Held(test, status, "fail", failed))
        elif kind == CAUSE:
            held.append(Held(test, status, "fail or pass", True,
                             "the cause, older than the table's cells" if failed else ""))
        else:
            held.append(Held(test, status, "pass", not failed))
    return held


def _declared(kind: str) -> bool:
    """Whether `kind` is one the catalogue may declare: cause, works, or works since a torch version."""
    kind, since = split_kind(kind)
    if kind not in KINDS:
        return False
    try:
        return since is None or bool(version.Version(since))
    except version.InvalidVersion:
        return False


def row_cases(session: str, results: pathlib.Path) -> list[dict]:
    path = paths.results_path(session, results)
    if not path.is_file():
        raise BadInput(f"{session}: the table has no row here ({path} is missing)")
    return [record for record in records.read(path) if record.get("kind") == "case"]


# How the tests are run, which is a tool's job (harness.tools.testfile): the row's interpreter (the row, the
# --python given), and each test of a file by name, or a string where the file could not be collected.
RowPython = Callable[[matrix.Session, "str | None"], pathlib.Path]
RunFile = Callable[[pathlib.Path, pathlib.Path, pathlib.Path], "dict[str, str] | str"]


def check(sessions: list[str], row_python: RowPython, run_file: RunFile, python: str | None = None,
          results: pathlib.Path | None = None, numbers: list[int] | None = None, out=sys.stdout) -> int:
    results = paths.results_dir() if results is None else results
    found = [f for f in catalogue.load() if f.fix_path is not None]
    if not found:
        raise BadInput(f"{catalogue.CATALOGUE}: no finding has a regression test")
    for finding in found:
        unknown = {test: kind for test, kind in finding.tests if not _declared(kind)}
        if unknown:
            raise BadInput(f"{catalogue.CATALOGUE}: finding {finding.number}: {unknown}: a test is held as one of "
                           f"{', '.join(KINDS)}")
    if numbers:
        untested = sorted(set(numbers) - {f.number for f in found})
        if untested:
            raise BadInput(f"no finding numbered {', '.join(map(str, untested))} has a regression test "
                           f"(those that do: {', '.join(str(f.number) for f in found)})")
        found = [f for f in found if f.number in numbers]
    if python and len(sessions) != 1:
        raise BadInput("--python holds one row's torch: give one session with it")
    # every input checked before anything runs
    rows = [(matrix.find(name), row_cases(name, results)) for name in sessions]
    pythons = [row_python(spec, python) for spec, _ in rows]
    disagreements = 0
    for (spec, cases), interpreter in zip(rows, pythons, strict=True):
        print(f"== {spec.name} ({interpreter})", file=out)
        with tempfile.TemporaryDirectory(prefix="harness-regressions-") as work:
            for finding in found:
                test_file = finding.regression_test_path
                on_row = finding_on_row(finding, cases)
                for held in hold(finding, run_file(interpreter, test_file, pathlib.Path(work)), cases, spec.torch):
                    disagreements += not held.agrees
                    mark = "agrees" if held.agrees else "DISAGREES"
                    note = f" ({held.note})" if held.note else ""
                    print(f"  finding {finding.number} [{on_row}] {held.test}: {held.status}, the table "
                          f"expects {held.expected}: {mark}{note}", file=out)
    print(f"{disagreements} test(s) disagree with the table" if disagreements
          else "every regression test agrees with the table on the rows given", file=out)
    return 1 if disagreements else 0
