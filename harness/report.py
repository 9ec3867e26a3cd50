"""The regression table: merges results files across sessions, opens on what a reader came for
(what changed between torch versions, what fails), compares with a baseline, and decides the
report's exit status (the nightly's colour).

REPORT.md and report.html carry the same sections, in this order: a one-paragraph summary and the
exit status with its reasons; the transitions between adjacent torch versions along each device's
plain sessions, then where a labelled environment of a row (`cpu_torch25_py310_pyg`) differs from
its row's plain session; the failures (latest outcome fail/error/crash/timeout, then the declared
ones by reference); the comparison with the baseline; the sessions; the full matrix. A case that
only ever skipped because its device was absent on the machine is folded out of the matrix.
"""

from __future__ import annotations

import dataclasses
import html
import json
import pathlib
import re

from packaging.version import InvalidVersion, Version

from harness import records
from harness.outcomes import FAILING, OUTCOMES, PASSING

NOT_RUN = "not run"  # a cell without a record: the session stopped early or lacks the case
SYMBOLS = {**{name: o.symbol for name, o in OUTCOMES.items()}, NOT_RUN: "·"}
CELL_TEXT = {**{name: o.cell for name, o in OUTCOMES.items()}, NOT_RUN: "-"}
MEANING = {**{name: o.meaning for name, o in OUTCOMES.items()},
           NOT_RUN: "no record: the session stopped early or lacks the case"}
# Outcomes that fail a session (the outcome table's `fails_session`): what "failing now" lists and
# what a new case may not come to against a baseline.
HARD = tuple(name for name, o in OUTCOMES.items() if o.fails_session)
DECLARED = ("known", "limitation")  # failures a case declares, each with its reference
COMPARISONS = ("regressed", "newly failing", "fixed", "new", "removed", "still failing", "flaky")
COMPARISON_MEANING = {
    "regressed": "passed in the baseline, fails now",
    "newly failing": "skipped or flaky in the baseline, fails now",
    "fixed": "failed in the baseline, passes now",
    "new": "not in the baseline's session",
    "removed": "in the baseline, not now (the session finished without it)",
    "still failing": "failed then, fails now in another way",
    "flaky": "its attempts disagree now",
}
ABSENT_SYMBOL, ABSENT_TEXT = "–", "no device"
REUSED_MARK = "↺"
NO_DEVICE = "no CUDA device"  # how a case that needs a GPU says it skipped (cases/conftest.py)
BACKENDS = ("eager", "aot_eager", "inductor")
# cpu_torch25, cuda12_torch213, cpu_torch_nightly, cpu_torch25_py310_pyg (harness/matrix.py)
SESSION_NAME = re.compile(r"(?P<line>cpu|cuda\d+)_torch(?P<row>\d+|_nightly)(?:_(?P<label>[a-z0-9]+(?:_[a-z0-9]+)*))?")
CELL_KEYS = ("outcome", "exc_type", "message", "reference", "declared", "metrics", "duration")
OPTIONAL_CELL_KEYS = ("attempts", "leaked", "output_tail", "reused_from")


class ReportError(Exception):
    """Bad input to the report; the message names the file (and line)."""


def _version(text: str | None) -> Version:
    try:
        return Version((text or "").split("+")[0])
    except InvalidVersion:
        return Version("0")


@dataclasses.dataclass
class SessionResult:
    name: str
    environment: dict
    cases: dict[str, dict]  # case id -> record
    end: dict | None
    path: pathlib.Path

    @property
    def torch(self) -> str:
        return self.environment.get("torch") or "?"

    @property
    def version(self) -> Version:
        return _version(self.environment.get("torch"))

    @property
    def _name(self):
        return SESSION_NAME.fullmatch(self.name)

    @property
    def device(self) -> str:
        if self.name.startswith("cuda"):
            return "cuda"
        if self.name.startswith("cpu"):
            return "cpu"
        return "cuda" if self.environment.get("gpu") else "cpu"

    @property
    def line(self) -> str:
        """The version line the session is a step of: `cpu`, or `cudaNN` (one per CUDA major)."""
        return self._name["line"] if self._name else self.device

    @property
    def label(self) -> str | None:
        """Set for a second environment of a torch row (another Python, extra packages)."""
        return self._name["label"] if self._name else None

    @property
    def plain(self) -> str:
        """The row's plain session: itself unless labelled."""
        return f"{self._name['line']}_torch{self._name['row']}" if self._name else self.name

    @property
    def complete(self) -> bool:
        return self.end is not None

    def sort_key(self):
        """Columns: CPU first, then each CUDA line; along a line by torch version, a labelled
        environment right after its row's plain session."""
        return (self.device != "cpu", self.line, self.version, self.label or "", self.name)

    def absent(self, case: str) -> bool:
        return absent_device(self, self.cases.get(case))


def absent_device(session: SessionResult, record: dict | None) -> bool:
    """The case skipped because its device is not on the session's machine (a CUDA case on a CPU
    session, or any session without a GPU)."""
    if not record or record["outcome"] != "skip":
        return False
    device = str((record.get("params") or {}).get("device") or "")
    return NO_DEVICE in (record.get("message") or "") or (device.startswith("cuda") and session.device == "cpu")


def load_session(path: pathlib.Path) -> SessionResult:
    try:
        found = records.read(path)
    except records.ResultsError as exc:
        raise ReportError(str(exc)) from None
    environment = found[0]
    cases, end = {}, None
    for record in found[1:]:
        if record["kind"] == "case":
            cases[record["case"]] = record
        elif record["kind"] == "end":
            end = record
    return SessionResult(environment.get("session") or path.stem, environment, cases, end, path)


