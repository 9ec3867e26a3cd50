"""What the regression table says, worked out once for every rendering (harness.report.render): the
sessions and their grid, what fails on the newest torch grouped by bug, the known bugs grouped by
the reference each case matched, regressions and fixes per version step, the other environments of
a row. Records are read through harness.core.records; a session's line, row and label come from the
identity its environment record carries (harness.core.matrix), never from its name.
"""

from __future__ import annotations

import dataclasses
import pathlib

from harness.core import caseid, outcomes, paths, records, versions
from harness.core.errors import BadInput
from harness.core.outcomes import FAILING, HARD, OUTCOMES, PASSING, REFERENCED, upstream_link

NOT_RUN = "not run"  # a cell without a record: the session stopped early or lacks the case
NO_DEVICE = "no CUDA device"  # how a case that needs a GPU says it skipped (cases/conftest.py)
BACKENDS = ("eager", "aot_eager", "inductor")
CELL_KEYS = ("outcome", "exc_type", "message", "reference", "declared", "metrics", "duration")


class ReportError(BadInput):
    """Bad input to the report; the message names the file (and line)."""


@dataclasses.dataclass
class SessionResult:
    environment: dict
    cases: dict[str, dict]  # case id -> record
    end: dict | None
    path: pathlib.Path

    @property
    def identity(self) -> records.Identity:
        return self.environment["identity"]

    name = property(lambda self: self.identity["session"])
    device = property(lambda self: self.identity["device"])
    line = property(lambda self: self.identity["line"])
    label = property(lambda self: self.identity["label"])
    plain = property(lambda self: self.identity["plain"])
    lightning_of = property(lambda self: self.identity.get("lightning_of"))  # the Lightning axis (schema 2 may lack it)
    torch = property(lambda self: self.environment.get("torch") or "?")
    version = property(lambda self: versions.torch_version(self.environment.get("torch")))
    complete = property(lambda self: self.end is not None)

    def sort_key(self):
        """Columns: CPU first, then each CUDA line; along a line by torch version, a labelled
        environment right after its row's plain session."""
        return (self.device != "cpu", self.line, self.version, self.label or "", self.name)

    def absent(self, case: str) -> bool:
        """The case skipped because its device is not on the session's machine."""
        record = self.cases.get(case)
        if not record or record["outcome"] != "skip":
            return False
        device = str((record.get("params") or {}).get("device") or "")
        return NO_DEVICE in (record.get("message") or "") or (device.startswith("cuda") and self.device == "cpu")


def load_session(path: pathlib.Path) -> SessionResult:
    try:
        found = records.read(path)
    except records.ResultsError as exc:
        raise ReportError(str(exc)) from None
    cases = {r["case"]: r for r in found[1:] if r["kind"] == "case"}
    end = next((r for r in found[1:] if r["kind"] == "end"), None)
    return SessionResult(found[0], cases, end, path)


def load_dirs(directories) -> list[SessionResult]:
    sessions: dict[str, SessionResult] = {}
    for directory in map(pathlib.Path, directories):
        if not directory.is_dir():
            raise ReportError(f"{directory}: not a directory of results")
        for path in paths.results_files(directory):
            result = load_session(path)
            if result.name in sessions:
                raise ReportError(f"{path}: session {result.name} also in {sessions[result.name].path}")
            sessions[result.name] = result
    if not sessions:
        raise ReportError(f"no results files (*{paths.RESULTS_SUFFIX}) in {', '.join(map(str, directories))}")
    return sorted(sessions.values(), key=SessionResult.sort_key)


def opening_line(text: str | None, limit: int = 300) -> str:
    """The first line of a text, cut to `limit` characters."""
    line = (text or "").strip().splitlines()[0] if (text or "").strip() else ""
    return line if len(line) <= limit else line[: limit - 1] + "…"


def bug_signature(record: dict) -> str:
    """The record's exception type and first line with numbers, addresses and paths taken out: two
    cases with one signature fail the same way (harness.core.outcomes.bug_signature)."""
    return outcomes.bug_signature(record.get("exc_type") or record["outcome"], record.get("message"))


