"""What a worker printed, for the record of a case whose process died (a forked case's process,
or the worker itself).

A worker sends its fd 1 and 2, and faulthandler's reports, to `<dir>/<worker>.log`, and notes each
case it starts there and in `<dir>/<worker>.current`. When xdist reports the worker dead, the
controller reads what the dead case printed, and harness.core.outcomes.crash_summary picks its most
telling line.
"""

from __future__ import annotations

import faulthandler
import json
import os
import pathlib
import time

from harness.core import records

START_MARK = "=== harness: start "


class WorkerLog:
    def __init__(self, directory: pathlib.Path, worker: str):
        self.path = pathlib.Path(directory) / f"{worker}.log"
        self.current = pathlib.Path(directory) / f"{worker}.current"
        self.file = None
        self.noted = {}

    def capture(self) -> None:
        """Point fd 1 and 2 and faulthandler at the log. pytest captures at sys level only
        (--capture=tee-sys), so everything a case prints, C code included, lands there.
        faulthandler must be pointed again: pytest's own plugin enabled it on a copy of the
        original stderr before this plugin was loaded."""
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
        self.file = open(self.path, "a", buffering=1, encoding="utf-8", errors="replace")
        faulthandler.enable(file=self.file, all_threads=True)

    def case_started(self, identity: dict, time_limit: float | None) -> None:
        os.write(2, f"\n{START_MARK}{identity['nodeid']}\n".encode())
        self.noted = {"identity": identity, "started": time.time(), "time_limit": time_limit, "metrics": {}}
        self.current.write_text(json.dumps(self.noted, default=str))

    def measured(self, nodeid: str) -> dict:
        """What the case noted it measured (its phases write it as they end: a forked case
        writes it from its own process)."""
        try:
            noted = json.loads(self.current.read_text())
        except (OSError, ValueError):
            return {}
        return noted.get("metrics", {}) if noted.get("identity", {}).get("nodeid") == nodeid else {}

    def phase_done(self, metrics: dict) -> None:
        """Keep what the case measured so far: its record keeps it if a later phase dies."""
        self.noted["metrics"].update(metrics)
        self.current.write_text(json.dumps(self.noted, default=str))


def case_output(log: WorkerLog, nodeid: str) -> str:
    """What the log holds since the last start of `nodeid`."""
    try:
        text = log.path.read_text(errors="replace")
    except OSError:
        return ""
    start = text.rfind(f"{START_MARK}{nodeid}\n")
    if start >= 0:
        text = text[start:].split("\n", 1)[1] if "\n" in text[start:] else ""
    return text


def crashed_case(directory: pathlib.Path, worker: str, nodeid: str) -> tuple[dict, str]:
    """What the dead worker noted of the case it was running (`identity`, `started`,
    `time_limit`; empty if it never got to it) and what the case printed."""
    log = WorkerLog(directory, worker)
    noted = {}
    if log.current.exists():
        found = json.loads(log.current.read_text())
        noted = found if found["identity"].get("nodeid") == nodeid else {}
    return noted, case_output(log, nodeid)


def shorten(output: str, head: int = 1500, tail: int = 2500) -> str:
    """What a record keeps of a dead worker's output: its start (what the case printed) and
    its end (how it died), without the interpreter's list of extension modules."""
    lines = [line for line in output.splitlines() if not line.startswith("Extension modules:")]
    text = "\n".join(lines)
    return text if len(text) <= head + tail else f"{text[:head]}\n[...]\n{text[-tail:]}"


def crash_phase(identity: dict, outcome: str, message: str, printed: str, metrics: dict | None = None,
                log: pathlib.Path | None = None) -> tuple[dict, str]:
    """The record of a case whose process died (a forked child, or the worker itself), and pytest's
    text for it: how it ended, the ends of what it printed, its figures so far, the log that holds all
    it printed."""
    tail = shorten(printed)
    data = records.phase_data(identity, "crash", outcome, message=message, metrics=metrics or {}, output_tail=tail)
    if log is not None:
        data["log"] = str(log)
    return data, f"{message}\n\n{tail}" if tail else message
