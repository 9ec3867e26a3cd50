"""The record schema: every reader and writer of results goes through this module (the file a
session writes them into is harness.core.resultsfile's).

A results file (harness.core.paths.results_path) holds one JSON record per line, appended and
flushed as each case finishes: an `environment` record first (with the session's `identity`, from
harness.core.matrix), a `case` record per case, an `end` record when the run finished. Schema 2 is
written; schema 1 files (before `reference`/`declared` and `identity`) are read through `upgrade`,
and nothing reads schema 1's fields past it. A case record is made of what the phases of its run
reported (PhaseData), carried on pytest's reports from the process that ran it.
"""

from __future__ import annotations

import json
import os
import pathlib
import sys
import tempfile
from typing import TYPE_CHECKING, Optional, TypedDict, cast

from harness.core import matrix, paths
from harness.core.caseid import CaseIdentity
from harness.core.errors import BadInput
from harness.core.outcomes import OUTCOMES, REFERENCED

if TYPE_CHECKING:  # typing.Unpack is Python 3.11's, and the lint checks for 3.10: the type only
    from typing_extensions import Unpack

SCHEMA_VERSION = 2
READABLE_SCHEMAS = (1, 2)


class Declaration(TypedDict, total=False):
    kind: str  # "known" or "limitation"
    ref: str
    raises: list
    match: Optional[str]
    since: Optional[str]
    until: Optional[str]


class EnvironmentRecord(TypedDict, total=False):
    """What harness.plugin.environment measures of a session, and what its recorder adds."""
    schema: int
    kind: str  # "environment"
    session: str
    identity: matrix.Identity
    started: str
    torch: str
    cuda: Optional[str]
    cudnn: Optional[int]
    triton: Optional[str]
    lightning: Optional[str]
    pytorch_lightning: Optional[str]
    python: str
    python_executable: str
    gpu: Optional[str]
    gpu_error: str  # why there is no `gpu` where one is visible but CUDA fails, if it does
    gpu_driver: Optional[str]
    cpu: str
    os: str
    git_commit: Optional[str]
    harness_session: Optional[str]  # $HARNESS_SESSION: the session it records as (nox sets it)
    install_environment: dict[str, str]  # harness.core.installs.INSTALL_VARIABLES that were set
    torch_wheel: Optional[dict]  # where its torch came from (harness.core.venvs.torch_wheel)
    packages: list[str]  # name==version of every distribution installed
    compile_caches: dict
    collect_env: str  # torch.utils.collect_env's report, or why there is none
    workers: dict  # {"count": xdist workers that ran the cases (0: none), "basis": why that many}
    cuda_guard: dict  # what the CUDA guard of each process that ran cases found (harness.plugin.cudaguard)
    reuse_keys: dict  # family -> the digest of what its cases depend on (harness.plugin.reuse)
    reuse_sources: dict  # the project's files those keys hold, path -> digest: what changed, when one did
    reused_from: dict


class PhaseExtras(TypedDict, total=False):
    """What a phase may report beside its outcome (phase_data's other keywords), and its case record
    carries on (OPTIONAL_CASE_KEYS, in this order: a record's keys keep it)."""
    attempts: list
    leaked: list
    output_tail: str
    workdir: str
    log: str  # the worker log that holds a text the record cut
    log_cut: str  # how much of what the case printed its log no longer holds (harness.plugin.workerlog)


class CaseRecord(PhaseExtras, total=False):
    schema: int
    kind: str  # "case"
    case: str  # family/variant[params]: harness.core.caseid
    family: str
    params: dict
    outcome: str  # a name of harness.core.outcomes.OUTCOMES
    exc_type: Optional[str]
    message: Optional[str]
    reference: Optional[str]  # the one declaration the run met (known, limitation) or no longer meets (fixed)
    declared: list  # [Declaration]: what applies to this torch; for a `fail`, what did not match
    metrics: dict
    duration: float
    nodeid: str
    location: Optional[dict]  # {"file", "line"}: the test function in cases/ (JUnit)
    reused_from: dict


