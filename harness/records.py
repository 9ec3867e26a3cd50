"""The results file: one JSON record per line, appended and flushed as each case finishes."""

from __future__ import annotations

import json
import os
import pathlib
import sys
import tempfile
import time

from harness.outcomes import OUTCOMES

SCHEMA_VERSION = 2  # 2: a case names the one reference it met (`reference`) and what it declares (`declared`)
READABLE_SCHEMAS = (1, 2)
RESULTS_ENV = "HARNESS_RESULTS_DIR"


ROOT = pathlib.Path(__file__).resolve().parent.parent


def portable(text: str) -> str:
    """`text` without this machine's paths: the running environment as `<venv>`, the checkout's
    files relative to its root, Python's own installation as `<python>`, the temp dir as `<tmp>`;
    so that records of two machines compare equal."""
    places = {sys.prefix: "<venv>", sys.base_prefix: "<python>",  # outside a venv the two are one: <python>
              tempfile.gettempdir(): "<tmp>", str(ROOT) + os.sep: ""}
    for place in sorted(places, key=len, reverse=True):  # the venv may lie inside the checkout
        text = text.replace(place, places[place])
    return text


class ResultsError(Exception):
    """A results file cannot be written or read."""


def results_dir(default: str | os.PathLike = "results") -> pathlib.Path:
    return pathlib.Path(os.environ.get(RESULTS_ENV) or default)


def check_writable(directory: pathlib.Path) -> None:
    """ResultsError unless results can be written in `directory` (made if missing)."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=directory):
            pass
    except OSError as exc:
        raise ResultsError(f"cannot write results to {directory}: {exc.strerror or exc}") from exc


class ResultsWriter:
    """Appends records to `path`; every record is on disk once `write` returns.

    A file left by an earlier run of the same session is moved to `previous/`
    beside it, never overwritten.
    """

    def __init__(self, path: pathlib.Path):
        self.path = pathlib.Path(path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            if self.path.exists():
                self._keep_previous()
            self._file = open(self.path, "x", encoding="utf-8")
        except OSError as exc:
            raise ResultsError(f"cannot write results to {self.path}: {exc.strerror or exc}") from exc

    def _keep_previous(self) -> None:
        previous = self.path.parent / "previous"
        previous.mkdir(exist_ok=True)
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(self.path.stat().st_mtime))
        target = previous / f"{self.path.stem}.{stamp}.jsonl"
        n = 1
        while target.exists():
            target = previous / f"{self.path.stem}.{stamp}.{n}.jsonl"
            n += 1
        os.replace(self.path, target)

    def write(self, record: dict) -> None:
        line = portable(json.dumps({"schema": SCHEMA_VERSION, **record}, default=str, sort_keys=False))
        self._file.write(line + "\n")
        self._file.flush()
        os.fsync(self._file.fileno())

    def close(self) -> None:
        self._file.close()


def read(path: pathlib.Path) -> list[dict]:
    """All records of a results file; ResultsError naming file and line on a bad one."""
    records = []
    path = pathlib.Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise ResultsError(f"{path}: cannot read: {exc}") from exc
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ResultsError(f"{path}:{number}: not a JSON record ({exc.msg})") from exc
        if not isinstance(record, dict) or "kind" not in record:
            raise ResultsError(f"{path}:{number}: not a harness record (no 'kind')")
        if record.get("schema") not in READABLE_SCHEMAS:
            raise ResultsError(
                f"{path}:{number}: schema {record.get('schema')!r}, this harness reads {READABLE_SCHEMAS}"
            )
        record = upgraded(record)
        if record["kind"] == "case" and record.get("outcome") not in OUTCOMES:  # harness.outcomes
            raise ResultsError(f"{path}:{number}: unknown outcome {record.get('outcome')!r}")
        records.append(record)
    if not records or records[0]["kind"] != "environment":
        raise ResultsError(f"{path}:1: the file does not start with an environment record")
    return records


def upgraded(record: dict) -> dict:
    """A record of an older schema in today's form. Schema 1 listed a case's references in
    `upstream`, the matched one first for `known` and `limitation`; which declaration a `fixed`
    met, and their version ranges, it did not keep."""
    if record.get("schema") != 1 or record.get("kind") != "case":
        return record
    record = dict(record)
    refs = record.pop("upstream", None) or []
    matched = record["outcome"] in ("known", "limitation", "fixed") and refs
    record["reference"] = refs[0] if matched else None
    record["declared"] = [{"ref": ref} for ref in dict.fromkeys(refs)]
    return record


def find_case(path: pathlib.Path, case_id: str) -> tuple[dict | None, dict | None]:
    """(environment record, last record of `case_id`) of a results file that may be damaged:
    a line that does not parse is passed over, so a run killed mid-write still answers."""
    environment = record = None
    try:
        lines = pathlib.Path(path).read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return None, None
    for line in lines:
        try:
            data = json.loads(line)
        except ValueError:
            continue
        if not isinstance(data, dict):
            continue
        if data.get("kind") == "environment":
            environment = data
        elif data.get("kind") == "case" and data.get("case") == case_id:
            record = data
    return environment, record


def write_atomically(path: pathlib.Path, text: str) -> None:
    """`text` as the whole of `path`, or nothing at all: a reader never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # as an ordinary new file: mkstemp's are private
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