def load_dirs(directories) -> list[SessionResult]:
    sessions: dict[str, SessionResult] = {}
    for directory in directories:
        directory = pathlib.Path(directory)
        if not directory.is_dir():
            raise ReportError(f"{directory}: not a directory of results")
        for path in sorted(directory.glob("*.jsonl")):
            result = load_session(path)
            if result.name in sessions:
                raise ReportError(f"{path}: session {result.name} also in {sessions[result.name].path}")
            sessions[result.name] = result
    if not sessions:
        raise ReportError(f"no results files (*.jsonl) in {', '.join(map(str, directories))}")
    return sorted(sessions.values(), key=SessionResult.sort_key)


def upstream_link(ref: str) -> str:
    """'owner/repo#123' -> its GitHub issue or pull request (GitHub redirects either way);
    'owner/repo:path' -> the file on the default branch; a URL (a documentation page) as it is."""
    match = re.fullmatch(r"([\w.-]+/[\w.-]+)#(\d+)", ref)
    if match:
        return f"https://github.com/{match[1]}/issues/{match[2]}"
    match = re.fullmatch(r"([\w.-]+/[\w.-]+):([\w./-]+)", ref)
    if match:
        return f"https://github.com/{match[1]}/blob/HEAD/{match[2]}"
    return ref if re.match(r"https?://", ref) else ""


def outcome_of(session: SessionResult, case: str) -> str:
    record = session.cases.get(case)
    return record["outcome"] if record else NOT_RUN


def case_order(case_id: str, params: dict):
    """One order for the rows: family, variant, then the shared parameters in the order of the
    case id (device, dtype, backend, fullgraph), then the id itself."""
    family, _, rest = case_id.partition("/")
    backend = params.get("backend")
    return (family, params.get("variant") or rest.split("[")[0], str(params.get("device") or ""),
            str(params.get("dtype") or ""), BACKENDS.index(backend) if backend in BACKENDS else len(BACKENDS),
            str(backend or ""), str(params.get("fullgraph")), case_id)


def version_lines(sessions: list[SessionResult]) -> dict[str, list[SessionResult]]:
    """Each device line's plain sessions in torch order: the steps transitions are read along.
    A labelled session (another environment of a row) is no step."""
    lines: dict[str, list[SessionResult]] = {}
    for session in sessions:  # already in column order
        if session.label is None:
            lines.setdefault(session.line, []).append(session)
    return lines


def _ran(line: list[SessionResult], case: str) -> list[tuple[SessionResult, dict]]:
    """(session, record) along a line where the case has a record that ran on its device."""
    return [(s, s.cases[case]) for s in line if case in s.cases and not s.absent(case)]


def _first_line(text: str | None, limit: int = 300) -> str:
    line = (text or "").strip().splitlines()[0] if (text or "").strip() else ""
    return line if len(line) <= limit else line[: limit - 1] + "…"


def transitions(sessions: list[SessionResult], case_ids: list[str]) -> list[dict]:
    """Where a case's outcome changes from one torch version to the next, along each device line's
    plain sessions (a session that lacks the case is stepped over)."""
    changes = []
    for line, members in version_lines(sessions).items():
        position = {s.name: i for i, s in enumerate(members)}
        for order, case in enumerate(case_ids):
            ran = _ran(members, case)
            for (before, old), (after, new) in zip(ran, ran[1:]):
                if old["outcome"] != new["outcome"]:
                    changes.append((position[after.name], order, {
                        "case": case, "line": line, "device": after.device,
                        "from_session": before.name, "from_torch": before.torch, "from": old["outcome"],
                        "to_session": after.name, "to_torch": after.torch, "to": new["outcome"],
                        "message": new.get("message") or old.get("message") or "",
                    }))
    lines = list(version_lines(sessions))
    return [c for *_, c in sorted(changes, key=lambda c: (lines.index(c[2]["line"]), c[0], c[1]))]


def other_environments(sessions: list[SessionResult], case_ids: list[str]) -> list[dict]:
    """Each labelled session against its own row's plain session: the cases whose outcomes differ."""
    by_name = {s.name: s for s in sessions}
    found = []
    for session in (s for s in sessions if s.label):
        plain = by_name.get(session.plain)
        entry = {"session": session.name, "label": session.label, "plain": session.plain, "torch": session.torch,
                 "python": session.environment.get("python"), "plain_python": None, "plain_missing": plain is None,
                 "compared": 0, "differences": []}
        if plain is not None:
            entry["plain_python"] = plain.environment.get("python")
            for case in case_ids:
                if case in session.cases and case in plain.cases and not (session.absent(case) or plain.absent(case)):
                    entry["compared"] += 1
                    ours, theirs = session.cases[case], plain.cases[case]
                    if ours["outcome"] != theirs["outcome"]:
                        entry["differences"].append({
                            "case": case, "plain_outcome": theirs["outcome"], "outcome": ours["outcome"],
                            "message": ours.get("message") or theirs.get("message") or ""})
        found.append(entry)
    return found