class EndRecord(TypedDict, total=False):
    schema: int
    kind: str  # "end"
    exitstatus: int
    counts: dict
    reused: int
    seconds: float
    foreign: dict  # what the session found in its results file that it did not write (resultsfile), if anything
    interrupted: str  # why the run stopped before its cases ended (Ctrl-C, a stop), if it did
    missing: int  # cases the run collected and recorded nothing of
    missing_cases: list  # the first MISSING_NAMED of them, by node id
    cuda_refused: list  # what the CUDA guard refused after the environment record was written


CASE_KEYS = ("case", "family", "params", "outcome", "exc_type", "message", "reference", "declared")
# A case record's keys beyond CASE_KEYS, when set: what its phase reported, and what a later run that
# carried it over added (harness.plugin.reuse).
OPTIONAL_CASE_KEYS = (*PhaseExtras.__annotations__, "reused_from")
PHASE_PROPERTY = "harness"  # the name of a phase's data among the user_properties of pytest's report


class PhaseData(CaseIdentity, PhaseExtras, total=False):
    """What one phase of a case reported (`setup`, `call`, `teardown`, or `crash` for a process that
    died), carried on pytest's report to the process that writes the record: the case record is the
    most severe phase's fields (case_record), with the figures of every phase."""
    phase: str
    outcome: str
    exc_type: Optional[str]
    message: Optional[str]
    reference: Optional[str]
    declared: list  # [Declaration]
    metrics: dict


def phase_data(identity: CaseIdentity, phase: str, outcome: str, exc_type: str | None = None,
               message: str | None = None, reference: str | None = None, declared=(), metrics=None,
               **more: Unpack[PhaseExtras]) -> PhaseData:
    """A phase's data: the one builder, for the runner, a forked case's process and a dead worker."""
    return PhaseData(**identity, phase=phase, outcome=outcome, exc_type=exc_type, message=message,
                     reference=reference, declared=list(declared), metrics=dict(metrics or {}), **more)


def phase_of(report) -> PhaseData | None:
    """The phase data a pytest report carries (the last put there); None for a report of no case."""
    return next((value for key, value in reversed(report.user_properties) if key == PHASE_PROPERTY), None)


def attach_phase(report, data: PhaseData) -> None:
    report.user_properties.append((PHASE_PROPERTY, data))

# Size bounds of a record. A case may raise a 10 MB message or print 17 MB; stored whole it makes a
# results line of 30 MB that every reader (report, JUnit, reuse) chokes on. As pytest and PyTorch's
# CI do, a long text keeps its head and its tail and says how much was cut; the whole of it stays in
# the worker log the record names (`log`). Each line is bounded as it is written (resultsfile.bounded_line).
TEXT_LIMITS = {"message": 2000, "output_tail": 4000, "exc_type": 300,  # characters
               "collect_env": 20_000}  # the environment record's torch.utils.collect_env report
OTHER_TEXT_LIMIT = 1000  # any other string of a record
UNCLIPPED = ("case", "nodeid", "family", "session")  # names a reader joins on: cut only past NAME_LIMIT
NAME_LIMIT = 8000
PLACES = ("workdir", "log")  # where this run left something: this machine's paths, kept as they are
LIST_LIMIT = 50  # items of a list (attempts, leaked): the first ones and the last
LIST_LIMITS = {"packages": 2000}  # the environment's installed packages
DICT_LIMIT = 200  # entries of a mapping (metrics, params)
KEY_LIMIT = 200  # characters of an entry's name
LINE_LIMIT = 64 * 1024  # bytes of one results line, whatever the case did


