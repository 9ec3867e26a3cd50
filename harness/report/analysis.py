"""What the regression table says, worked out once for every rendering (harness.report.render): the
sessions and their grid, the known bugs grouped by the reference each case matched, regressions and
fixes per version step. The sessions are read by harness.report.results; what fails on the newest
torch, grouped by bug, is harness.report.cards; a session against another of its row is
harness.report.comparisons.
"""

from __future__ import annotations

import datetime

from harness.core import caseid, records
from harness.core.outcomes import DECLARED, FAILING, HARD, OUTCOMES, PASSING, REFERENCED, upstream_link
from harness.report.comparisons import cpu_twins, row_cpu_session
from harness.report.flips import Learned
from harness.report.results import NOT_RUN, SessionResult, opening_line

BACKENDS = ("eager", "aot_eager", "inductor")
CELL_KEYS = ("outcome", "exc_type", "message", "reference", "declared", "metrics", "duration")


def case_order(case_id: str, record: dict):
    """Rows: family, variant, the shared parameters (device, dtype, backend, fullgraph), the id."""
    params = record.get("params") or {}
    backend = params.get("backend")
    return (record.get("family") or "", params.get("variant") or caseid.parse(case_id).variant,
            str(params.get("device") or ""), str(params.get("dtype") or ""),
            BACKENDS.index(backend) if backend in BACKENDS else len(BACKENDS), str(backend or ""),
            str(params.get("fullgraph")), case_id)


def version_lines(sessions: list[SessionResult]) -> dict[str, list[SessionResult]]:
    """Each device line's plain, released sessions in torch order: the steps transitions are read
    along (a labelled session is another environment of a row, no step)."""
    lines: dict[str, list[SessionResult]] = {}
    for session in sessions:
        if session.label is None and session.identity["row"] != "nightly":
            lines.setdefault(session.line, []).append(session)
    return lines


def ran(line: list[SessionResult], case: str) -> list[tuple[SessionResult, dict]]:
    """(session, record) along a line where the case ran on its device."""
    return [(s, s.cases[case]) for s in line if case in s.cases and not s.absent(case)]


def stable_since(history: list[tuple[SessionResult, dict]]) -> SessionResult:
    """The first session of the run of equal outcomes that ends the history."""
    since = history[-1][0]
    for session, record in reversed(history[:-1]):
        if record["outcome"] != history[-1][1]["outcome"]:
            break
        since = session
    return since


def commands(case: str, session: str) -> dict:
    return {"repro": f"nox -s repro -- '{case}' --session {session}", "bisect": f"nox -s bisect -- '{case}'"}


def known_groups(sessions: list[SessionResult], case_ids: list[str]) -> list[dict]:
    """The newest outcome of each case per line that is known, limitation or fixed, under the one
    reference it matched: upstream bugs first, then documented limitations."""
    groups: dict[str, dict] = {}
    for line, members in version_lines(sessions).items():
        for case in case_ids:
            history = ran(members, case)
            if not history or history[-1][1]["outcome"] not in REFERENCED:
                continue
            session, record = history[-1]
            ref = record.get("reference") or ""
            group = groups.setdefault(ref, {"ref": ref, "link": upstream_link(ref), "kinds": set(), "cases": []})
            group["kinds"].add(record["outcome"])
            group["cases"].append({"case": case, "line": line, "session": session.name, "outcome": record["outcome"],
                                   "since": stable_since(history).torch,
                                   "message": opening_line(record.get("message"))})
    for group in groups.values():
        group["kind"] = next(k for k in REFERENCED if k in group["kinds"])
        group["kinds"] = sorted(group["kinds"], key=lambda k: OUTCOMES[k].severity)
        group["count"] = len({c["case"] for c in group["cases"]})
    kinds = REFERENCED  # still failing as declared first, then the bugs no longer reproducing
    return sorted(groups.values(),
                  key=lambda g: (kinds.index(g["kind"]), -g["count"], g["ref"] == "", g["ref"].lower()))