def failures(sessions: list[SessionResult], case_ids: list[str]) -> dict:
    """Each case's latest outcome along each device line: those that fail (fail, error, crash,
    timeout) with the torch they fail since, and the declared failures (known, limitation, and
    fixed ones that no longer reproduce) grouped by their reference."""
    failing, by_ref = [], {}
    for line, members in version_lines(sessions).items():
        for case in case_ids:
            ran = _ran(members, case)
            if not ran:
                continue
            session, record = ran[-1]
            outcome = record["outcome"]
            since = session
            for earlier, old in reversed(ran[:-1]):
                if old["outcome"] != outcome:
                    break
                since = earlier
            entry = {"case": case, "line": line, "session": session.name, "torch": session.torch,
                     "outcome": outcome, "exc_type": record.get("exc_type"),
                     "message": record.get("message") or "", "since_torch": since.torch, "since_session": since.name,
                     "reference": record.get("reference")}
            if outcome in HARD:
                failing.append(entry)
            elif outcome in (*DECLARED, "fixed"):
                ref = entry["reference"] or ""  # the one declaration the case met
                group = by_ref.setdefault(ref, {"ref": ref, "link": upstream_link(ref), "cases": []})
                group["cases"].append(entry)
    groups = [g for g in by_ref.values() if any(c["outcome"] in DECLARED for c in g["cases"])]
    for group in groups:
        kinds = [c["outcome"] for c in group["cases"] if c["outcome"] in DECLARED]
        group["kind"] = "known" if "known" in kinds else "limitation"
    groups.sort(key=lambda g: (DECLARED.index(g["kind"]), g["ref"] == "", g["ref"].lower()))
    order = {c: i for i, c in enumerate(case_ids)}
    failing.sort(key=lambda f: (order[f["case"]], f["line"]))
    return {"failing": failing, "declared": groups}


def compare(current: list[SessionResult], baseline: list[SessionResult]) -> list[dict]:
    """Each case of each session present now, against the same session in the baseline. A record
    that skipped for an absent device counts as not run."""
    base = {s.name: s for s in baseline}
    rows = []
    for session in current:
        old = base.get(session.name)
        if old is None:
            continue
        for case in sorted(set(session.cases) | set(old.cases)):
            now = NOT_RUN if session.absent(case) else outcome_of(session, case)
            then = NOT_RUN if old.absent(case) else outcome_of(old, case)
            if now == NOT_RUN and then != NOT_RUN:
                status = "removed" if session.complete and case not in session.cases else None
            elif now == NOT_RUN:
                status = None
            elif then == NOT_RUN:
                status = "new"
            elif now == "flaky":
                status = "flaky"
            elif then in PASSING and now in FAILING:
                status = "regressed"
            elif then not in PASSING and then not in FAILING and now in FAILING:
                status = "newly failing"
            elif then in FAILING and now in PASSING:
                status = "fixed"
            elif then in FAILING and now in FAILING and not (then == now and then in DECLARED):
                status = "still failing"  # a declared failure staying declared is no news
            else:
                status = None
            if status:
                rows.append({"session": session.name, "case": case, "status": status, "baseline": then,
                             "now": now, "message": (session.cases.get(case) or {}).get("message") or ""})
    order = {status: i for i, status in enumerate(COMPARISONS)}
    return sorted(rows, key=lambda r: (order[r["status"]], r["session"], r["case"]))


def _state(session: SessionResult, missing: int) -> str:
    if not session.complete:
        return "incomplete: stopped early (no end record)"
    if missing:
        return f"incomplete: lacks {missing} case{'s' if missing != 1 else ''} the other sessions have"
    return "complete"


def build(directories, baseline_dirs=None, expect=(), fail_on_regression: bool = True) -> dict:
    sessions = load_dirs(directories)
    baseline = load_dirs(baseline_dirs) if baseline_dirs else None
    params = {}
    for session in sessions:
        for case, record in session.cases.items():
            params.setdefault(case, record.get("params") or {})
    case_ids = sorted(params, key=lambda c: case_order(c, params[c]))
    families = sorted({c.split("/", 1)[0] for c in case_ids})
    folded = [c for c in case_ids
              if all(s.absent(c) for s in sessions if c in s.cases)]  # every record says: no device here
    folded_set = set(folded)
    all_skip = {c for c in case_ids if c not in folded_set
                and all(s.cases[c]["outcome"] == "skip" for s in sessions if c in s.cases)}
    session_rows = []
    for s in sessions:
        missing = sum(1 for c in case_ids if c not in s.cases)
        session_rows.append({
            "name": s.name, "torch": s.torch, "device": s.device, "line": s.line, "label": s.label,
            "plain": s.plain if s.label else None,
            # complete: it finished and has every case the other sessions have
            "complete": s.complete and not missing, "finished": s.complete, "state": _state(s, missing),
            "lightning": s.environment.get("lightning"), "cuda": s.environment.get("cuda"),
            "python": s.environment.get("python"), "started": s.environment.get("started"),
            "git_commit": s.environment.get("git_commit"), "gpu": s.environment.get("gpu"),
            "counts": _counts(s, case_ids), "missing": missing,
            "absent": sum(1 for c in s.cases if s.absent(c)),
            "reused": sum(1 for r in s.cases.values() if r.get("reused_from")),
        })
    data = {
        "schema": records.SCHEMA_VERSION,
        "sessions": session_rows,
        "families": families,
        "cases": [
            {
                "case": c, "family": c.split("/", 1)[0], "params": params[c],
                "folded": c in folded_set, "all_skip": c in all_skip,
                "cells": {s.name: _cell(s, c) for s in sessions},
            }
            for c in case_ids
        ],
        "folded": folded,
        "transitions": transitions(sessions, case_ids),
        "other_environments": other_environments(sessions, case_ids),
        "failures": failures(sessions, case_ids),
        "reused": sum(s["reused"] for s in session_rows),
        "baseline": None,
    }
    if baseline is not None:
        rows = compare(sessions, baseline)
        now_names = {s.name for s in sessions}
        data["baseline"] = {
            "sessions": [s.name for s in baseline],
            "rows": rows,
            "counts": {status: sum(1 for r in rows if r["status"] == status) for status in COMPARISONS},
            "not_in_baseline": [s.name for s in sessions if s.name not in {b.name for b in baseline}],
            "missing_now": [b.name for b in baseline if b.name not in now_names],
        }
    data["expected"] = list(expect)
    data["verdict"] = verdict(data, expect, fail_on_regression)
    data["summary"] = summary_text(data)
    return data


