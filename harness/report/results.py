"""A regression table's results files read into sessions (harness.core.records reads each file): what
every part of the report works from. A session's line, row and label come from the identity its
environment record carries (harness.core.matrix), never from its name."""

from __future__ import annotations

import dataclasses
import pathlib

from harness.core import matrix, outcomes, paths, records, timings, versions
from harness.core.errors import BadInput

NOT_RUN = "not run"  # a cell without a record: the session stopped early or lacks the case
NO_DEVICE = "no CUDA device"  # how a case that needs a GPU says it skipped (cases/conftest.py)


class ReportError(BadInput):
    """Bad input to the report; the message names the file (and line)."""


@dataclasses.dataclass
class SessionResult:
    environment: dict
    cases: dict[str, dict]  # case id -> record
    end: dict | None
    path: pathlib.Path
    notes: list = dataclasses.field(default_factory=list)  # what its reader passed over, said in the report

    @property
    def identity(self) -> matrix.Identity:
        return self.environment["identity"]

    name = property(lambda self: self.identity["session"])
    device = property(lambda self: self.identity["device"])
    line = property(lambda self: self.identity["line"])
    label = property(lambda self: self.identity["label"])
    plain = property(lambda self: self.identity["plain"])
    lightning_of = property(lambda self: self.identity.get("lightning_of"))  # the Lightning axis (schema 2 may lack it)
    torch = property(lambda self: self.environment.get("torch") or "?")
    version = property(lambda self: versions.torch_version(self.environment.get("torch")))
    # Every case it collected has a record, and nothing stopped it (records.run_complete).
    complete = property(lambda self: records.run_complete(self.end))

    def sort_key(self):
        """Columns by torch row: its plain CPU session, its CUDA sessions beside it (one per CUDA
        line), then its labelled environments (another Python, the Lightning axis)."""
        return (self.version, self.label or "", self.device != "cpu", self.line, self.name)

    def absent(self, case: str) -> bool:
        """The case skipped because its device is not on the session's machine."""
        record = self.cases.get(case)
        if not record or record["outcome"] != "skip":
            return False
        device = str((record.get("params") or {}).get("device") or "")
        return NO_DEVICE in (record.get("message") or "") or (device.startswith("cuda") and self.device == "cpu")


def load_session(path: pathlib.Path) -> SessionResult:
    notes: list[str] = []
    try:
        found = timings.merged(records.read(path, passed_over=notes.append), timings.read(path))
    except records.ResultsError as exc:
        raise ReportError(str(exc)) from None
    cases = {r["case"]: r for r in found[1:] if r["kind"] == "case"}
    end = next((r for r in found[1:] if r["kind"] == "end"), None)
    return SessionResult(found[0], cases, end, path, notes)


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
