"""The results file a session writes (harness.core.paths.results_path): the harness's alone, whatever
a case does to it.

A case, or a process it started, can write into the file, replace it or remove its directory. So each
record is appended whole: one os.write of one complete line on a descriptor opened with O_APPEND,
which a foreign write can come before or after but never cut into. Every line written is also held
here, in memory: a file removed (or replaced) mid-session is made again from what the session holds,
the session's JUnit file is made from it, and what the file holds beside it is found and counted
(`foreign`), for the end record, never fatal. harness.core.records.read passes over what is not a
record and says so.
"""

from __future__ import annotations

import json
import os
import pathlib
import tempfile
import time
from collections.abc import Mapping
from typing import TypedDict

from harness.core import paths, records
from harness.core.records import ResultsError, warn

ANY_EARLIER = "any"  # a writer made outside a session: whatever is at its path is an earlier run's


class Foreign(TypedDict):
    """What a session found in its results file that the harness did not write."""
    lines: int  # lines of the file now that no writer of this session wrote
    files: list[str]  # where each file found at the path mid-session was set aside


def file_identity(path: pathlib.Path) -> tuple[int, int] | None:
    """(device, inode) of the file at `path`, None where there is none: what tells one file from another
    written at the same path."""
    try:
        found = os.stat(path)
    except OSError:
        return None
    return found.st_dev, found.st_ino


def _bounded(value, key: str | None, scale: float):
    if isinstance(value, str):
        if key in records.PLACES:
            return value
        value = records.portable(value)
        if key in records.UNCLIPPED:
            return records.clip(value, records.NAME_LIMIT)
        return records.clip(value, max(int(records.text_limit(key) * scale), 40))
    if isinstance(value, dict):
        entries = list(value.items())
        if len(entries) > records.DICT_LIMIT:  # a case's own figures, say: the first ones, and how many more
            entries = [*entries[:records.DICT_LIMIT], ("[cut]", f"{len(entries) - records.DICT_LIMIT} more entries")]
        return {records.clip(records.portable(str(k)), records.KEY_LIMIT): _bounded(v, k, scale) for k, v in entries}
    if isinstance(value, (list, tuple)):
        items = [_bounded(v, key, scale) for v in value]
        limit = records.LIST_LIMIT if key is None else records.LIST_LIMITS.get(key, records.LIST_LIMIT)
        if len(items) > limit:
            half = limit // 2
            items = [*items[:half], f"[... {len(items) - 2 * half} items cut ...]", *items[-half:]]
        return items
    if value is None or isinstance(value, (bool, int, float)):
        return value
    return _bounded(str(value), key, scale)  # a path, a version: written as its text


def bounded_line(record: dict) -> str:
    """The record as one results line of at most LINE_LIMIT bytes (the size bounds of harness.core.records),
    its texts `portable`: every text field within its limit, the limits tightened where the fields together
    still exceed the line's."""
    scale = 1.0
    while True:
        line = json.dumps(_bounded(record, None, scale))
        if len(line.encode()) <= records.LINE_LIMIT or scale < 1e-3:
            return line
        scale /= 2