def verdict(data: dict, expect=(), fail_on_regression: bool = True) -> dict:
    """The exit status and its reasons, one line each: 1 when an expected session has no results
    file or is incomplete, or (unless `fail_on_regression` is off) when, against the baseline, a case
    regressed or a new case fails as fail/error/crash/timeout."""
    reasons, notes = [], []
    by_name = {s["name"]: s for s in data["sessions"]}
    for name in expect:
        session = by_name.get(name)
        if session is None:
            reasons.append(f"expected session {name} has no results file")
        elif not session["complete"]:
            reasons.append(f"expected session {name} is {session['state']}")
    for session in data["sessions"]:
        if not session["complete"] and session["name"] not in expect:
            notes.append(f"session {session['name']} is {session['state']}")
    for row in (data["baseline"] or {}).get("rows", []):
        if row["status"] == "regressed" or (row["status"] in ("new", "newly failing") and row["now"] in HARD):
            what = {"regressed": "regressed", "new": "new case fails",
                    "newly failing": "fails, skipped or flaky in the baseline"}[row["status"]]
            message = _first_line(row["message"], 200)
            change = row["now"] if row["status"] == "new" else f"{row['baseline']} -> {row['now']}"
            text = f"{row['session']}: {row['case']}: {what}: {change}" + (
                f" ({message})" if message else "")
            (reasons if fail_on_regression else notes).append(text)
    if not fail_on_regression and data["baseline"] is not None:
        notes.append("--no-fail-on-regression: changes against the baseline do not set the exit status")
    return {"status": 1 if reasons else 0, "reasons": reasons, "notes": notes,
            "fail_on_regression": fail_on_regression}


def _counts(session: SessionResult, case_ids) -> dict:
    counts: dict[str, int] = {}
    for case in case_ids:
        outcome = outcome_of(session, case)
        counts[outcome] = counts.get(outcome, 0) + 1
    return counts


def _cell(session: SessionResult, case: str) -> dict:
    record = session.cases.get(case)
    if record is None:
        return {"outcome": NOT_RUN}
    cell = {key: record.get(key) for key in CELL_KEYS}
    cell.update({key: record[key] for key in OPTIONAL_CELL_KEYS if record.get(key)})
    if session.absent(case):
        cell["absent"] = True
    return cell


def _plural(n: int, word: str, plural: str | None = None) -> str:
    return f"{n:,} {word if n == 1 else plural or word + 's'}"


def summary_text(data: dict) -> str:
    """The report's opening paragraph, plain text (both outputs show it as it is)."""
    sessions = data["sessions"]
    devices = {}
    for s in sessions:
        devices[s["device"].upper()] = devices.get(s["device"].upper(), 0) + 1
    versions = sorted({s["torch"] for s in sessions}, key=_version)
    shown = [str(_version(v)) if _version(v) != Version("0") else v for v in versions]
    span = f"torch {shown[0]}" if len(shown) == 1 else f"torch {shown[0]} to {shown[-1]}"
    labelled = [s["name"] for s in sessions if s["label"]]
    grid = len(data["cases"]) - len(data["folded"])
    totals: dict[str, int] = {}
    absent = 0
    for case in data["cases"]:
        for cell in case["cells"].values():
            if cell.get("absent"):
                absent += 1
            else:
                totals[cell["outcome"]] = totals.get(cell["outcome"], 0) + 1
    counted = ", ".join(f"{totals[o]:,} {o}" for o in SYMBOLS if totals.get(o))
    parts = [
        f"{_plural(len(sessions), 'session')} ({', '.join(f'{n} {d}' for d, n in devices.items())}) on {span}"
        + (f", {len(labelled)} of them another environment of a row ({', '.join(labelled)})" if labelled else "")
        + f": {_plural(len(data['cases']), 'case')}, {counted}."
    ]
    if absent:
        parts.append(f"{_plural(absent, 'result')} skipped because the session's machine lacks the case's device"
                     + (f"; {_plural(len(data['folded']), 'case')} that never ran on any machine here "
                        f"{'is' if len(data['folded']) == 1 else 'are'} folded out of the matrix ({grid:,} rows remain)"
                        if data["folded"] else "") + ".")
    if data["reused"]:
        from_sessions = [s["name"] for s in sessions if s["reused"]]
        parts.append(f"{_plural(data['reused'], 'record')} {'was' if data['reused'] == 1 else 'were'} reused from "
                     f"earlier runs instead of measured in this one ({', '.join(from_sessions)}).")
    else:
        parts.append("Every record was measured in this run (none reused).")
    incomplete = [s["name"] for s in sessions if not s["complete"]]
    if incomplete:
        parts.append(f"Incomplete: {', '.join(incomplete)}.")
    failing = len({f["case"] for f in data["failures"]["failing"]})
    differences = sum(len(e["differences"]) for e in data["other_environments"])
    declared = _plural(len(data["failures"]["declared"]), "known bug or limitation", "known bugs or limitations")
    parts.append(f"{_plural(len(data['transitions']), 'transition')} between torch versions, "
                 f"{_plural(differences, 'difference')} in other environments of a row, "
                 f"{_plural(failing, 'case')} failing on the latest torch, {declared} referenced.")
    baseline = data["baseline"]
    if baseline is not None:
        changes = ", ".join(f"{n} {status}" for status, n in baseline["counts"].items() if n) or "no change"
        parts.append(f"Against the baseline ({_plural(len(baseline['sessions']), 'session')}): {changes}.")
    return " ".join(parts)


