"""The regression table: merges results files across sessions and compares with a baseline."""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import re
import tempfile

from packaging.version import InvalidVersion, Version

from harness import records
from harness.outcomes import FAILING, OUTCOMES, PASSING

NOT_RUN = "not run"  # a cell without a record: the session stopped early or lacks the case
SYMBOLS = {**{name: o.symbol for name, o in OUTCOMES.items()}, NOT_RUN: "·"}
CELL_TEXT = {**{name: o.cell for name, o in OUTCOMES.items()}, NOT_RUN: "-"}
MEANING = {**{name: o.meaning for name, o in OUTCOMES.items()},
           NOT_RUN: "no record: the session stopped early or lacks the case"}
COMPARISONS = ("regressed", "fixed", "new", "removed", "still failing", "flaky")


class ReportError(Exception):
    """Bad input to the report; the message names the file (and line)."""


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
    def device(self) -> str:
        if self.name.startswith("cuda"):
            return "cuda"
        if self.name.startswith("cpu"):
            return "cpu"
        return "cuda" if self.environment.get("gpu") else "cpu"

    @property
    def complete(self) -> bool:
        return self.end is not None

    def sort_key(self):
        try:
            version = Version(self.torch.split("+")[0])
        except InvalidVersion:
            version = Version("0")
        return (version, self.device, self.name)


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
    """'owner/repo#123' -> its GitHub issue or pull request (GitHub redirects either way); a URL
    (a documentation page) as it is."""
    match = re.fullmatch(r"([\w.-]+/[\w.-]+)#(\d+)", ref)
    if match:
        return f"https://github.com/{match[1]}/issues/{match[2]}"
    return ref if re.match(r"https?://", ref) else ""


def outcome_of(session: SessionResult, case: str) -> str:
    record = session.cases.get(case)
    return record["outcome"] if record else NOT_RUN


def transitions(sessions: list[SessionResult], case_ids: list[str]) -> list[dict]:
    """Where a case's outcome changes from one torch version to the next (same device)."""
    changes = []
    for device in sorted({s.device for s in sessions}):
        line = [s for s in sessions if s.device == device]
        for case in case_ids:
            ran = [(s, s.cases[case]) for s in line if case in s.cases]
            for (before, old), (after, new) in zip(ran, ran[1:]):
                if old["outcome"] != new["outcome"]:
                    changes.append({
                        "case": case, "device": device,
                        "from_session": before.name, "from_torch": before.torch, "from": old["outcome"],
                        "to_session": after.name, "to_torch": after.torch, "to": new["outcome"],
                        "message": new.get("message") or old.get("message") or "",
                    })
    return changes


def compare(current: list[SessionResult], baseline: list[SessionResult]) -> list[dict]:
    """Each case of each session present now, against the same session in the baseline."""
    base = {s.name: s for s in baseline}
    rows = []
    for session in current:
        old = base.get(session.name)
        if old is None:
            continue
        for case in sorted(set(session.cases) | set(old.cases)):
            now, then = outcome_of(session, case), outcome_of(old, case)
            if now == NOT_RUN and then != NOT_RUN:
                status = "removed" if session.complete else None  # an incomplete run says nothing
            elif then == NOT_RUN:
                status = "new"
            elif now == "flaky":
                status = "flaky"
            elif then in PASSING and now in FAILING:
                status = "regressed"
            elif then in FAILING and now in PASSING:
                status = "fixed"
            elif then in FAILING and now in FAILING and not (then == now and then in ("known", "limitation")):
                status = "still failing"  # a declared failure staying declared is no news
            else:
                status = None
            if status:
                rows.append({"session": session.name, "case": case, "status": status, "baseline": then,
                             "now": now, "message": (session.cases.get(case) or {}).get("message") or ""})
    return rows


def build(directories, baseline_dirs=None) -> dict:
    sessions = load_dirs(directories)
    baseline = load_dirs(baseline_dirs) if baseline_dirs else None
    case_ids = sorted({c for s in sessions for c in s.cases},
                      key=lambda c: (c.split("/", 1)[0], c))
    families = sorted({c.split("/", 1)[0] for c in case_ids})
    data = {
        "schema": records.SCHEMA_VERSION,
        "sessions": [
            {
                "name": s.name, "torch": s.torch, "device": s.device,
                # complete: it finished and has every case the other sessions have
                "complete": s.complete and all(c in s.cases for c in case_ids),
                "finished": s.complete,
                "lightning": s.environment.get("lightning"), "cuda": s.environment.get("cuda"),
                "python": s.environment.get("python"), "started": s.environment.get("started"),
                "counts": _counts(s, case_ids), "missing": sum(1 for c in case_ids if c not in s.cases),
            }
            for s in sessions
        ],
        "families": families,
        "cases": [
            {
                "case": c, "family": c.split("/", 1)[0],
                "params": next(s.cases[c]["params"] for s in sessions if c in s.cases),
                "cells": {s.name: _cell(s, c) for s in sessions},
            }
            for c in case_ids
        ],
        "transitions": transitions(sessions, case_ids),
        "baseline": None,
    }
    if baseline is not None:
        rows = compare(sessions, baseline)
        data["baseline"] = {
            "sessions": [s.name for s in baseline],
            "rows": rows,
            "counts": {status: sum(1 for r in rows if r["status"] == status) for status in COMPARISONS},
        }
    return data


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
    return {key: record.get(key) for key in ("outcome", "exc_type", "message", "upstream", "metrics", "duration")}


