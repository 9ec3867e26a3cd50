"""The cards of "Failing on the newest torch": what fails in the cells that fail on a line's newest
torch, grouped by bug signature, one card per failure and upstream status.

A property cell that failed several ways is one ExceptionGroup whose message ("N of M examples
failed, K ways: A | B") names no single bug; its record lists each failing example with its own
signature and classification (`metrics.property.failing_examples`). Each example joins the card of
its own signature, so a cell can sit on several cards, each naming which of its examples.

A card's torch versions and its "since" are read from exactly the cells it holds (its cases along
their line), in torch version order, and its status from what its failures matched: a reference
(a known upstream bug), a documented limitation, or nothing: NEW, not reported upstream.

Along the versions a bug is followed by what fails, not by how the message is worded (torch rewords
its errors: "target: aten.avg_pool2d_backward.default" on 2.1 is "expected: len(padding) == 2" on
2.14, for one program): a failing example by its program, a cell failing as a whole by its case; each
with the same status and reference. The wordings met along the way are kept on the card (`wordings`).
"""

from __future__ import annotations

import hashlib
import itertools
import re

from harness.core import versions
from harness.core.outcomes import FAILING, HARD, SIGNATURE_CHARACTERS, upstream_link
from harness.report.analysis import commands, ran, version_lines
from harness.report.results import SessionResult, bug_signature, opening_line

# The order cards are listed in: what nobody has reported upstream comes first.
STATUSES = ("new", "known", "limitation")
STATUS_TEXT = {"new": "NEW: not reported upstream", "known": "known upstream bug",
               "limitation": "documented limitation"}
# A cell that broke as a whole (the harness, its process, its time limit): the examples it may have
# recorded before breaking do not say why it failed.
WHOLE_CELL = ("error", "crash", "timeout")
# One bug met through two backends is one card: "backend='aot_eager' raised: X" and
# "backend='inductor' raised: X" fail in the same shared machinery (AOTAutograd, its partitioner);
# the card's cases still name each backend.
BACKEND_NAMED = re.compile(r"backend='[^']*' raised:")


def same_bug(signature: str) -> str:
    merged = BACKEND_NAMED.sub("backend=… raised:", signature)
    if merged != signature and signature.endswith("…"):
        # where the signature was cut depended on the backend name's length: cut where none reaches
        name, _, line = merged.partition(": ")
        merged = f"{name}: {line[:SIGNATURE_CHARACTERS - 32]}…"
    return merged


def failures(record: dict) -> list[dict]:
    """What failed in a cell: for a property cell, one entry per signature of its failing examples
    (`examples`: their numbers, from 1, in the record's list), each with the outcome and reference
    the case's declarations gave it; otherwise one entry for the cell as a whole (`examples` empty).
    Nothing for a cell that did not fail."""
    if record["outcome"] not in FAILING:
        return []
    examples = ((record.get("metrics") or {}).get("property") or {}).get("failing_examples") or []
    if not examples or record["outcome"] in WHOLE_CELL:
        return [{"signature": same_bug(bug_signature(record)), "outcome": record["outcome"],
                 "reference": record.get("reference"), "error": opening_line(record.get("message")), "examples": [],
                 "programs": set()}]
    found: dict[tuple, dict] = {}
    for number, example in enumerate(examples, 1):
        outcome = example.get("outcome") or "fail"
        reference = example.get("reference") if outcome != "fail" else None
        signature = same_bug(example["signature"])
        entry = found.setdefault((signature, outcome, reference), {
            "signature": signature, "outcome": outcome, "reference": reference,
            "error": opening_line(example.get("error")), "examples": [], "programs": set()})
        entry["examples"].append(number)
        if example.get("program"):
            entry["programs"].add(example["program"])
    return list(found.values())


def identity(failure: dict) -> tuple:
    """What a failure is along the versions (see above): its status and reference, and its programs
    (a property cell's failing examples) or, for a cell failing as a whole, nothing more: its case."""
    kind = status(failure)
    return kind, failure["reference"] if kind != "new" else None


def same_failure(failure: dict, record: dict) -> dict | None:
    """The failure of `record` (another version's record of the same case) that is `failure`'s bug: the
    same identity, and for a failing example one of the same programs. None where the bug is not there."""
    for other in failures(record):
        if identity(other) == identity(failure) and (
                failure["programs"] & other["programs"] if failure["programs"] else not other["programs"]):
            return other
    return None


def which(numbers: list[int], record: dict) -> str | None:
    """'examples 2 and 4 of 4': the failing examples of a property cell that fail the card's way."""
    if not numbers:
        return None
    listed = ", ".join(map(str, numbers[:-1])) + f" and {numbers[-1]}" if len(numbers) > 1 else str(numbers[0])
    of = sum(len(f["examples"]) for f in failures(record))
    return f"example{'s' if len(numbers) > 1 else ''} {listed} of {of}"


def status(failure: dict) -> str:
    """new (failed, matching no declaration: whatever was declared, this failure is not it),
    known (matched an upstream bug) or limitation (matched a documented limitation)."""
    return failure["outcome"] if failure["outcome"] in ("known", "limitation") else "new"