# --- rendering: Markdown ---

def _md_escape(text: str) -> str:
    return (text or "").replace("|", "\\|").replace("\n", " ").replace("<", "&lt;")


def _md_ref(ref: str) -> str:
    link = upstream_link(ref)
    return f"[{ref}]({link})" if link else (ref or "(no reference recorded)")


def _refs_md(refs) -> str:
    return ", ".join(_md_ref(r) for r in refs or [])


def _md_outcome(outcome: str) -> str:
    return f"{SYMBOLS[outcome]} {outcome}"


def _md_cell(cell: dict) -> str:
    if cell.get("absent"):
        return ABSENT_SYMBOL
    return SYMBOLS[cell["outcome"]] + (REUSED_MARK if cell.get("reused_from") else "")


def _steps(changes: list[dict]) -> list[tuple[tuple, list[dict]]]:
    """Transitions grouped by line and step (from session -> to session), in order."""
    groups: dict[tuple, list[dict]] = {}
    for change in changes:
        groups.setdefault((change["line"], change["from_session"], change["from_torch"], change["to_session"],
                           change["to_torch"]), []).append(change)
    return list(groups.items())


def _step_counts(changes: list[dict]) -> list[tuple[str, str, int]]:
    pairs: dict[tuple[str, str], int] = {}
    for change in changes:
        pairs[(change["from"], change["to"])] = pairs.get((change["from"], change["to"]), 0) + 1
    return [(a, b, n) for (a, b), n in pairs.items()]


def verdict_markdown(data: dict) -> list[str]:
    result = data["verdict"]
    if result["reasons"]:
        out = [f"**Exit status 1**: the report fails for {_plural(len(result['reasons']), 'reason')}:", ""]
        out += [f"- {_md_escape(reason)}" for reason in result["reasons"]]
    else:
        checked = []
        if data["expected"]:
            checked.append(f"all {len(data['expected'])} expected sessions are complete")
        if data["baseline"] is not None and result["fail_on_regression"]:
            checked.append("nothing regressed against the baseline and no new case fails")
        out = ["**Exit status 0**" + (f": {' and '.join(checked)}." if checked else
                                      " (no --expect, no baseline: nothing to hold the runs to).")]
    out += [f"- note: {_md_escape(note)}" for note in result["notes"]]
    return out + [""]


