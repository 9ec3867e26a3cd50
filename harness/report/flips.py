"""Cells that flip: learned from the table's own history, never from one run.

A cell flips when its outcome changes while nothing it runs changed. One run cannot see that: a case
that failed on both of its attempts looks like any failure. But git keeps every measurement of every
results file, and each environment record keeps the digest of each project source it ran with
(`reuse_sources`) and the exact installs (`packages`). So, per session and case, the measurements of
its history are grouped by what the case runs:

- its installs (the environment's `packages`) and interpreter (`python`),
- the digests of the case's own code: every source its family reaches by imports
  (harness.core.sources.family_sources, read from the code at hand) outside the harness package.

The harness's own modules are left out on purpose: nearly every measurement of the table was made
because they changed (a new key, a new record field), so with them in, no two measurements would ever
be comparable. Instead a change alone is not called a flip: a harness change that moved an outcome
once (and moved it for good) is a change. A cell flips when, with the same code and installs, its
outcome came back after changing (pass, fail, pass), or a run recorded it `flaky` (its attempts
disagreed). Measurements carried over (`reused_from`) are copies, not measurements; a run without its
end record is passed over.

A measurement speaks for the cell now only when it ran the code and installs the cell has now: the same
packages and interpreter, the family's case file recorded by both, and every source both recorded alike
(a source an older record did not keep tells nothing; only facts both give count, as for machines in
harness.report.baseline). Once the case or its installs change, its past no longer speaks for it.

Reading the history costs parsing every committed version of every results file (hundreds, 100,000
records), so what flips need of each version is kept in the git directory (`harness-flips/`), by the
blob's id: a version's content never changes under its id, so the summary of it cannot go stale.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import pathlib
import subprocess
import tempfile
from collections.abc import Sequence

from harness.core import paths, sources
from harness.report.committed import git_output
from harness.report.results import ReportError, SessionResult, load_session

COMMITS_READ = 500  # of the results folder's history: every measurement the table has had so far
HARNESS = "harness/"
SUMMARIES = "harness-flips"  # in the git directory: one summary of each results file version read
SUMMARY_SCHEMA = 1


@dataclasses.dataclass(frozen=True)
class Flip:
    session: str
    case: str
    outcomes: tuple[str, ...]  # the outcomes its measurements gave, in time order, each repeat taken out
    measurements: int

    def text(self) -> str:
        return (f"flips: {' → '.join(self.outcomes)} over {self.measurements} measurements with the same case "
                "code and installs")

    def as_dict(self) -> dict:
        return {"session": self.session, "case": self.case, "outcomes": list(self.outcomes),
                "measurements": self.measurements, "text": self.text()}


@dataclasses.dataclass
class Learned:
    """The flips of a table, and how much history they were learned from."""
    flips: dict[tuple[str, str], Flip]  # (session, case) -> its flip
    measurements: int = 0  # the distinct runs read of the table's sessions, the working copy's included
    commits: int = 0  # commits of the results folder read
    unavailable: str | None = None  # why no history was read (not a git checkout, ...)

    def of(self, session: str, case: str) -> Flip | None:
        return self.flips.get((session, case))

    def as_dict(self) -> dict:
        return {"measurements": self.measurements, "commits": self.commits, "unavailable": self.unavailable,
                "cells": [flip.as_dict() for _, flip in sorted(self.flips.items())]}


@dataclasses.dataclass(frozen=True)
class Measurement:
    """What flips need of one run of a session: what it ran with, and the cells it measured itself."""
    session: str
    started: str
    packages: tuple[str, ...]
    python: str | None
    sources: dict[str, str]  # the environment's reuse_sources
    cells: dict[str, list]  # case -> [family, outcome], nothing carried over

    @classmethod
    def of(cls, run: SessionResult) -> "Measurement | None":
        """None for a run that stopped early: a run that did not finish is no source of truth."""
        if not run.complete:
            return None
        environment = run.environment
        return cls(run.name, str(environment.get("started")), tuple(environment.get("packages") or ()),
                   environment.get("python"), dict(environment.get("reuse_sources") or {}),
                   {case: [record.get("family"), record["outcome"]] for case, record in run.cases.items()
                    if not record.get("reused_from")})

    def ran_like(self, other: "Measurement", family: str | None) -> bool:
        """Both ran the family's case code with the same installs and interpreter (see above)."""
        code = _case_code().get(family) if family is not None else None
        if not code or not self.packages or self.packages != other.packages or self.python != other.python:
            return False
        both = [path for path in code if path in self.sources and path in other.sources]
        return _case_file(family) in both and all(self.sources[path] == other.sources[path] for path in both)


