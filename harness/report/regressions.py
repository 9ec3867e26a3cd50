"""Each finding's regression test (results/reductions/fixes/test_SCRIPT.py) held to the rows of the table.

    python -m harness regressions SESSION [SESSION ...] [--finding N ...] [--python PYTHON] [--results DIR]

For each session (a row of the committed table), every regression test file runs in the row's venv
(or PYTHON, whose torch must be the row's), each file by pytest in a process of its own, with compile
caches and a temporary directory of its own, outside the checkout (its pytest settings stay out).
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
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ElementTree

from packaging import version

from harness.core import matrix, outputs, paths, records, venvs
from harness.core.errors import BadInput
from harness.report import cards
from harness.report import findings as catalogue

CAUSE, WORKS = "cause", "works"
PROPERTY = "/property_"  # in a property case's id
KINDS = (CAUSE, WORKS)
# "works since 2.5": what a fix must keep working from that torch on; before it the bug reached it too
SINCE = " since "
FILE_TIMEOUT = 900  # seconds for one test file (the slowest, finding 5's, takes about 60 s on 2 cores)


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


def run_file(python: pathlib.Path, test_file: pathlib.Path, work: pathlib.Path) -> dict[str, str] | str:
    """Each test of `test_file` by name: passed, failed or skipped; a string where the file could not
    be collected (what it said)."""
    here = work / test_file.stem
    here.mkdir(parents=True)
    shutil.copy2(test_file, here / test_file.name)
    report = here / "junit.xml"
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "PYTEST_ADDOPTS")}
    caches = here / "caches"
    env.update(TORCHINDUCTOR_CACHE_DIR=str(caches / "inductor"), TRITON_CACHE_DIR=str(caches / "triton"),
               TMPDIR=str(caches))
    caches.mkdir()
    code, printed = outputs.run([str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={report}",
                                 f"--rootdir={here}", test_file.name], timeout=FILE_TIMEOUT, cwd=here, env=env)
    if code is None:
        return f"ran past {FILE_TIMEOUT} s"
    if not report.is_file():
        return (printed.strip().splitlines() or [f"pytest exit {code}"])[-1][:200]
    found: dict[str, str] = {}
    for case in ElementTree.parse(report).getroot().iter("testcase"):
        # a collection error: a testcase named after the module, with no class
        error = case.find("error")
        if error is not None and (not case.get("classname") or case.get("name") == test_file.stem):
            said = [line[1:].strip() for line in (error.text or "").splitlines() if line.startswith("E ")]
            return (said[-1] if said else error.get("message") or "a collection error")[:200]
        status = ("failed" if case.find("failure") is not None or case.find("error") is not None
                  else "skipped" if case.find("skipped") is not None else "passed")
        found[case.get("name", "")] = status  # JUnit XML's testcase always has its name
    return found or (printed.strip().splitlines() or ["no test collected"])[-1][:200]


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


def row_python(spec: matrix.Session, python: str | None) -> pathlib.Path:
    """The interpreter that holds the row's torch: PYTHON, else the session's venv."""
    chosen = pathlib.Path(python).absolute() if python else venvs.venv_python(spec.name)
    if not chosen.exists():
        raise BadInput(f"{spec.name}: no venv at {venvs.venv_of(chosen)} (run `nox -s {spec.name}` first, or "
                       f"give --python)")
    done = subprocess.run([str(chosen), "-c", "import torch; print(torch.__version__)"], capture_output=True,
                          text=True, env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    version = done.stdout.strip().split("+")[0]
    if done.returncode != 0 or (spec.torch and version != spec.torch):
        said = version or (done.stderr.strip().splitlines() or ["no torch"])[-1]
        raise BadInput(f"{spec.name}: {chosen} has torch {said}, the row pins {spec.torch}")
    return chosen


def row_cases(session: str, results: pathlib.Path) -> list[dict]:
    path = paths.results_path(session, results)
    if not path.is_file():
        raise BadInput(f"{session}: the table has no row here ({path} is missing)")
    return [record for record in records.read(path) if record.get("kind") == "case"]


def check(sessions: list[str], python: str | None = None, results: pathlib.Path | None = None,
          numbers: list[int] | None = None, out=sys.stdout) -> int:
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
                test_file = catalogue.FIXES / f"test_{finding.stem}.py"
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