def render_markdown(data: dict) -> str:
    sessions = data["sessions"]
    out = ["# torch.compile compatibility report", "", data["summary"], ""]
    out += verdict_markdown(data)

    out += ["## Transitions between torch versions", ""]
    out.append("Along each device's plain sessions (a labelled environment of a row is no step; see below), "
               "where a case's outcome changes from one torch version to the next.")
    out.append("")
    if not data["transitions"]:
        out += ["No case changes outcome across torch versions.", ""]
    else:
        current = None
        for (line, _, from_torch, _, to_torch), changes in _steps(data["transitions"]):
            if line != current:
                out += [f"### {line}", ""]
                current = line
            counts = ", ".join(f"{SYMBOLS[a]} {a} → {SYMBOLS[b]} {b} ×{n}" for a, b, n in _step_counts(changes))
            out += [f"**torch {from_torch} → {to_torch}**: {counts}", "",
                    "| case | before | after | message |", "|---|---|---|---|"]
            for t in changes:
                out.append(f"| `{t['case']}` | {_md_outcome(t['from'])} | {_md_outcome(t['to'])} | "
                           f"{_md_escape(_first_line(t['message']))} |")
            out.append("")

    out += ["### Other environments of a row", ""]
    if not data["other_environments"]:
        out += ["No labelled session in these results.", ""]
    for env in data["other_environments"]:
        head = f"- **{env['session']}** (torch {env['torch']}, Python {env['python']}) against **{env['plain']}**"
        if env["plain_missing"]:
            out.append(f"{head}: {env['plain']} has no results here, nothing to compare.")
        elif not env["differences"]:
            out.append(f"{head}: the same outcome in all {env['compared']} cases both ran.")
        else:
            out.append(f"{head}: {_plural(len(env['differences']), 'case')} of {env['compared']} differ:")
            for d in env["differences"]:
                out.append(f"  - `{d['case']}`: {_md_outcome(d['plain_outcome'])} there, {_md_outcome(d['outcome'])} "
                           f"here: {_md_escape(_first_line(d['message']))}")
    out.append("")

    out += ["## Failures", "", "### Failing on the latest torch", ""]
    failing = data["failures"]["failing"]
    if not failing:
        out += ["No case's latest outcome is " + "/".join(HARD) + ".", ""]
    else:
        out += ["| case | where | outcome | since | message |", "|---|---|---|---|---|"]
        for f in failing:
            out.append(f"| `{f['case']}` | {f['line']}: {f['session']} | {_md_outcome(f['outcome'])} | "
                       f"torch {f['since_torch']} | {_md_escape(_first_line(f['message']))} |")
        out.append("")
    out += ["### Known bugs and documented limitations", ""]
    if not data["failures"]["declared"]:
        out += ["No case's latest outcome is a known bug or a documented limitation.", ""]
    for group in data["failures"]["declared"]:
        declared = [c for c in group["cases"] if c["outcome"] in DECLARED]
        fixed = [c for c in group["cases"] if c["outcome"] == "fixed"]
        where = _case_list_md(declared)
        count = _plural(len({c["case"] for c in declared}), "case")
        text = f"- {SYMBOLS[group['kind']]} {_md_ref(group['ref'])}: {count} — {where}"
        if fixed:
            text += f"; no longer reproduces ({SYMBOLS['fixed']}) in {_case_list_md(fixed)}"
        out.append(text)
    out.append("")

    baseline = data["baseline"]
    if baseline is not None:
        out += ["## Against the baseline", ""]
        out.append(", ".join(f"{n} {status}" for status, n in baseline["counts"].items()))
        out.append("")
        if baseline["missing_now"]:
            out += [f"In the baseline, no results now: {', '.join(baseline['missing_now'])}.", ""]
        if baseline["not_in_baseline"]:
            out += [f"Not in the baseline (nothing to compare): {', '.join(baseline['not_in_baseline'])}.", ""]
        if baseline["rows"]:
            out += ["| session | case | status | baseline | now | message |", "|---|---|---|---|---|---|"]
            for row in baseline["rows"]:
                out.append(f"| {row['session']} | `{row['case']}` | **{row['status']}** | {row['baseline']} | "
                           f"{row['now']} | {_md_escape(_first_line(row['message']))} |")
            out.append("")

    out += ["## Sessions", "", "| session | torch | Python | Lightning | CUDA | state | " +
            " | ".join(SYMBOLS[o] + " " + o for o in SYMBOLS) +
            f" | {ABSENT_SYMBOL} {ABSENT_TEXT} | {REUSED_MARK} reused |",
            "|---" * (8 + len(SYMBOLS)) + "|"]
    expected_missing = [n for n in data["expected"] if n not in {s["name"] for s in sessions}]
    for s in sessions:
        state = s["state"] if s["complete"] else f"**{s['state']}**"
        counts = {**s["counts"], "skip": s["counts"].get("skip", 0) - s["absent"]}
        out.append(f"| {s['name']} | {s['torch']} | {s['python'] or '-'} | {s['lightning']} | {s['cuda'] or '-'} | "
                   f"{state} | " + " | ".join(str(counts.get(o, 0)) for o in SYMBOLS) +
                   f" | {s['absent']} | {s['reused']} |")
    for name in expected_missing:
        out.append(f"| {name} | - | - | - | - | **no results file** |" + " |" * (len(SYMBOLS) + 2))
    out += ["", "Legend: " + "; ".join(f"{SYMBOLS[o]} {o}: {MEANING[o]}" for o in SYMBOLS) +
            f"; {ABSENT_SYMBOL} {ABSENT_TEXT}: skipped, the session's machine lacks the case's device; "
            f"{REUSED_MARK} after a symbol: reused from an earlier run, not measured in this one.", ""]

    out += ["## Matrix", ""]
    header = "| case | " + " | ".join(s["name"] for s in sessions) + " | upstream |"
    for family in data["families"]:
        rows = [c for c in data["cases"] if c["family"] == family and not c["folded"]]
        if not rows:
            continue
        out += [f"### {family}", "", header, "|---" * (len(sessions) + 2) + "|"]
        for case in rows:
            refs = sorted({cell["reference"] for cell in case["cells"].values() if cell.get("reference")})
            out.append(f"| `{case['case'].split('/', 1)[1]}` | " +
                       " | ".join(_md_cell(case["cells"][s["name"]]) for s in sessions) + f" | {_refs_md(refs)} |")
        out.append("")

    folded = data["folded"]
    out += ["<details>", f"<summary>{_plural(len(folded), 'case')} did not run on any session's device "
            "(folded)</summary>", ""]
    if folded:
        out += ["Every record of these says the device was absent on the session's machine "
                "(e.g. a CUDA case on a CPU session):", ""]
        out += [f"- `{case}`" for case in folded]
    else:
        out.append("None: every case ran on some session's device.")
    out += ["", "</details>", ""]
    return "\n".join(out)


def _case_list_md(entries: list[dict]) -> str:
    by_case: dict[str, list[str]] = {}
    for entry in entries:
        by_case.setdefault(entry["case"], []).append(entry["line"])
    return ", ".join(f"`{case}` ({', '.join(lines)})" for case, lines in by_case.items())


# --- rendering: the page ---

def _e(text) -> str:
    return html.escape(str(text if text is not None else ""), quote=True)


def _h_outcome(outcome: str) -> str:
    return (f'<span class="chip o-{outcome.replace(" ", "-")}" title="{_e(MEANING[outcome])}">'
            f"{_e(CELL_TEXT[outcome])}</span>")


def _h_case(case: str, session: str) -> str:
    """A case id that opens its cell's details on the page."""
    return f'<a href="#" class="case" data-case="{_e(case)}" data-session="{_e(session)}"><code>{_e(case)}</code></a>'


def _h_ref(ref: str) -> str:
    link = upstream_link(ref)
    if not ref:
        return "(no reference recorded)"
    return f'<a href="{_e(link)}">{_e(ref)}</a>' if link else _e(ref)


def _h_table(head: list[str], rows: list[list[str]], cls: str = "") -> str:
    return (f'<div class="scroll"><table class="list {cls}"><thead><tr>' + "".join(f"<th>{h}</th>" for h in head)
            + "</tr></thead><tbody>" + "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
            + "</tbody></table></div>")