def case_order(case_id: str, record: dict):
    """Rows: family, variant, the shared parameters (device, dtype, backend, fullgraph), the id."""
    params = record.get("params") or {}
    backend = params.get("backend")
    return (record.get("family") or "", params.get("variant") or caseid.parse(case_id).variant, str(params.get("device") or ""),
            str(params.get("dtype") or ""), BACKENDS.index(backend) if backend in BACKENDS else len(BACKENDS),
            str(backend or ""), str(params.get("fullgraph")), case_id)


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


def failing_groups(sessions: list[SessionResult], case_ids: list[str]) -> list[dict]:
    """The cases whose outcome on the newest torch of a line is fail, error, crash or timeout,
    grouped by bug signature, largest group first; each with the torch versions it fails the same
    way on, what was declared for it and did not match, and the commands that go further."""
    groups: dict[tuple, dict] = {}
    for line, members in version_lines(sessions).items():
        newest = members[-1]
        for case in case_ids:
            record = newest.cases.get(case)
            if not record or record["outcome"] not in HARD or newest.absent(case):
                continue
            signature = bug_signature(record)
            history = ran(members, case)
            same = [s.torch for s, r in history if r["outcome"] in HARD and bug_signature(r) == signature]
            group = groups.setdefault((line, signature), {
                "line": line, "signature": signature, "session": newest.name, "torch": newest.torch,
                "outcome": record["outcome"], "exc_type": record.get("exc_type"),
                "message": opening_line(record.get("message")), "cases": [], "versions": [],
                "declared": [], **commands(case, newest.name)})
            group["cases"].append({"case": case, "outcome": record["outcome"],
                                   "since": stable_since(history).torch, "versions": same})
            group["versions"] = sorted(set(group["versions"]) | set(same), key=versions.torch_version)
            for declaration in record.get("declared") or []:
                if declaration not in group["declared"]:
                    group["declared"].append(declaration)
    return sorted(groups.values(), key=lambda g: (-len(g["cases"]), g["line"], g["signature"]))


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
                                   "since": stable_since(history).torch, "message": opening_line(record.get("message"))})
    for group in groups.values():
        group["kind"] = next(k for k in REFERENCED if k in group["kinds"])
        group["kinds"] = sorted(group["kinds"], key=lambda k: OUTCOMES[k].severity)
        group["count"] = len({c["case"] for c in group["cases"]})
    kinds = REFERENCED  # still failing as declared first, then the bugs no longer reproducing
    return sorted(groups.values(), key=lambda g: (kinds.index(g["kind"]), -g["count"], g["ref"] == "", g["ref"].lower()))


def transitions(sessions: list[SessionResult], case_ids: list[str]) -> list[dict]:
    """Every step between adjacent torch versions of a line, newest first, with the cases whose
    outcome changed: `regressions` (passing before, failing after), `fixes` (the reverse) and
    `other` changes kept apart."""
    steps = []
    for line, members in version_lines(sessions).items():
        by_step: dict[tuple, dict] = {}
        for case in case_ids:
            history = ran(members, case)
            for (before, old), (after, new) in zip(history, history[1:]):
                if old["outcome"] == new["outcome"]:
                    continue
                step = by_step.setdefault((before.name, after.name), {
                    "line": line, "from_session": before.name, "from_torch": before.torch, "to_session": after.name,
                    "to_torch": after.torch, "version": after.version, "regressions": [], "fixes": [], "other": []})
                kind = ("regressions" if old["outcome"] in PASSING and new["outcome"] in FAILING else
                        "fixes" if old["outcome"] in FAILING and new["outcome"] in PASSING else "other")
                step[kind].append({"case": case, "from": old["outcome"], "to": new["outcome"],
                                   "message": opening_line(new.get("message") or old.get("message"))})
        steps += by_step.values()
    order = list(version_lines(sessions))
    steps.sort(key=lambda s: s.pop("version"), reverse=True)  # newest step first, then by line
    return sorted(steps, key=lambda s: order.index(s["line"]))


