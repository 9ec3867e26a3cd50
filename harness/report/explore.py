"""What an explore run found (`nox -s explore`): `python -m harness explore-summary [DIR]`.

An explore run draws many examples per property cell from a fresh seed and shrinks one failing
example per error signature (harness.plugin.properties). This gathers them across the cells of the
run's results files: one row per signature, new (no declaration of the case matched it) or known
(with the reference it met), the cells it failed in and its smallest shrunk example, new ones
first; then how many examples each family's cells judged per op class (the op properties), so that
a run that never reached a class says so. The nightly's explore job writes it to its step summary.
"""

from __future__ import annotations

import dataclasses
import pathlib

from harness.core import outcomes, records
from harness.core.errors import BadInput
from harness.core.markdown import fence

SHOWN_PROGRAM_LINES = 30


@dataclasses.dataclass
class Finding:
    """One error signature across the cells of a run."""
    signature: str
    outcome: str  # `fail`: new; else how the case's declarations classify it
    reference: str | None
    cells: list = dataclasses.field(default_factory=list)  # case ids
    example: dict | None = None  # the smallest shrunk example (program, figures, error)

    @property
    def new(self) -> bool:
        return self.outcome == "fail"


def explored(paths: list[pathlib.Path]) -> tuple[list[dict], list[dict]]:
    """(environment records, case records of explore-mode property cells) of the results files."""
    environments, cells = [], []
    for path in paths:
        found = records.read(path)
        environments += [r for r in found if r["kind"] == "environment"]
        cells += [r for r in found if r["kind"] == "case"
                  and ((r.get("metrics") or {}).get("property") or {}).get("mode") == "explore"]
    return environments, cells


def findings(cells: list[dict]) -> list[Finding]:
    """The failing examples of the cells grouped by signature, new ones first, then most cells."""
    found: dict[tuple[str, str, str | None], Finding] = {}
    for cell in cells:
        for example in cell["metrics"]["property"].get("failing_examples") or []:
            signature = example.get("signature") or outcomes.bug_signature(*example["error"].partition(": ")[::2])
            key = (signature, example.get("outcome", "fail"), example.get("reference"))
            finding = found.setdefault(key, Finding(signature, key[1], key[2]))
            if cell["case"] not in finding.cells:
                finding.cells.append(cell["case"])
            if finding.example is None or len(example.get("program", "")) < len(finding.example.get("program", "")):
                finding.example = example
    return sorted(found.values(), key=lambda f: (not f.new, -len(f.cells), f.signature))


def classes_by_family(cells: list[dict]) -> dict[str, dict[str, int]]:
    """Examples judged per op class, per family (the op properties record them)."""
    table: dict[str, dict[str, int]] = {}
    for cell in cells:
        for name, count in (cell["metrics"]["property"].get("examples_by_class") or {}).items():
            family = table.setdefault(cell["family"], {})
            family[name] = family.get(name, 0) + count
    return table


def _cell(text) -> str:
    return str(text or "").replace("|", "/").replace("\n", " ")[:160]


def markdown(environments: list[dict], cells: list[dict]) -> str:
    sessions = sorted({e["session"] for e in environments})
    torch = sorted({e.get("torch") or "?" for e in environments})
    runs = sum(c["metrics"]["property"].get("examples_run", 0) for c in cells)
    if all("examples_drawn" in c["metrics"]["property"] for c in cells):
        drawn = sum(c["metrics"]["property"]["examples_drawn"] for c in cells)
        examples = f"{drawn} examples drawn ({runs} runs, hypothesis's shrinking included)"
    else:  # records from before the budget counted draws say only how many ran
        examples = f"{runs} examples run"
    seeds = sorted({c["metrics"]["property"].get("seed") for c in cells})
    found = findings(cells)
    new = [f for f in found if f.new]
    lines = [f"### Explore: {', '.join(sessions) or 'no session'} (torch {', '.join(torch)})", "",
             f"{examples} in {len(cells)} property cells (seed {', '.join(map(str, seeds)) or '-'}); "
             f"{len(found)} failing signatures, **{len(new)} new** (no declaration of the case matches them).", ""]
    if found:
        lines += ["| | signature | cells | first cell | known as |", "|---|---|---|---|---|"]
        lines += [f"| {'🆕' if f.new else '·'} | {_cell(f.signature)} | {len(f.cells)} | `{f.cells[0]}` | "
                  f"{'' if f.new else (f.reference or f.outcome)} |" for f in found]
        lines.append("")
    for finding in new:
        program = "\n".join((finding.example or {}).get("program", "").splitlines()[:SHOWN_PROGRAM_LINES])
        lines += [f"<details><summary>🆕 {_cell(finding.signature)} ({len(finding.cells)} cells)</summary>", "",
                  f"Cells: {', '.join(f'`{c}`' for c in finding.cells)}", "",
                  f"Its smallest shrunk example ({_cell((finding.example or {}).get('error'))}):", "",
                  fence(program, "python"), "",
                  f"To write it as a script: `HARNESS_RESULTS_DIR=<this run's results dir> nox -s repro -- "
                  f"'{finding.cells[0]}' --session {sessions[0] if sessions else 'SESSION'}`", "", "</details>", ""]
    table = classes_by_family(cells)
    if table:
        classes = sorted({name for family in table.values() for name in family})
        lines += ["Examples judged per op class (op properties):", "",
                  "| family | " + " | ".join(classes) + " |", "|---|" + "---|" * len(classes)]
        lines += [f"| {family} | " + " | ".join(str(counts.get(name, 0)) for name in classes) + " |"
                  for family, counts in sorted(table.items())]
    return "\n".join(lines).rstrip() + "\n"


def results_files(folder: pathlib.Path, session: str | None = None) -> list[pathlib.Path]:
    """The explore run's results files in `folder` (one session's, where named)."""
    if not folder.is_dir():
        raise BadInput(f"{folder}: no such directory (nox -s explore writes results/explore)")
    found = sorted(folder.glob(f"{session}.jsonl" if session else "*.jsonl"))
    if not found:
        raise BadInput(f"{folder}: no results file{' of ' + session if session else ''} (run nox -s explore first)")
    return found
