"""What a worker printed, for the record of a case whose process died (a forked case's process,
or the worker itself).

A worker sends its fd 1 and 2, and faulthandler's reports, to `<dir>/<worker>.log`, and notes each
case it starts there and in `<dir>/<worker>.current`. When xdist reports the worker dead, the
controller reads what the dead case printed, and harness.core.outcomes.crash_summary picks its most
telling line.

The log lives beside the results (harness.core.paths.logs_dir), and what one attempt of a case printed
is kept to CASE_LOG_LIMIT bytes there: past it, its middle is cut once the attempt ends (its start, with
the case's start mark, and its end, with how it ended, stay), and the record says how much (`log_cut`).
A worker that dies mid-case leaves that case's part whole.
"""

from __future__ import annotations

import faulthandler
import json
import os
import pathlib
import shutil
import time
from typing import Optional, TextIO, TypedDict

from harness.core import records
from harness.core.caseid import CaseIdentity

START_MARK = "=== harness: start "
CASE_LOG_LIMIT = 64 * 2**20  # bytes of the log one attempt of a case keeps: a 10 MB message twice, whole


def worker_process(node):
    """The process of xdist's worker `node` (execnet's Popen), or None where execnet does not expose one."""
    return getattr(getattr(getattr(node, "gateway", None), "_io", None), "popen", None)

class CaseNote(TypedDict, total=False):
    """What a worker notes of the case it is running (`<worker>.current`); empty before its first case."""
    identity: CaseIdentity
    started: float  # time.time()
    time_limit: Optional[float]
    metrics: dict  # what its phases measured so far


class WorkerLog:
    def __init__(self, directory: pathlib.Path, worker: str):
        self.path = pathlib.Path(directory) / f"{worker}.log"
        self.current = pathlib.Path(directory) / f"{worker}.current"
        self.file: TextIO | None = None
        self.noted: CaseNote = {}
        self.case_start = 0  # where the running attempt's part of the log begins

    def capture(self) -> None:
        """Point fd 1 and 2 and faulthandler at the log. pytest captures at sys level only
        (--capture=tee-sys), so everything a case prints, C code included, lands there.
        faulthandler must be pointed again: pytest's own plugin enabled it on a copy of the
        original stderr before this plugin was loaded."""
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)  # read too: _made_again
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
        if self.file is not None:
            self.file.close()
        self.file = open(self.path, "a", buffering=1, encoding="utf-8", errors="replace")
        faulthandler.enable(file=self.file, all_threads=True)

    def _made_again(self) -> None:
        """The log (or the results directory it lies in) was removed, by a case say: made again with
        what this worker's descriptor still holds, so that the records that name it stay true."""
        mine = os.fstat(2)
        try:
            found = os.stat(self.path)
            if (found.st_dev, found.st_ino) == (mine.st_dev, mine.st_ino):
                return
        except OSError:
            pass
        self.path.parent.mkdir(parents=True, exist_ok=True)
        held = os.pread(2, mine.st_size, 0) if mine.st_size else b""
        self.path.write_bytes(held)
        self.capture()

    def case_started(self, identity: CaseIdentity, time_limit: float | None) -> None:
        if self.file is not None:
            self._made_again()
        self.case_start = _size(self.path)
        os.write(2, f"\n{START_MARK}{identity['nodeid']}\n".encode())
        self.noted = {"identity": identity, "started": time.time(), "time_limit": time_limit, "metrics": {}}
        self._note()

    def _note(self) -> None:
        """What the running case noted so far, where the controller finds it if the worker dies; its
        folder made again if a case removed it (with the results directory)."""
        self.current.parent.mkdir(parents=True, exist_ok=True)
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
        self._note()

    def bound_case(self) -> str | None:
        """Cut the middle of what the attempt that just ended printed, where it is over CASE_LOG_LIMIT:
        how much was cut, for its record; None when nothing was."""
        end = _size(self.path)
        if end - self.case_start <= CASE_LOG_LIMIT:
            return None
        keep = CASE_LOG_LIMIT // 2
        cut = end - self.case_start - 2 * keep
        marker = f"\n[... harness: {cut:,} bytes of what this case printed cut here ...]\n".encode()
        fd = os.open(self.path, os.O_RDWR)  # not O_APPEND: written in place, over the cut middle
        try:
            tail = os.pread(fd, keep, end - keep)
            os.pwrite(fd, marker + tail, self.case_start + keep)
            os.ftruncate(fd, self.case_start + keep + len(marker) + len(tail))
        finally:
            os.close(fd)
        return (f"{cut:,} bytes of what the case printed were cut from the middle of its log "
                f"(each attempt keeps {CASE_LOG_LIMIT:,})")


GUARD_SUFFIX = ".cuda-guard.json"


def write_guard_summary(log: WorkerLog, summary: dict) -> None:
    """The worker's CUDA guard (harness.plugin.cudaguard.summary) beside its log, where the controller
    reads it for the results' records."""
    try:
        log.path.with_suffix(GUARD_SUFFIX).write_text(json.dumps(summary))
    except OSError:  # the folder was removed (by a case): its log says what was refused
        pass


def guard_summaries(directory: pathlib.Path) -> dict:
    """Each worker's CUDA guard, as it last wrote it, by worker."""
    found = {}
    for path in sorted(pathlib.Path(directory).glob(f"*{GUARD_SUFFIX}")):
        try:
            found[path.name[:-len(GUARD_SUFFIX)]] = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
    return found


def prune(current: pathlib.Path, named: list) -> list[pathlib.Path]:
    """Logs live as long as the results that point to them: remove the folders of the session's earlier
    runs (`current`'s siblings) that no record of its results file names (`named`: the records' `log`;
    a carried record names the log of the run that measured it). The removed folders."""
    kept = {current.resolve(), *(pathlib.Path(log).resolve().parent for log in named if log)}
    removed = [folder for folder in current.parent.iterdir() if folder.is_dir() and folder.resolve() not in kept]
    for folder in removed:
        shutil.rmtree(folder, ignore_errors=True)
    return removed


def remove_run(current: pathlib.Path) -> None:
    """A run that recorded nothing leaves no logs: its folder goes, and the session's and the logs'
    folders above it where they are left empty (no earlier run's logs are touched)."""
    shutil.rmtree(current, ignore_errors=True)
    for folder in (current.parent, current.parent.parent):
        try:
            folder.rmdir()
        except OSError:  # not empty: an earlier run's logs
            break


def _size(path: pathlib.Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


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


def crashed_case(directory: pathlib.Path, worker: str, nodeid: str) -> tuple[CaseNote, str]:
    """What the dead worker noted of the case it was running (`identity`, `started`,
    `time_limit`; empty if it never got to it) and what the case printed."""
    log = WorkerLog(directory, worker)
    noted: CaseNote = {}
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


def crash_phase(identity: CaseIdentity, outcome: str, message: str, printed: str, metrics: dict | None = None,
                log: pathlib.Path | None = None) -> tuple[records.PhaseData, str]:
    """The record of a case whose process died (a forked child, or the worker itself), and pytest's
    text for it: how it ended, the ends of what it printed, its figures so far, the log that holds all
    it printed."""
    tail = shorten(printed)
    data = records.phase_data(identity, "crash", outcome, message=message, metrics=metrics or {}, output_tail=tail)
    if log is not None:
        data["log"] = str(log)
    return data, f"{message}\n\n{tail}" if tail else message