def clip(text: str, limit: int) -> str:
    """`text` within `limit` characters: its head and its tail, and how much was cut between."""
    if len(text) <= limit:
        return text
    keep = max(limit - 60, 2)
    head, tail = text[:keep // 3], text[len(text) - (keep - keep // 3):]
    return f"{head}\n[... {len(text) - len(head) - len(tail):,} characters cut ...]\n{tail}"


def text_limit(key: str | None) -> int:
    """How many characters a record keeps of the text field `key` (None: a text that is no field's),
    before any tightening."""
    return OTHER_TEXT_LIMIT if key is None else TEXT_LIMITS.get(key, OTHER_TEXT_LIMIT)


def identity(session: str, torch: str | None = None, gpu: bool = False) -> matrix.Identity:
    """The session's identity from the matrix (harness.core.matrix.Session.identity); a session
    outside the matrix (a local run) is its own plain row on the device it ran on."""
    try:
        return matrix.find(session).identity
    except matrix.MatrixError:
        device = "cuda" if gpu else "cpu"
        return matrix.Identity(session=session, device=device, line=device, row=torch or "?", label=None,
                               plain=session, lightning_of=None)


MISSING_NAMED = 20
STOPPED_EXIT = (2, 3, 4)  # pytest's interrupted, internal error, usage error: the cases did not all run


def run_complete(end: dict | None) -> bool:
    """Whether the run an end record closes recorded every case it collected: it was not interrupted,
    nothing it collected is missing (an end record of an older schema says neither: its exit status)."""
    return (end is not None and end.get("kind") == "end" and not end.get("interrupted") and not end.get("missing")
            and end.get("exitstatus") not in STOPPED_EXIT)


def end_record(exitstatus: int, counts: dict, reused: int, seconds: float | None = None) -> EndRecord:
    """The record that closes a finished run: pytest's exit status, the cases by outcome, how many
    were carried over from an earlier run, and (for its timings file, harness.core.timings) its seconds."""
    record = EndRecord(schema=SCHEMA_VERSION, kind="end", exitstatus=exitstatus, counts=counts, reused=reused)
    if seconds is not None:
        record["seconds"] = seconds
    return record


def case_record(data: PhaseData, **more) -> CaseRecord:
    """A case record from what a run reported (`data`: the worst phase's)."""
    record = {"kind": "case", **{key: data.get(key) for key in CASE_KEYS}, **more}
    record["declared"] = record["declared"] or []
    record.update({key: data.get(key) for key in OPTIONAL_CASE_KEYS if data.get(key)})
    return cast(CaseRecord, record)  # CASE_KEYS, OPTIONAL_CASE_KEYS and the callers' `more` are its fields


def _from_upstream(outcome: str, refs: list) -> dict:
    """Schema 1's `upstream` (the refs declared for the case, the matched one first) as schema 2's
    fields: the matched reference only where the outcome names one."""
    matched = refs[0] if refs and outcome in REFERENCED else None
    return {"reference": matched, "declared": [{"ref": ref} for ref in dict.fromkeys(refs)]}


def upgrade(record: dict) -> dict:
    """A record of any readable schema as schema 2: a case's `upstream` as `reference`/`declared`,
    an environment without `identity` given the matrix's."""
    record = {**record, "schema": SCHEMA_VERSION}
    if record["kind"] == "case" and "upstream" in record:
        legacy = _from_upstream(record["outcome"], record.pop("upstream") or [])
        record = {**record, **legacy, **{k: record[k] for k in ("reference", "declared") if k in record}}
    elif record["kind"] == "environment" and "identity" not in record:
        record["identity"] = identity(record.get("session") or "?", record.get("torch"), bool(record.get("gpu")))
    return record


def portable(text: str) -> str:
    """`text` without this machine's paths: the running environment as `<venv>`, the checkout's
    files relative to its root, Python's own installation as `<python>`, the temp dir as `<tmp>`;
    so that records of two machines compare equal."""
    places = {sys.prefix: "<venv>", sys.base_prefix: "<python>",  # outside a venv the two are one: <python>
              tempfile.gettempdir(): "<tmp>", str(paths.ROOT) + os.sep: ""}
    for place in sorted(places, key=len, reverse=True):  # the venv may lie inside the checkout
        text = text.replace(place, places[place])
    return text


class ResultsError(BadInput):
    """A results file cannot be written or read."""


# What each kind of record must hold for a reader to use it (key: its types), and the types of what it may
# hold; a record otherwise is passed over and said, as a line that is no record is.
REQUIRED: dict[str, dict[str, tuple[type, ...]]] = {
    "case": {"case": (str,)}, "end": {"exitstatus": (int,)}, "environment": {}}
TYPED: dict[str, dict[str, tuple[type, ...]]] = {
    "case": {"family": (str,), "params": (dict,), "message": (str, type(None)), "exc_type": (str, type(None)),
             "nodeid": (str,)},
    "end": {"counts": (dict,)}, "environment": {"session": (str,)}}


def _record_of(line: bytes) -> tuple[dict | None, str]:
    """(the record a results line holds, or None and why it is not one)."""
    try:
        record = json.loads(line.decode("utf-8"))
    except UnicodeDecodeError:
        return None, "not UTF-8 text"
    except json.JSONDecodeError as exc:
        return None, f"not a JSON record ({exc.msg})"
    if not isinstance(record, dict) or "kind" not in record:
        return None, "not a harness record (no 'kind')"
    if record.get("schema") not in READABLE_SCHEMAS:
        return None, (f"schema {record.get('schema')!r}, this harness reads "
                      f"{', '.join(map(str, READABLE_SCHEMAS))}")
    if record["kind"] == "case" and record.get("outcome") not in OUTCOMES:
        return None, f"unknown outcome {record.get('outcome')!r}"
    for key in REQUIRED.get(record["kind"], {}):
        if key not in record:
            return None, f"a {record['kind']} record without {key!r}"
    for key, kinds in {**REQUIRED.get(record["kind"], {}), **TYPED.get(record["kind"], {})}.items():
        if key in record and not isinstance(record[key], kinds):
            return None, f"a {record['kind']} record whose {key!r} is {type(record[key]).__name__}"
    return upgrade(record), ""


def warn(text: str) -> None:
    print(f"harness: warning: {text}", file=sys.stderr)


def read(path: pathlib.Path, passed_over=warn) -> list[dict]:
    """All records of a results file. A file whose first line is not an environment record is not a
    results file: ResultsError naming file and line. In one that is, a line that is not a record is
    something else's (a process a case started may write into the file, even after the session
    ended): it is passed over and said, `passed_over(text)` (default: a warning on stderr), never fatal."""
    path = pathlib.Path(path)
    try:
        lines = path.read_bytes().split(b"\n")
    except OSError as exc:
        raise ResultsError(f"{path}: cannot read: {exc}") from exc
    found: list[dict] = []
    foreign: list[str] = []
    seen: dict[str, tuple[int, dict]] = {}  # case id -> (its line, its first record)
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        record, why = _record_of(line)
        if not found and record is None:
            raise ResultsError(f"{path}:{number}: {why}")
        if not found and record is not None and record["kind"] != "environment":
            raise ResultsError(f"{path}:{number}: the file does not start with an environment record")
        if record is not None and record["kind"] == "case" and record["case"] in seen:
            first_line, first = seen[record["case"]]
            why = (f"{record['case']} recorded again ({first['outcome']} at line {first_line}, then "
                   f"{record['outcome']}): the first record is kept")
            record = None
        if record is None:
            foreign.append(f"line {number}: {why}")
        else:
            found.append(record)
            if record["kind"] == "case":
                seen[record["case"]] = (number, record)
    if not found:
        raise ResultsError(f"{path}:1: the file does not start with an environment record")
    if foreign:
        passed_over(f"{path}: {len(foreign)} line(s) that are not the harness's records passed over "
                    f"({'; '.join(foreign[:3])}{'; ...' if len(foreign) > 3 else ''})")
    return found


def salvaged(path: pathlib.Path) -> list[dict]:
    """The records of a results file that may be damaged, in order: a line that is not a record this
    harness reads is passed over, so a run killed mid-write still answers. OSError is the caller's."""
    lines = pathlib.Path(path).read_bytes().split(b"\n")
    return [record for record, _ in map(_record_of, filter(bytes.strip, lines)) if record is not None]


def find_case(path: pathlib.Path, case_id: str) -> tuple[dict | None, dict | None]:
    """(the last environment record, the last record of `case_id`) of a results file that may be
    damaged (salvaged); (None, None) where it cannot be read."""
    try:
        found = salvaged(path)
    except OSError:
        return None, None
    environments = [r for r in found if r["kind"] == "environment"]
    cases = [r for r in found if r["kind"] == "case" and r["case"] == case_id]
    return (environments[-1] if environments else None), (cases[-1] if cases else None)


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