def step_kind(old: str, new: str, flips: bool) -> str:
    """What a change of outcome between neighbouring versions is. `flips`: the outcome comes back
    at the next step, a side is flaky (its attempts disagreed), or a side's cell is known to flip
    (harness.report.flips: learned from the table's history): no version range to bisect, so kept
    apart from regressions and fixes. A regression: passing, a known bug or a documented
    limitation before, failing (fail, error, crash, timeout) after, or passing before and a known
    bug after. A fix: failing before (a declared failure included), passing after."""
    if flips or "flaky" in (old, new):
        return "flips"
    if new in HARD and (old in PASSING or old in DECLARED) or old in PASSING and new in DECLARED:
        return "regressions"
    if old in FAILING and new in PASSING:
        return "fixes"
    return "other"


def transitions(sessions: list[SessionResult], case_ids: list[str], learned: Learned | None = None) -> list[dict]:
    """Every step between adjacent torch versions of a line, newest first, with the cases whose
    outcome changed, by `step_kind`: `regressions`, `fixes`, `flips` and `other`. `learned`: the
    cells known to flip, from the table's history."""
    learned = learned or Learned({})
    steps: list[dict] = []
    for line, members in version_lines(sessions).items():
        by_step: dict[tuple, dict] = {}
        for case in case_ids:
            history = ran(members, case)
            outcomes = [record["outcome"] for _, record in history]
            for index, ((before, old), (after, new)) in enumerate(zip(history, history[1:], strict=False)):
                if old["outcome"] == new["outcome"]:
                    continue
                # A -> B -> A over three neighbouring versions: both steps flip
                flips = (index + 2 < len(outcomes) and outcomes[index + 2] == outcomes[index]) or (
                    index > 0 and outcomes[index - 1] == outcomes[index + 1])
                known = learned.of(before.name, case) or learned.of(after.name, case)
                step = by_step.setdefault((before.name, after.name), {
                    "line": line, "from_session": before.name, "from_torch": before.torch, "to_session": after.name,
                    "to_torch": after.torch, "version": after.version, "regressions": [], "fixes": [], "flips": [],
                    "other": []})
                step[step_kind(old["outcome"], new["outcome"], flips or known is not None)].append({
                    "case": case, "from": old["outcome"], "to": new["outcome"],
                    "message": opening_line(new.get("message") or old.get("message")),
                    "flip": known.text() if known else None})
        steps += by_step.values()
    order = list(version_lines(sessions))
    steps.sort(key=lambda s: s.pop("version"), reverse=True)  # newest step first, then by line
    return sorted(steps, key=lambda s: order.index(s["line"]))


def _state(session: SessionResult, missing: int) -> str:
    if not session.complete:
        return "incomplete: stopped early (no end record)"
    if missing:
        return f"incomplete: lacks {missing} case{'s' if missing != 1 else ''} the other sessions have"
    return "complete"


def cell(session: SessionResult, case: str) -> dict:
    record = session.cases.get(case)
    if record is None:
        return {"outcome": NOT_RUN}
    found = {key: record.get(key) for key in CELL_KEYS}
    found.update({key: record[key] for key in records.OPTIONAL_CASE_KEYS if record.get(key)})
    if session.absent(case):
        found["absent"] = True
    return found


def session_row(s: SessionResult, case_ids: list[str], devices: dict | None = None) -> dict:
    """`devices`: each case's device parameter (a CUDA session runs the cases on `cuda` only, so
    those are what it can lack; the row's CPU session runs the others)."""
    # A Lightning-axis session runs only the cases that use Lightning: the others are not missing.
    expected = [c for c in case_ids if s.device != "cuda" or (devices or {}).get(c) == "cuda"]
    missing = 0 if s.lightning_of else sum(1 for c in expected if c not in s.cases)
    counts: dict[str, int] = {}
    for case in expected:
        outcome = NOT_RUN if case not in s.cases else "absent" if s.absent(case) else s.cases[case]["outcome"]
        if not (s.lightning_of and outcome == NOT_RUN):
            counts[outcome] = counts.get(outcome, 0) + 1
    return {"name": s.name, "torch": s.torch, "device": s.device, "line": s.line, "label": s.label,
            "plain": s.plain if s.label else None, "lightning_of": s.lightning_of,
            "complete": s.complete and not missing, "finished": s.complete,
            "state": _state(s, missing), "lightning": s.environment.get("lightning"),
            "cuda": s.environment.get("cuda"), "gpu": s.environment.get("gpu"), "python": s.environment.get("python"),
            "started": s.environment.get("started"), "git_commit": s.environment.get("git_commit"),
            "cpu": s.environment.get("cpu"), "measured": measured(s),  # where and when its cells come from
            "counts": counts, "missing": missing, "absent": counts.get("absent", 0),
            "reused": sum(1 for r in s.cases.values() if r.get("reused_from"))}


