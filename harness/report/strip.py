"""The bug strip: each card of "Failing on the newest torch" on one line, a column per torch version
of its device line, marked where the card's cells fail this way, where they ran and did not, and
blank where none of its cases ran. Read at a glance: since when each bug fails, where it stopped
and came back, and which versions were never measured.

Worked out here from the cards (harness.report.cards: `versions` where they fail, `measured` where
their cases ran, `label` and `anchor`), so that report.json carries it and every rendering only
draws it.
"""

from __future__ import annotations

from harness.core import versions
from harness.report.flips import Learned

# What a cell of the strip says: its mark and what the mark means (a blank cell: not measured).
MARKS = {"fails": {"symbol": "✕", "meaning": "fails this way"},
         # each such cell's outcome came back with the same code and installs (harness.report.flips)
         "flips": {"symbol": "◐", "meaning": "fails this way only in cells known to flip"},
         "ran": {"symbol": "○", "meaning": "ran, did not fail this way"}}
NOT_MEASURED = "none of its cases ran on this torch"


def columns(torches: list[str]) -> list[dict]:
    """A line's torch versions as headed: major.minor ("2.15"), or the whole version where two of
    the line share a minor."""
    parsed = [versions.torch_version(torch) for torch in torches]
    minors = [(v.major, v.minor) for v in parsed]
    return [{"torch": torch, "short": f"{v.major}.{v.minor}" if minors.count((v.major, v.minor)) == 1 else str(v)}
            for torch, v in zip(torches, parsed, strict=True)]


def mark(card: dict, torch: str, session: str, learned: Learned) -> str | None:
    if torch in card["versions"]:
        failing = [c["case"] for c in card["cases"] if torch in c["versions"]]
        return "flips" if all(learned.of(session, case) for case in failing) else "fails"
    return "ran" if torch in card["measured"] else None


def bug_strip(cards: list[dict], lines: dict[str, list[tuple[str, str]]], learned: Learned) -> dict:
    """`lines`: each device line's (torch version, session) in order (its plain sessions'); `learned`:
    the cells known to flip (harness.report.flips). One strip per line that has a card, its rows in
    the cards' order."""
    strips: list[dict] = []
    for line, members in lines.items():
        held = [card for card in cards if card["line"] == line]
        if not held:
            continue
        torches = [torch for torch, _ in members]
        strips.append({"line": line, "versions": columns(torches), "rows": [
            {"label": card["label"], "anchor": card["anchor"], "status": card["status"],
             "what": card["finding"]["title"] if card.get("finding") else card["signature"],
             "marks": [mark(card, torch, session, learned) for torch, session in members]} for card in held]})
    drawn = {mark for strip in strips for row in strip["rows"] for mark in row["marks"]}
    # the legend says only the marks drawn: a mark it explains and the page never shows teaches nothing
    return {"marks": {name: meaning for name, meaning in MARKS.items() if name in drawn}, "not_measured": NOT_MEASURED,
            "lines": strips}