def _h_sections(data: dict) -> str:
    parts = []
    result = data["verdict"]
    verdict_md = verdict_markdown(data)
    status_line = verdict_md[0].replace("**", "")
    colour = "red" if result["reasons"] else "green"
    parts.append(f'<section id="verdict" class="{colour}"><strong>{_e(status_line)}</strong>')
    if result["reasons"] or result["notes"]:
        parts.append("<ul>" + "".join(f"<li>{_e(r)}</li>" for r in result["reasons"])
                     + "".join(f'<li class="note">note: {_e(n)}</li>' for n in result["notes"]) + "</ul>")
    parts.append("</section>")

    # transitions
    changes = data["transitions"]
    parts.append('<section id="transitions"><h2>Transitions between torch versions</h2>'
                 '<p class="hint">Along each device\'s plain sessions; a labelled environment of a row is no step '
                 '(see <a href="#other-environments">other environments of a row</a>). '
                 "Click a case for its record.</p>")
    if not changes:
        parts.append("<p>No case changes outcome across torch versions.</p>")
    open_all = len(changes) <= 40
    current = None
    for (line, from_session, from_torch, to_session, to_torch), step in _steps(changes):
        if line != current:
            if current is not None:
                parts.append("</div>")
            parts.append(f'<div class="line"><h3>{_e(line)}</h3>')
            current = line
        counts = " ".join(f'<span class="pair">{_h_outcome(a)} → {_h_outcome(b)} ×{n}</span>'
                          for a, b, n in _step_counts(step))
        rows = [[_h_case(t["case"], t["to_session"]), _h_outcome(t["from"]), _h_outcome(t["to"]),
                 f'<span class="msg">{_e(_first_line(t["message"]))}</span>'] for t in step]
        parts.append(f'<details class="step"{" open" if open_all else ""}><summary><strong>torch {_e(from_torch)} → '
                     f'{_e(to_torch)}</strong> <span class="sessions">({_e(from_session)} → {_e(to_session)})</span> '
                     f'{counts}</summary>' + _h_table(["case", "before", "after", "message"], rows) + "</details>")
    if current is not None:
        parts.append("</div>")
    parts.append("</section>")

    # other environments
    parts.append('<section id="other-environments"><h3>Other environments of a row</h3>')
    if not data["other_environments"]:
        parts.append("<p>No labelled session in these results.</p>")
    else:
        parts.append("<ul>")
        for env in data["other_environments"]:
            head = (f"<strong>{_e(env['session'])}</strong> (torch {_e(env['torch'])}, Python {_e(env['python'])}) "
                    f"against <strong>{_e(env['plain'])}</strong>")
            if env["plain_missing"]:
                parts.append(f"<li>{head}: {_e(env['plain'])} has no results here, nothing to compare.</li>")
            elif not env["differences"]:
                parts.append(f"<li>{head}: the same outcome in all {env['compared']} cases both ran.</li>")
            else:
                items = "".join(f"<li>{_h_case(d['case'], env['session'])}: {_h_outcome(d['plain_outcome'])} there, "
                                f"{_h_outcome(d['outcome'])} here <span class=\"msg\">{_e(_first_line(d['message']))}"
                                f"</span></li>" for d in env["differences"])
                parts.append(f"<li>{head}: {_plural(len(env['differences']), 'case')} of {env['compared']} differ"
                             f"<ul>{items}</ul></li>")
        parts.append("</ul>")
    parts.append("</section>")

    # failures
    failing = data["failures"]["failing"]
    parts.append('<section id="failures"><h2>Failures</h2><h3>Failing on the latest torch</h3>')
    if not failing:
        parts.append(f"<p>No case's latest outcome is {'/'.join(HARD)}.</p>")
    else:
        rows = [[_h_case(f["case"], f["session"]), f"{_e(f['line'])}: {_e(f['session'])}", _h_outcome(f["outcome"]),
                 f"torch {_e(f['since_torch'])}", f'<span class="msg">{_e(_first_line(f["message"]))}</span>']
                for f in failing]
        parts.append(_h_table(["case", "where", "outcome", "since", "message"], rows))
    parts.append("<h3>Known bugs and documented limitations</h3>")
    if not data["failures"]["declared"]:
        parts.append("<p>No case's latest outcome is a known bug or a documented limitation.</p>")
    else:
        parts.append('<ul class="refs">')
        for group in data["failures"]["declared"]:
            declared = [c for c in group["cases"] if c["outcome"] in DECLARED]
            fixed = [c for c in group["cases"] if c["outcome"] == "fixed"]
            cases = "".join(f"<li>{_h_case(c['case'], c['session'])} {_e(c['line'])} {_h_outcome(c['outcome'])}</li>"
                            for c in declared + fixed)
            parts.append(f"<li>{_h_outcome(group['kind'])} {_h_ref(group['ref'])}: "
                         f"{_plural(len({c['case'] for c in declared}), 'case')}"
                         + (f", no longer reproduces in {len(fixed)}" if fixed else "")
                         + f'<details{" open" if len(declared + fixed) <= 4 else ""}><summary>cases</summary>'
                         f"<ul>{cases}</ul></details></li>")
        parts.append("</ul>")
    parts.append("</section>")

    baseline = data["baseline"]
    if baseline is not None:
        parts.append('<section id="baseline"><h2>Against the baseline</h2><p>'
                     + ", ".join(f'<span title="{_e(COMPARISON_MEANING[s])}">{n} {_e(s)}</span>'
                                 for s, n in baseline["counts"].items()) + "</p>")
        if baseline["missing_now"]:
            parts.append(f"<p>In the baseline, no results now: {_e(', '.join(baseline['missing_now']))}.</p>")
        if baseline["not_in_baseline"]:
            names = ", ".join(baseline["not_in_baseline"])
            parts.append(f"<p>Not in the baseline (nothing to compare): {_e(names)}.</p>")
        if baseline["rows"]:
            rows = [[_e(r["session"]), _h_case(r["case"], r["session"]),
                     f'<strong class="st-{r["status"].replace(" ", "-")}">{_e(r["status"])}</strong>',
                     _h_outcome(r["baseline"]), _h_outcome(r["now"]),
                     f'<span class="msg">{_e(_first_line(r["message"]))}</span>'] for r in baseline["rows"]]
            parts.append(_h_table(["session", "case", "status", "baseline", "now", "message"], rows))
        parts.append("</section>")

    # sessions
    shown = [o for o in SYMBOLS if any(s["counts"].get(o, 0) - (s["absent"] if o == "skip" else 0)
                                        for s in data["sessions"])]  # outcomes that occur
    head = ["session", "torch", "Python", "Lightning", "state"] + [
        _h_outcome(o) for o in shown] + [f'<span class="chip absent">{ABSENT_TEXT}</span>', "reused"]
    rows = []
    for s in data["sessions"]:
        counts = {**s["counts"], "skip": s["counts"].get("skip", 0) - s["absent"]}
        state = _e(s["state"]) if s["complete"] else f'<strong class="warn">{_e(s["state"])}</strong>'
        rows.append([_e(s["name"]), f'<span title="CUDA {_e(s["cuda"] or "-")}">{_e(s["torch"])}</span>',
                     _e(s["python"] or "-"), _e(s["lightning"]), state, *(str(counts.get(o, 0) or "") for o in shown),
                     str(s["absent"] or ""),
                     str(s["reused"] or "")])
    for name in data["expected"]:
        if name not in {s["name"] for s in data["sessions"]}:
            rows.append([_e(name), "-", "-", "-", '<strong class="warn">no results file</strong>',
                         *([""] * (len(shown) + 2))])
    parts.append('<section id="sessions"><h2>Sessions</h2>' + _h_table(head, rows, "counts") + "</section>")
    return "\n".join(parts)