def when(text: str | None) -> datetime.datetime | None:
    """A record's `started` as an aware time (None when missing or unreadable: never guessed)."""
    try:
        found = datetime.datetime.fromisoformat(text or "")
    except ValueError:
        return None
    return found if found.tzinfo else found.replace(tzinfo=datetime.timezone.utc)


def measured(session: SessionResult) -> str | None:
    """When the session's cells were measured: its run's start, or where the run measured nothing
    itself (every record carried over), the start of the run it carried them from."""
    carried = session.environment.get("reused_from") or {}
    return carried.get("started") or session.environment.get("started")


def measurement_span(sessions: list[SessionResult]) -> dict:
    """The oldest and newest time any record of the table was measured: each session's start and
    each carried-over record's own (a reused record was measured when its first run was)."""
    times = [measured(s) for s in sessions]
    times += [(r.get("reused_from") or {}).get("started") for s in sessions for r in s.cases.values()]
    known = sorted((when(t), t) for t in times if when(t) is not None)
    return {"oldest": known[0][1] if known else None, "newest": known[-1][1] if known else None}


def grid(sessions: list[SessionResult]) -> tuple[list[str], list[dict]]:
    """(case ids in row order, one row per case with a cell per session)."""
    first: dict[str, dict] = {}
    for session in sessions:
        for case, record in session.cases.items():
            first.setdefault(case, record)
    case_ids = sorted(first, key=lambda c: case_order(c, first[c]))
    lines = version_lines(sessions)
    twins = {s.name: (cpu, cpu_twins(s, cpu)) for s in sessions if s.device == "cuda"
             for cpu in [row_cpu_session(s, sessions)] if cpu is not None}
    rows = []
    for case in case_ids:
        cells = {s.name: cell(s, case) for s in sessions}
        for name, (cpu, of) in twins.items():
            twin = of.get(case)
            if twin is not None and cpu.cases[twin]["outcome"] != cells[name]["outcome"]:
                cells[name]["cpu_twin"] = {"case": twin, "session": cpu.name, "outcome": cpu.cases[twin]["outcome"]}
        folded = all(s.absent(case) for s in sessions if case in s.cases)  # every record: no device here
        since = {}
        for line, members in lines.items():
            history = ran(members, case)
            held = stable_since(history) if history else None
            if held is not None and held not in (history[0][0], history[-1][0]):
                since[line] = held.torch  # only where the newest outcome held since a change
        rows.append({"case": case, "family": first[case]["family"],
                     "params": first[case].get("params") or {}, "folded": folded,
                     "all_skip": not folded and all(c["outcome"] == "skip" for c in cells.values()
                                                    if c["outcome"] != NOT_RUN), "cells": cells, "since": since})
    return case_ids, rows


def newest_counts(sessions: list[SessionResult], case_ids: list[str]) -> list[dict]:
    """Per line, the newest torch's session and how many cases came to each outcome there."""
    found = []
    for line, members in version_lines(sessions).items():
        newest = members[-1]
        counts: dict[str, int] = {}
        for case in case_ids:
            if case in newest.cases and not newest.absent(case):
                counts[newest.cases[case]["outcome"]] = counts.get(newest.cases[case]["outcome"], 0) + 1
        found.append({"line": line, "session": newest.name, "torch": newest.torch, "cases": sum(counts.values()),
                      "counts": {o: counts[o] for o in OUTCOMES if counts.get(o)}})
    return found
