"""The bugs found here and not reported upstream (results/reductions/findings.toml), each shown on
the one card of "Failing on the newest torch" that holds it, with what a maintainer files: the
reduced plain-torch script, its issue text and a search of the upstream tracker.

The catalogue says where a finding is shown, never an outcome: a card is matched by its own cases
and signature, and a finding that matches no card, or several, is named in the report's data
(`findings_unmatched`), so a failure that changed shape shows instead of a stale label.
"""

from __future__ import annotations

import dataclasses
import functools
import pathlib
import re
import sys
import urllib.parse

from harness.core import paths, versions
from harness.core.swept import Swept
from harness.core.swept import read as read_swept
from harness.report import cards as carding
from harness.report.results import ReportError
from harness.report.upstream_patch import UpstreamTest

# by the version, not by trying: the type checker follows the branch of the Python it checks for
if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10
    import tomli as tomllib

REDUCTIONS = paths.ROOT / "results" / "reductions"
FIXES = REDUCTIONS / "fixes"
CATALOGUE = REDUCTIONS / "findings.toml"
TRACKER = "https://github.com/pytorch/pytorch/issues"


@dataclasses.dataclass(frozen=True)
class Finding:
    number: int
    title: str
    cases: tuple[str, ...]  # case-id prefixes
    signature: re.Pattern
    script: str  # a file of results/reductions; its issue text is the .md beside it
    search: str  # the words searched upstream
    cause: str | None = None  # the root cause in torch's source, where it was found (docs/findings.md shows how)
    searched: tuple[str, ...] = ()  # the queries run on the upstream tracker
    related: tuple[str, ...] = ()  # upstream threads near it, each with what it is
    # What each test of its regression test file is held to on each row (harness.report.regressions):
    # by test name, "cause" or a case-id prefix; a test not named runs the table's own program.
    tests: tuple[tuple[str, str], ...] = ()
    # Why its script, swept, and its cells say different things of a version, where they do (the
    # cells run the user's program, the script the cause alone): `findings --check` fails without it.
    span_note: str | None = None
    # What it is against upstream's history ("new bug", "regression of a fix", "deliberate gap", ...) and
    # that history: the changes at the code it blames, each with the first release that has it.
    kind: str | None = None
    history: str | None = None
    # Where its regression test goes upstream, for the one patch of fix and test (harness.report.upstream_patch).
    upstream_test: UpstreamTest | None = None

    @property
    def stem(self) -> str:
        return pathlib.Path(self.script).stem

    @property
    def issue_path(self) -> pathlib.Path:
        return REDUCTIONS / pathlib.Path(self.script).with_suffix(".md").name

    @property
    def fix_path(self) -> pathlib.Path | None:
        """The proposed fix (fixes/SCRIPT.diff against torch's Python, or fixes/SCRIPT.aten.diff against
        ATen's C++ source; its regression test fixes/test_SCRIPT.py), where there is one."""
        return next((path for path in (FIXES / f"{self.stem}.diff", self.aten_fix_path) if path.is_file()), None)

    @property
    def aten_fix_path(self) -> pathlib.Path:
        """A fix in ATen's C++ (fixes/SCRIPT.aten.diff): a wheel has no source to patch, so fixes/check.py
        --aten builds the patched file against a torch as kernels that replace the wheel's."""
        return FIXES / f"{self.stem}.aten.diff"

    @property
    def regression_test_path(self) -> pathlib.Path:
        """The fix's regression test, in PyTorch's style (fixes/test_SCRIPT.py)."""
        return FIXES / f"test_{self.stem}.py"

    @property
    def patch_path(self) -> pathlib.Path:
        """The fix and its regression test as one patch against upstream (fixes/SCRIPT.patch)."""
        return FIXES / f"{self.stem}.patch"

    @property
    def neighbours_path(self) -> pathlib.Path | None:
        """What the fix changes in its upstream neighbours' expectations (fixes/SCRIPT.neighbours.diff: the
        graphs or schemas they print), where it changes any."""
        path = FIXES / f"{self.stem}.neighbours.diff"
        return path if path.is_file() else None

    def holds(self, card: dict) -> bool:
        return bool(self.signature.search(card["signature"])) and any(
            c["case"].startswith(self.cases) for c in card["cases"])

    def as_dict(self) -> dict:
        issue, has_fix = self.issue_path.name, self.fix_path is not None
        return {"number": self.number, "title": self.title,
                "script": f"results/reductions/{self.script}", "issue": f"results/reductions/{issue}",
                "swept": self.swept.line() if self.swept else None, "span_note": self.span_note,
                "swept_versions": self.swept.versions if self.swept else 0,
                "search": self.search,
                "search_link": f"{TRACKER}?{urllib.parse.urlencode({'q': 'is:issue ' + self.search})}",
                "cause": self.cause,
                # a proposed fix and the test that guards it (fixes/check.py checks both against a torch)
                "fix": f"results/reductions/fixes/{self.fix_path.name}" if self.fix_path else None,
                "regression_test": f"results/reductions/fixes/{self.regression_test_path.name}" if has_fix else None,
                # the two as one patch for upstream, the test among its neighbours (harness.report.upstream_patch)
                "patch": f"results/reductions/fixes/{self.patch_path.name}" if has_fix and self.patch_path.is_file()
                else None}


    @functools.cached_property  # read once: the card, its line and its check all ask for it
    def swept(self) -> Swept | None:
        """Where the script itself fails, as its issue text says (`harness sweep --issue` wrote it, from
        running the script in each version's venv)."""
        try:
            return read_swept(self.issue_path.read_text(encoding="utf-8"))
        except OSError:
            return None