def check_writable(directory: pathlib.Path) -> None:
    """ResultsError unless results can be written in `directory` (made if missing)."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=directory):
            pass
    except OSError as exc:
        raise ResultsError(f"cannot write results to {directory}: {exc.strerror or exc}") from exc


def _set_aside(path: pathlib.Path, suffix: str) -> pathlib.Path:
    """Move the file at `path` into previous/ beside it, named by its time, never over another."""
    previous = paths.results_subdir(paths.PREVIOUS, path.parent)
    previous.mkdir(exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(path.stat().st_mtime))
    target, n = previous / f"{path.stem}.{stamp}{suffix}", 1
    while target.exists():
        target, n = previous / f"{path.stem}.{stamp}.{n}{suffix}", n + 1
    os.replace(path, target)
    return target


class ResultsWriter:
    """Appends records to `path`; every record is on disk once `write` returns.

    `earlier`: the file_identity of what was at `path` when the session started (None: nothing). That
    file is an earlier run's and is moved to previous/, never overwritten. Anything else found there was
    written during the session by something that is not the harness (a case): it is set aside in
    previous/ as `<session>.<time>.foreign`, which no reader takes for results, and counted.
    """

    def __init__(self, path: pathlib.Path, earlier: tuple[int, int] | None | str = ANY_EARLIER):
        self.path = pathlib.Path(path)
        self.lines: list[bytes] = []  # every line written, in order: what the session holds
        self.foreign = Foreign(lines=0, files=[])  # what was found that the harness did not write
        self.remade = 0  # times the file was gone (or replaced) and made again
        self._fd: int | None = None
        try:
            self._open(earlier)
        except OSError as exc:
            raise ResultsError(f"cannot write results to {self.path}: {exc.strerror or exc}") from exc

    def _open(self, earlier: tuple[int, int] | None | str) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        found = file_identity(self.path)
        if found is not None and (earlier == ANY_EARLIER or found == earlier):
            _set_aside(self.path, paths.RESULTS_SUFFIX)
        elif found is not None:
            self.foreign["files"].append(str(_set_aside(self.path, ".foreign")))
            warn(f"{self.path} was written by something other than the harness during the session; "
                  f"set aside as {self.foreign['files'][-1]}")
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_APPEND | os.O_CLOEXEC, 0o666)

    @property
    def _open_fd(self) -> int:
        """The descriptor of the file this writer made; ValueError once closed (as a closed file says)."""
        if self._fd is None:
            raise ValueError(f"{self.path}: the results writer is closed")
        return self._fd

    def _still_there(self) -> bool:
        """The file at `path` is still the one this writer made."""
        mine = os.fstat(self._open_fd)
        return file_identity(self.path) == (mine.st_dev, mine.st_ino)

    def write(self, record: Mapping[str, object]) -> None:
        """Any record read or built here, written as schema 2 (a carried schema 1 record is upgraded)."""
        record = records.upgrade({"schema": record.get("schema", records.SCHEMA_VERSION), **record})
        line = (bounded_line(record) + "\n").encode()
        self.lines.append(line)
        try:
            if self._still_there():
                self._append(line)
            else:
                self._remake()
        except OSError as exc:
            raise ResultsError(f"cannot write results to {self.path}: {exc.strerror or exc}") from exc

    def _append(self, line: bytes) -> None:
        size = os.fstat(self._open_fd).st_size
        if size and os.pread(self._open_fd, 1, size - 1) != b"\n":
            # Something wrote a line without its end: ours starts on a line of its own, whole.
            line = b"\n" + line
        written = os.write(self._open_fd, line)
        if written != len(line):  # a full disk: the line is cut, and the session cannot record
            raise OSError(f"wrote {written} of a record's {len(line)} bytes")
        os.fsync(self._open_fd)

    def _remake(self) -> None:
        """The file (or its directory) was removed or replaced: made again with every line the session
        wrote, so that it still holds the whole session."""
        # Closed before it is made again, and forgotten: where making it fails, the writer is closed, and
        # close() must not close a number the system may since have given to another file.
        fd, self._fd = self._open_fd, None
        os.close(fd)
        self.remade += 1
        warn(f"{self.path} was removed or replaced during the session; written again from the "
              f"{len(self.lines)} records the session holds")
        self._open(earlier=None)
        data = memoryview(b"".join(self.lines))
        while data:
            data = data[os.write(self._open_fd, data):]
        os.fsync(self._open_fd)

    def records(self) -> list[dict]:
        """The session's own records, as a reader of its file gets them, from what it holds: never from a
        file something else may have changed."""
        return [json.loads(line) for line in self.lines]

    def count_foreign(self) -> Foreign:
        """`foreign`, with the lines the file holds now that this writer did not write."""
        try:
            on_disk = os.pread(self._open_fd, os.fstat(self._open_fd).st_size, 0).split(b"\n")
        except OSError:
            on_disk = []
        ours = {line.rstrip(b"\n") for line in self.lines}
        self.foreign["lines"] = sum(1 for line in on_disk if line.strip() and line not in ours)
        return self.foreign

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