@functools.lru_cache(maxsize=1)
def _case_code() -> dict[str, tuple[str, ...]]:
    """Each family's sources outside the harness: what its cases themselves run."""
    return {family: tuple(sorted(p for p in reached if not p.startswith(HARNESS)))
            for family, reached in sources.family_sources().items()}


@functools.lru_cache(maxsize=None)
def _case_file(family: str | None) -> str | None:
    path = sources.family_files().get(family) if family is not None else None
    return path.relative_to(paths.ROOT).as_posix() if path else None


def changes(outcomes: list[str]) -> list[str]:
    """The outcomes with each repeat of the one before taken out: pass, fail, fail, pass -> pass, fail, pass."""
    return [outcome for index, outcome in enumerate(outcomes) if index == 0 or outcome != outcomes[index - 1]]


def came_back(outcomes: list[str]) -> bool:
    """An outcome seen again after another one, or attempts that disagreed in one run."""
    changed = changes(outcomes)
    return "flaky" in outcomes or len(set(changed)) < len(changed)


def _versions(top: pathlib.Path, where: str, commits: int) -> tuple[dict[str, str], int]:
    """blob -> file name of every version of the results files directly in `where` that the last
    `commits` commits touching them wrote; and how many commits that was (a commit of the report's own
    files beside them is none: it measured nothing, and counting it would change report.json on every
    regeneration)."""
    log = git_output(top, "log", f"-n{commits}", "--format=commit %H", "--raw", "--no-abbrev", "--no-renames",
                     "--", f":(glob){where}/*{paths.RESULTS_SUFFIX}")
    found: dict[str, str] = {}
    read = 0
    for line in log.splitlines():
        if line.startswith("commit "):
            read += 1
        elif line.startswith(":"):
            meta, _, path = line.partition("\t")
            blob, name = meta.split()[3], pathlib.PurePosixPath(path)
            if name.parent.as_posix() == where and name.suffix == paths.RESULTS_SUFFIX and set(blob) != {"0"}:
                found.setdefault(blob, name.name)
    return found, read


def _blobs(top: pathlib.Path, wanted: list[str]) -> dict[str, bytes]:
    """The contents of `wanted` blobs, read by one git process."""
    out = subprocess.run(["git", "cat-file", "--batch"], cwd=top, input="".join(f"{b}\n" for b in wanted).encode(),
                         capture_output=True, check=True).stdout
    found, at = {}, 0
    for blob in wanted:
        header_end = out.index(b"\n", at)
        size = int(out[at:header_end].split()[2])
        found[blob] = out[header_end + 1:header_end + 1 + size]
        at = header_end + 1 + size + 1
    return found


