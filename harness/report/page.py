"""What report.html carries and what it loads on demand, so that the page of a whole matrix stays
small (under 2 MB) and paints at once.

The page embeds the grid only: per case its parameters, and per cell the outcome, three marks
(absent device, reused record, a GPU cell whose CPU twin differs) and the first line of its message,
each distinct line stored once. A cell's whole record (message, figures, attempts, declarations,
output) is in `report-cells/<session>.js` beside the page, loaded when a cell is opened: a script
file rather than JSON, because a browser lets a page opened from disk (file://) load a script
beside it, never fetch a file. report.json keeps everything, for tools.
"""

from __future__ import annotations

import json
import pathlib

from harness.core.outcomes import OUTCOMES, upstream_link
from harness.report.results import NOT_RUN, opening_line

CELLS_DIR = "report-cells"
CALLBACK = "REPORT_CELLS"  # what a cells file calls with (session, {case: record})
ORDER = [*OUTCOMES, NOT_RUN]  # an outcome's index in the page's grid
TITLE_CHARACTERS = 160


def cells_file(session: str) -> str:
    """The cells file of a session, relative to the page (a session's name is [a-z0-9_])."""
    return f"{CELLS_DIR}/{session}.js"


def _json(value) -> str:
    # inside a script, no "</script" or "<!--": every "<" as its JSON escape
    return json.dumps(value, default=str, separators=(",", ":")).replace("<", "\\u003c")


def grid_payload(data: dict, symbols: dict, meaning: dict, absent: dict) -> str:
    """The page's DATA: sessions, the grid of cases that ran somewhere, and what the legend needs."""
    messages: dict[str, int] = {}
    names = [s["name"] for s in data["sessions"]]
    cases = []
    for row in data["cases"]:
        if row["folded"]:
            continue
        grid = []
        for name in names:
            cell = row["cells"][name]
            marks = ("a" if cell.get("absent") else "") + ("r" if cell.get("reused_from") else "") + (
                "t" if cell.get("cpu_twin") else "")
            line = opening_line(cell.get("message"), TITLE_CHARACTERS)
            index = messages.setdefault(line, len(messages)) if line else -1
            code = ORDER.index(cell["outcome"])
            grid.append(code if index < 0 and not marks else [code, index, marks] if marks else [code, index])
        params = row["params"]
        cases.append({"case": row["case"], "family": row["family"], "backend": params.get("backend") or "",
                      "device": str(params.get("device") or ""), "all_skip": row["all_skip"], "since": row["since"],
                      "grid": grid})
    refs = {c["reference"] for row in data["cases"] for c in row["cells"].values() if c.get("reference")}
    refs |= {e["reference"] for row in data["cases"] for c in row["cells"].values()
             for e in ((c.get("metrics") or {}).get("property") or {}).get("failing_examples") or []
             if e.get("reference")}
    refs |= {d["ref"] for row in data["cases"] for c in row["cells"].values() for d in c.get("declared") or []}
    return _json({"sessions": data["sessions"], "families": data["families"], "cases": cases,
                  "outcomes": ORDER, "messages": list(messages), "symbols": symbols, "meaning": meaning,
                  "links": {ref: upstream_link(ref) for ref in sorted(refs)}, "absent": absent,
                  "cells_dir": CELLS_DIR, "callback": CALLBACK})


def cell_files(data: dict) -> dict[str, str]:
    """Per session, its cells file (relative path -> text): every record of a case that ran somewhere."""
    files = {}
    for session in data["sessions"]:
        name = session["name"]
        cells = {row["case"]: row["cells"][name] for row in data["cases"] if not row["folded"]}
        files[cells_file(name)] = f"{CALLBACK}({_json(name)},{_json(cells)});\n"
    return files


def stale_cell_files(out_dir: pathlib.Path, written: dict[str, str]) -> list[pathlib.Path]:
    """Cells files of sessions no longer in the report: removed after the new ones are written."""
    keep = {pathlib.Path(out_dir) / path for path in written}
    return [path for path in sorted((pathlib.Path(out_dir) / CELLS_DIR).glob("*.js")) if path not in keep]