# --- rendering ---

def _md_escape(text: str) -> str:
    return (text or "").replace("|", "\\|").replace("\n", " ")


def _refs_md(refs) -> str:
    return ", ".join(f"[{r}]({upstream_link(r)})" if upstream_link(r) else r for r in refs or [])


def render_markdown(data: dict) -> str:
    sessions = data["sessions"]
    out = ["# torch.compile compatibility report", ""]
    out += ["## Sessions", "", "| session | torch | Lightning | CUDA | state | " +
            " | ".join(SYMBOLS[o] + " " + o for o in SYMBOLS) + " |",
            "|---" * (5 + len(SYMBOLS)) + "|"]
    for s in sessions:
        state = ("complete" if s["complete"] else
                 "**incomplete**: stopped early" if not s["finished"] else f"**incomplete**: lacks {s['missing']} cases")
        out.append(f"| {s['name']} | {s['torch']} | {s['lightning']} | {s['cuda'] or '-'} | {state} | " +
                   " | ".join(str(s["counts"].get(o, 0)) for o in SYMBOLS) + " |")
    out += ["", "Legend: " + "; ".join(f"{SYMBOLS[o]} {o}: {MEANING[o]}" for o in SYMBOLS), ""]

    baseline = data.get("baseline")
    if baseline is not None:
        out += ["## Against the baseline", ""]
        out.append(", ".join(f"{n} {status}" for status, n in baseline["counts"].items()))
        out.append("")
        if baseline["rows"]:
            out += ["| session | case | status | baseline | now | message |", "|---|---|---|---|---|---|"]
            order = {status: i for i, status in enumerate(COMPARISONS)}
            for row in sorted(baseline["rows"], key=lambda r: (order[r["status"]], r["session"], r["case"])):
                out.append(f"| {row['session']} | `{row['case']}` | **{row['status']}** | {row['baseline']} | "
                           f"{row['now']} | {_md_escape(row['message'])} |")
            out.append("")

    out += ["## Matrix", ""]
    header = "| case | " + " | ".join(s["name"] for s in sessions) + " | upstream |"
    for family in data["families"]:
        out += [f"### {family}", "", header, "|---" * (len(sessions) + 2) + "|"]
        for case in (c for c in data["cases"] if c["family"] == family):
            refs = sorted({r for cell in case["cells"].values() for r in (cell.get("upstream") or [])})
            out.append(f"| `{case['case'].split('/', 1)[1]}` | " +
                       " | ".join(SYMBOLS[case["cells"][s["name"]]["outcome"]] for s in sessions) +
                       f" | {_refs_md(refs)} |")
        out.append("")

    out += ["## Transitions", ""]
    if not data["transitions"]:
        out += ["No case changes outcome across torch versions.", ""]
    else:
        out += ["| case | device | before | after | message |", "|---|---|---|---|---|"]
        for t in data["transitions"]:
            out.append(f"| `{t['case']}` | {t['device']} | torch {t['from_torch']} {SYMBOLS[t['from']]} {t['from']} | "
                       f"torch {t['to_torch']} {SYMBOLS[t['to']]} {t['to']} | {_md_escape(t['message'])} |")
        out.append("")
    return "\n".join(out)


def render_html(data: dict) -> str:
    template = (pathlib.Path(__file__).with_name("report_template.html")).read_text(encoding="utf-8")
    payload = json.dumps({**data, "symbols": CELL_TEXT, "meaning": MEANING,
                          "links": {r: upstream_link(r) for c in data["cases"] for cell in c["cells"].values()
                                    for r in (cell.get("upstream") or [])}})
    # Inside <script>, "</" must not close the element.
    return template.replace("/*DATA*/null", payload.replace("</", "<\\/"))


def summary_markdown(data: dict) -> str:
    """The short form for a CI step summary: session counts and the baseline's regressions."""
    text = render_markdown(data)
    return text.split("## Matrix", 1)[0]


def _write_atomically(path: pathlib.Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def write(data: dict, out_dir: pathlib.Path) -> list[pathlib.Path]:
    """REPORT.md, report.html and report.json: each written whole or not at all."""
    rendered = {
        "REPORT.md": render_markdown(data),
        "report.html": render_html(data),
        "report.json": json.dumps(data, indent=1, default=str),
    }
    paths = []
    for name, text in rendered.items():
        path = pathlib.Path(out_dir) / name
        _write_atomically(path, text)
        paths.append(path)
    return paths