def other_environments(sessions: list[SessionResult], case_ids: list[str]) -> list[dict]:
    """Each labelled session against its own row's plain session: the cases whose outcomes differ."""
    by_name = {s.name: s for s in sessions}
    found = []
    for session in (s for s in sessions if s.label and not s.lightning_of):
        plain = by_name.get(session.plain)
        entry = {"session": session.name, "plain": session.plain, "torch": session.torch,
                 "python": session.environment.get("python"), "plain_missing": plain is None,
                 "compared": 0, "differences": []}
        for case in case_ids if plain is not None else ():
            if case in session.cases and case in plain.cases and not (session.absent(case) or plain.absent(case)):
                entry["compared"] += 1
                ours, theirs = session.cases[case], plain.cases[case]
                if ours["outcome"] != theirs["outcome"]:
                    entry["differences"].append({"case": case, "plain_outcome": theirs["outcome"],
                                                 "outcome": ours["outcome"], "message": opening_line(ours.get("message"))})
        found.append(entry)
    return found


def lightning_differences(sessions: list[SessionResult], case_ids: list[str]) -> list[dict]:
    """Per torch row with a Lightning-axis session: the cases whose outcome differs between the row's
    era Lightning and the newest Lightning that supports its torch, grouped by bug (the signature of
    the side that does not pass), largest group first, each with the bisection along Lightning."""
    by_name = {s.name: s for s in sessions}
    found = []
    for newest in (s for s in sessions if s.lightning_of):
        era = by_name.get(newest.lightning_of)
        entry = {"session": newest.name, "era_session": newest.lightning_of, "torch": newest.torch,
                 "lightning": newest.environment.get("lightning"), "era_missing": era is None,
                 "era_lightning": era.environment.get("lightning") if era else None, "compared": 0, "groups": []}
        groups: dict[str, dict] = {}
        for case in case_ids if era is not None else ():
            if case not in newest.cases or case not in era.cases or newest.absent(case) or era.absent(case):
                continue
            entry["compared"] += 1
            old, new = era.cases[case], newest.cases[case]
            if old["outcome"] == new["outcome"]:
                continue
            telling = old if new["outcome"] in PASSING else new  # the side that does not pass names the bug
            signature = bug_signature(telling)
            group = groups.setdefault(signature, {"signature": signature, "cases": [],
                                                  "bisect": f"nox -s bisect -- '{case}' --along lightning "
                                                            f"--torch {versions.torch_version(newest.torch)}"})
            group["cases"].append({"case": case, "era_outcome": old["outcome"], "outcome": new["outcome"],
                                   "message": opening_line(telling.get("message"))})
        for group in groups.values():
            group["changes"] = list(dict.fromkeys(f"{c['era_outcome']} → {c['outcome']}" for c in group["cases"]))
        entry["groups"] = sorted(groups.values(), key=lambda g: (-len(g["cases"]), g["signature"]))
        entry["differences"] = sum(len(g["cases"]) for g in entry["groups"])
        found.append(entry)
    return found


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


def session_row(s: SessionResult, case_ids: list[str]) -> dict:
    # A Lightning-axis session runs only the cases that use Lightning: the others are not missing.
    missing = 0 if s.lightning_of else sum(1 for c in case_ids if c not in s.cases)
    counts: dict[str, int] = {}
    for case in case_ids:
        outcome = NOT_RUN if case not in s.cases else "absent" if s.absent(case) else s.cases[case]["outcome"]
        if not (s.lightning_of and outcome == NOT_RUN):
            counts[outcome] = counts.get(outcome, 0) + 1
    return {"name": s.name, "torch": s.torch, "device": s.device, "line": s.line, "label": s.label,
            "plain": s.plain if s.label else None, "lightning_of": s.lightning_of, "complete": s.complete and not missing, "finished": s.complete,
            "state": _state(s, missing), "lightning": s.environment.get("lightning"),
            "cuda": s.environment.get("cuda"), "python": s.environment.get("python"),
            "started": s.environment.get("started"), "git_commit": s.environment.get("git_commit"),
            "counts": counts, "missing": missing, "absent": counts.get("absent", 0),
            "reused": sum(1 for r in s.cases.values() if r.get("reused_from"))}


def grid(sessions: list[SessionResult]) -> tuple[list[str], list[dict]]:
    """(case ids in row order, one row per case with a cell per session)."""
    first: dict[str, dict] = {}
    for session in sessions:
        for case, record in session.cases.items():
            first.setdefault(case, record)
    case_ids = sorted(first, key=lambda c: case_order(c, first[c]))
    lines = version_lines(sessions)
    rows = []
    for case in case_ids:
        cells = {s.name: cell(s, case) for s in sessions}
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