def spans(found: list[str], along: list[str]) -> list[list[str]]:
    """`found` (torch versions) as runs of consecutive versions of `along` (the line's versions in
    order): [[first, last], ...], so a gap in the middle shows."""
    runs: list[list[str]] = []
    previous = None
    for index, version in enumerate(along):
        if version not in found:
            continue
        if runs and previous == index - 1:
            runs[-1][1] = version
        else:
            runs.append([version, version])
        previous = index
    return runs


def by_version(torches) -> list[str]:
    """Distinct torch versions in packaging's order (never the order they were met in)."""
    return sorted(set(torches), key=versions.torch_version)


def failing_cards(sessions: list[SessionResult], case_ids: list[str]) -> list[dict]:
    """Per line, the failures of the cells whose outcome on its newest torch is fail, error, crash
    or timeout, grouped by (signature, status, reference): NEW cards first, then those matching an
    upstream bug, then documented limitations, largest first. A card holds its cases along the line;
    `versions` are the torch versions where any of those cells failed this way, `since` the first."""
    cards: dict[tuple, dict] = {}
    for line, members in version_lines(sessions).items():
        newest = members[-1]
        for case in case_ids:
            record = newest.cases.get(case)
            if not record or record["outcome"] not in HARD or newest.absent(case):
                continue
            history = ran(members, case)
            for failure in failures(record):
                kind = status(failure)
                reference = failure["reference"] if kind != "new" else None
                card = cards.setdefault((line, failure["signature"], kind, reference), {
                    "line": line, "signature": failure["signature"], "status": kind, "status_text": STATUS_TEXT[kind],
                    "reference": reference, "link": upstream_link(reference), "outcome": failure["outcome"],
                    "error": failure["error"], "session": newest.name, "torch": newest.torch, "cases": [],
                    "declared": [], "measured": [], "wordings": {}, **commands(case, newest.name)})
                met = [(s.torch, found) for s, r in history for found in [same_failure(failure, r)] if found]
                seen = by_version(torch for torch, _ in met)
                for torch, other in met:
                    card["wordings"].setdefault(other["signature"], []).append(torch)
                card["cases"].append({"case": case, "outcome": record["outcome"], "examples": failure["examples"],
                                      "which": which(failure["examples"], record), "versions": seen,
                                      "since": seen[0] if seen else newest.torch})
                card["measured"] += [s.torch for s, _ in history]
                for declaration in record.get("declared") or []:
                    if kind == "new" and declaration not in card["declared"]:
                        card["declared"].append(declaration)  # declared for the case, and this failure is not it
    for card in cards.values():
        card["versions"] = by_version(v for c in card["cases"] for v in c["versions"])
        card["since"] = card["versions"][0]
        card["measured"] = by_version(card["measured"])  # where its cases ran: the bug strip's "did not fail"
        card["spans"] = spans(card["versions"], card["measured"])
        # each wording and where it was met, the card's own first; one wording: nothing to say
        wordings = sorted(card["wordings"].items(), key=lambda w: (w[0] != card["signature"], by_version(w[1])[0]))
        card["wordings"] = [{"signature": text, "spans": spans(by_version(torches), card["measured"])}
                            for text, torches in wordings] if len(wordings) > 1 else []
    found = sorted(cards.values(), key=lambda c: (STATUSES.index(c["status"]), -len(c["cases"]), c["line"],
                                                 c["signature"], c["reference"] or ""))
    for number, card in enumerate(found, 1):
        # the anchor is the bug's, not its place: a link to it holds when other cards come and go
        key = "\n".join((card["line"], card["signature"], card["status"], card["reference"] or ""))
        card["anchor"] = "bug-" + hashlib.sha256(key.encode()).hexdigest()[:10]
        card["number"] = number  # its place in the list, from 1
    name(found)
    return found


def _letters():
    """A, B, ..., Z, AA, AB, ...: what names the cards that hold no finding."""
    for size in itertools.count(1):
        for letters in itertools.product("ABCDEFGHIJKLMNOPQRSTUVWXYZ", repeat=size):
            yield "".join(letters)


def name(cards: list[dict]) -> None:
    """Each card's `label`, the one name the report calls it by: "Finding N" for a card that holds a
    finding (`finding`: its number in results/reductions/findings.toml, README and the issue texts,
    whatever the card's place), else "Card A", "Card B", ... in the cards' order: a letter, so never
    read as a finding's number. Run again once findings are attached (harness.report.findings).

    A failure that is NEW on some cases and matches a reference on others gets two cards (a
    reference is matched or not, never both on one card); each names in `same_failure` the other
    cards it shares the failure with, so a missing declaration shows."""
    letters = _letters()
    for card in cards:
        finding = card.get("finding")
        card["label"] = f"Finding {finding['number']}" if finding else f"Card {next(letters)}"
    for card in cards:
        card["same_failure"] = [reference(other) for other in cards if other is not card and
                                (other["line"], other["signature"]) == (card["line"], card["signature"])]


def reference(card: dict) -> dict:
    """How another part of the report points at a card: its label and its anchor."""
    return {"label": card["label"], "anchor": card["anchor"]}


def failing_cases(cards: list[dict]) -> int:
    """How many cells the cards hold: a cell on several cards (one per way it failed) counts once."""
    return len({(card["line"], c["case"]) for card in cards for c in card["cases"]})