def script_against_cells(card: dict, swept: Swept | None) -> list[str]:
    """Each version where the finding's script, swept, and the card's cells disagree: the script fails
    there and the cells ran and did not fail this way, it passes where they fail, or it fails another
    way where they fail this way. A property cell draws other programs on each row, and a case runs
    the user's program, not the cause alone, so they can; the card must then say why (span_note)."""
    if swept is None:
        return []
    failing = {str(versions.torch_version(v)) for v in card["versions"]}
    ran = {str(versions.torch_version(v)) for v in card["measured"]}
    return ([f"the script fails on {v}, where the cells ran and did not fail this way"
             for v in swept.failing if v in ran and v not in failing]
            + [f"the script passes on {v}, where the cells fail" for v in swept.passing if v in failing]
            + [f"the script fails another way on {v}, where the cells fail this way"
               for v in swept.otherwise_versions if v in failing])


# "a regression ... between 2.12.1 and 2.13.0": the history names the last release without the bug and the first with it
BETWEEN = re.compile(r"\bbetween (\d+\.\d+(?:\.\d+)?) and (\d+\.\d+(?:\.\d+)?)")


def history_against_sweep(finding: Finding) -> list[str]:
    """Where what a finding's kind and history say of its versions disagrees with its script, swept: a
    regression needs a release, older than the first failing one, where the script passes; a history that
    puts the change "between A and B" needs the script to pass on A and fail on B, where both were swept."""
    swept = finding.swept
    if swept is None or not swept.failing:
        return []
    said = []
    first = versions.torch_version(swept.failing[0])
    if (finding.kind or "").startswith("regression") and not any(
            versions.torch_version(v) < first for v in swept.passing):
        said.append(f"finding {finding.number}: a regression, yet no release older than {swept.failing[0]}, where "
                    "its script first fails, was swept passing")
    for before, after in BETWEEN.findall(f"{finding.title} {finding.history or ''}"):
        if before in swept.failing or before in {v for v, _ in swept.otherwise}:
            said.append(f"finding {finding.number}: its history puts the change after {before}, where the script fails")
        if after in swept.passing:
            said.append(f"finding {finding.number}: its history puts the change at {after}, where the script passes")
    return said


def without_history(catalogue: list[Finding]) -> list[str]:
    """One line per finding whose issue text could not give the history of the code it blames."""
    return [f"finding {f.number}: no history (findings.toml: `kind` and `history`)" for f in catalogue
            if not (f.kind and f.history)]


def unexplained(cards: list[dict]) -> list[str]:
    """One line per finding whose script and cells disagree with no span_note to say why."""
    return [f"finding {card['finding']['number']}: {'; '.join(card['finding']['script_differs'])} "
            "(findings.toml gives no span_note)" for card in cards
            if card.get("finding") and card["finding"]["script_differs"] and not card["finding"]["span_note"]]


def load(path: pathlib.Path = CATALOGUE) -> list[Finding]:
    """The catalogue; none where a checkout has no file (a table measured elsewhere)."""
    if not path.is_file():
        return []
    try:
        table = tomllib.loads(path.read_text())
        return [Finding(int(f["number"]), str(f["title"]), tuple(f["cases"]), re.compile(f["signature"]),
                        str(f["script"]), str(f["search"]), str(f["cause"]) if "cause" in f else None,
                        tuple(map(str, f.get("searched", ()))), tuple(map(str, f.get("related", ()))),
                        tuple((str(name), str(kind)) for name, kind in f.get("tests", {}).items()),
                        str(f["span_note"]) if "span_note" in f else None,
                        str(f["kind"]) if "kind" in f else None, str(f["history"]) if "history" in f else None,
                        UpstreamTest(**f["upstream_test"]) if "upstream_test" in f else None)
                for f in table.get("finding", [])]
    except (tomllib.TOMLDecodeError, KeyError, TypeError, ValueError, AttributeError, re.error) as exc:
        raise ReportError(f"{path}: not a findings catalogue: {exc}") from None


def attach(cards: list[dict], catalogue: list[Finding]) -> list[dict]:
    """Each card gets `finding`: the one finding it holds (or None), and is named again by it
    ("Finding N": cards.name). Returns the findings that hold no card, or more than one, each with
    the cards it matched (`cards`: each one's label and anchor)."""
    for card in cards:
        card["finding"] = None
    unmatched = []
    for finding in catalogue:
        held = [card for card in cards if finding.holds(card)]
        if len(held) == 1 and held[0]["finding"] is None:
            held[0]["finding"] = {**finding.as_dict(), "script_differs": script_against_cells(held[0], finding.swept)}
        else:
            unmatched.append((finding, held))
    carding.name(cards)
    return [{**finding.as_dict(), "cards": [carding.reference(card) for card in held]} for finding, held in unmatched]