def _summaries(top: pathlib.Path, versions: dict[str, str]) -> list[Measurement]:
    """Each version's Measurement, from its kept summary or read now (and kept)."""
    store = pathlib.Path(git_output(top, "rev-parse", "--absolute-git-dir").strip()) / SUMMARIES
    found, missing = [], []
    for blob in versions:
        try:
            kept = json.loads((store / f"{blob}.json").read_text())
            if kept["schema"] == SUMMARY_SCHEMA:
                found.append(Measurement(**{**kept["measurement"], "packages": tuple(kept["measurement"]["packages"])})
                             if kept["measurement"] else None)
                continue
        except (OSError, ValueError, KeyError, TypeError):
            pass
        missing.append(blob)
    store.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="harness-history-") as scratch:
        for blob, content in _blobs(top, missing).items():
            path = pathlib.Path(scratch) / blob / versions[blob]
            path.parent.mkdir()
            path.write_bytes(content)
            try:
                measurement = Measurement.of(load_session(path))
            except ReportError:  # a version that no longer reads tells nothing
                measurement = None
            found.append(measurement)
            kept = {"schema": SUMMARY_SCHEMA, "measurement": dataclasses.asdict(measurement) if measurement else None}
            staged = store / f".{blob}.json.tmp"
            staged.write_text(json.dumps(kept))
            staged.replace(store / f"{blob}.json")
    return [m for m in found if m is not None]


def learn(directory: pathlib.Path, current: list[SessionResult], commits: int = COMMITS_READ,
          nights: Sequence[SessionResult] = ()) -> Learned:
    """The flips of the sessions in `current` (read from `directory`, the working copy), from
    `directory`'s git history, `nights` (earlier runs outside git: the nightly's night before) and the
    current sessions' own measurements."""
    directory = pathlib.Path(directory).resolve()
    try:
        top = pathlib.Path(git_output(directory, "rev-parse", "--show-toplevel").strip())
        versions, read = _versions(top, directory.relative_to(top).as_posix(), commits)
        past = _summaries(top, versions)
    except FileNotFoundError:
        return Learned({}, unavailable="git is not installed")
    except subprocess.CalledProcessError as exc:
        # text from git_output, bytes from _blobs' `git cat-file`
        stderr = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else exc.stderr or ""
        said = stderr.strip().splitlines()
        # no path in what is said: report.json is the same wherever its results were read from
        return Learned({}, unavailable=f"git could not say ({said[-1] if said else exc})")
    except ValueError:
        return Learned({}, unavailable="the results are outside their git checkout")
    runs: dict[tuple[str, str], Measurement] = {}  # one run committed in several versions is one measurement
    for measurement in [*past, *filter(None, map(Measurement.of, [*nights, *current]))]:
        runs.setdefault((measurement.session, measurement.started), measurement)
    flips = {}
    for session in current:
        now = Measurement(session.name, "", tuple(session.environment.get("packages") or ()),
                          session.environment.get("python"), dict(session.environment.get("reuse_sources") or {}), {})
        mine = sorted((m for (name, _), m in runs.items() if name == session.name), key=lambda m: m.started)
        alike: dict[str | None, list[Measurement]] = {}  # per family: the runs that ran its code as now
        for case, record in session.cases.items():
            family = record.get("family")
            if family not in alike:
                alike[family] = [m for m in mine if m.ran_like(now, family)]
            history = [m.cells[case][1] for m in alike[family] if case in m.cells]
            if came_back(history):
                flips[(session.name, case)] = Flip(session.name, case, tuple(changes(history)), len(history))
    names = {s.name for s in current}
    return Learned(flips, sum(1 for name, _ in runs if name in names), read)


def learn_all(directories, current: list[SessionResult], history=(), nights: Sequence[SessionResult] = ()) -> Learned:
    """learn() for each results directory of a report, with the sessions read from it. A directory
    outside git (the nightly's downloaded artifacts) learns from the first of `history` (the committed
    table the report is held to, in a checkout with its history) that git can read, and from `nights`
    (the night before's sessions: its artifacts, kept 30 days), which git does not hold."""
    found = Learned({})
    for directory in map(pathlib.Path, directories):
        mine = [s for s in current if s.path.parent.resolve() == directory.resolve()]
        learned = learn(directory, mine, nights=nights)
        for table in history:
            if not learned.unavailable:
                break
            learned = learn(pathlib.Path(table), mine, nights=nights)
        found.flips.update(learned.flips)
        found.measurements += learned.measurements
        found.commits += learned.commits
        found.unavailable = found.unavailable or learned.unavailable
    return found