def _h_folded(data: dict) -> str:
    folded = data["folded"]
    items = ("".join(f"<li><code>{_e(c)}</code></li>" for c in folded)
             or "<li>None: every case ran on some session's device.</li>")
    return (f'<details id="folded"><summary>{_plural(len(folded), "case")} did not run on any session\'s device '
            f"(folded)</summary><p class=\"hint\">Every record of these says the device was absent on the session's "
            f"machine (e.g. a CUDA case on a CPU session).</p><ul>{items}</ul></details>")


def render_html(data: dict) -> str:
    template = (pathlib.Path(__file__).with_name("report_template.html")).read_text(encoding="utf-8")
    links = {r: upstream_link(r) for c in data["cases"] for cell in c["cells"].values()
             for r in [cell.get("reference")] + [d["ref"] for d in cell.get("declared") or []] if r}
    payload = json.dumps({"sessions": data["sessions"], "families": data["families"], "cases": data["cases"],
                          "symbols": CELL_TEXT, "meaning": MEANING, "links": links,
                          "absent": {"text": ABSENT_TEXT, "symbol": ABSENT_SYMBOL}}, default=str)
    nav = [("transitions", f"Transitions ({len(data['transitions'])})"),
           ("other-environments",
            f"Other environments ({sum(len(e['differences']) for e in data['other_environments'])})"),
           ("failures", f"Failures ({len(data['failures']['failing'])})"),
           *([("baseline", f"Baseline ({len(data['baseline']['rows'])})")] if data["baseline"] is not None else []),
           ("sessions", f"Sessions ({len(data['sessions'])})"),
           ("matrix", f"Matrix ({len(data['cases']) - len(data['folded'])})"),
           ("folded", f"Not on this device ({len(data['folded'])})")]
    filled = {
        "<!--SUMMARY-->": _e(data["summary"]),
        "<!--NAV-->": " ".join(f'<a href="#{anchor}">{_e(text)}</a>' for anchor, text in nav),
        "<!--SECTIONS-->": _h_sections(data),
        "<!--FOLDED-->": _h_folded(data),
        # Inside <script>, no "</script" or "<!--" may appear: every "<" as its JSON escape.
        "/*DATA*/null": payload.replace("<", "\\u003c"),
    }
    # One pass: what one marker brings in is never taken for another marker.
    return re.sub("|".join(map(re.escape, filled)), lambda match: filled[match[0]], template)


def summary_markdown(data: dict) -> str:
    """The short form for a CI step summary: the summary, the exit status with its reasons, the
    failures and the comparison with the baseline."""
    text = render_markdown(data)
    head = text.split("## Transitions between torch versions", 1)[0]
    failures = text.split("## Failures", 1)[1].split("## Sessions", 1)[0]
    return head + "## Failures" + failures


def write(data: dict, out_dir: pathlib.Path) -> list[pathlib.Path]:
    """REPORT.md, report.html and report.json: each rendered before any is written, each written
    whole or not at all."""
    rendered = {
        "REPORT.md": render_markdown(data),
        "report.html": render_html(data),
        "report.json": json.dumps(data, indent=1, default=str),
    }
    paths = []
    for name, text in rendered.items():
        path = pathlib.Path(out_dir) / name
        records.write_atomically(path, text)
        paths.append(path)
    return paths
