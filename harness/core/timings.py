"""How long a run took, kept beside its results file and not in it: `results/timings/SESSION.jsonl`.

The table (`results/SESSION.jsonl`, committed) holds what each case did: its outcome and the figures that
show it. Its times change on every run, so a row measured again with the same outcomes would rewrite
every line. They go to a file of their own: a case's `duration`, its `compile_s` and `run_s` figures, and
the session's `seconds`. That file is not committed. JUnit, the report and benchmarks/speed.py read it
where it exists. A record carried over from an earlier run has no time here, since it was not measured
in this run.
"""

from __future__ import annotations

import json
import pathlib
from typing import Any, Mapping, TextIO

from harness.core import paths

CASE_TIME_KEYS = ("duration",)  # of a case record
METRIC_KEYS = ("compile_s", "run_s")  # among a case's metrics
END_KEYS = ("seconds",)  # of the end record


def path_for(results: pathlib.Path) -> pathlib.Path:
    """The timings file of a results file."""
    results = pathlib.Path(results)
    return paths.results_subdir(paths.TIMINGS, results.parent) / results.name


def split(record: Mapping[str, Any]) -> tuple[Mapping[str, Any], dict | None]:
    """(the record as the table keeps it, its times or None)."""
    if record.get("kind") == "case":
        metrics = record.get("metrics") or {}
        times = {key: record[key] for key in CASE_TIME_KEYS if key in record}
        times.update({key: metrics[key] for key in METRIC_KEYS if key in metrics})
        if not times:
            return record, None
        kept = {k: v for k, v in record.items() if k not in CASE_TIME_KEYS}
        if "metrics" in record:
            kept["metrics"] = {k: v for k, v in metrics.items() if k not in METRIC_KEYS}
        return kept, {"kind": "case", "case": record["case"], **times}
    if record.get("kind") == "end" and any(key in record for key in END_KEYS):
        return ({k: v for k, v in record.items() if k not in END_KEYS},
                {"kind": "end", **{key: record[key] for key in END_KEYS if key in record}})
    return record, None


class Writer:
    """Appends the times of a run, the file made anew by its first write."""

    def __init__(self, results: pathlib.Path):
        self.path = path_for(results)
        self.handle: TextIO | None = None

    def write(self, times: dict) -> None:
        if self.handle is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.handle = open(self.path, "w", encoding="utf-8")
        self.handle.write(json.dumps(times, default=str) + "\n")
        self.handle.flush()

    def close(self) -> None:
        if self.handle is not None:
            self.handle.close()


def read(results: pathlib.Path) -> dict:
    """{"cases": case id -> its times, "seconds": the session's, if known}; empty where there is no
    timings file or it cannot be read (times are never what a reader depends on)."""
    try:
        lines = path_for(results).read_text(encoding="utf-8").splitlines()
        entries = [json.loads(line) for line in lines if line.strip()]
    except (OSError, UnicodeDecodeError, ValueError):
        return {"cases": {}}
    found: dict = {"cases": {}}
    for entry in entries:
        if isinstance(entry, dict) and entry.get("kind") == "case" and "case" in entry:
            found["cases"][entry["case"]] = {k: v for k, v in entry.items() if k not in ("kind", "case")}
        elif isinstance(entry, dict) and entry.get("kind") == "end":
            found.update({key: entry[key] for key in END_KEYS if key in entry})
    return found


def merged(records: list[dict], found: dict) -> list[dict]:
    """The records with their times put back (a case's duration and time figures, the end's seconds)."""
    out = []
    for record in records:
        times = found["cases"].get(record.get("case")) if record.get("kind") == "case" else None
        if times:
            record = {**record, **{k: times[k] for k in CASE_TIME_KEYS if k in times},
                      "metrics": {**(record.get("metrics") or {}), **{k: times[k] for k in METRIC_KEYS if k in times}}}
        elif record.get("kind") == "end" and "seconds" in found:
            record = {**record, "seconds": found["seconds"]}
        out.append(record)
    return out
