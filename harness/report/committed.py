"""The table as last committed: what a report compares with by default, so that its page answers
"what changed since the last run" without being told where that run is.

The last committed table is the newest commit whose results files (the *.jsonl directly in the
results directory) differ from the working copy's: right after a measurement that is HEAD's, and
once the new table is committed, the one before it. Read from git's objects, never from the
working tree, into a temporary directory the caller owns.
"""

from __future__ import annotations

import dataclasses
import pathlib
import subprocess

from harness.core import paths

COMMITS_LOOKED_AT = 200


@dataclasses.dataclass(frozen=True)
class CommittedTable:
    commit: str
    date: str  # the commit's, ISO 8601
    subject: str
    directory: pathlib.Path  # its results files, extracted

    def label(self) -> str:
        return f"the table committed at {self.commit[:12]} ({self.date[:10]})"

    def as_dict(self) -> dict:
        return {"commit": self.commit, "date": self.date, "subject": self.subject, "label": self.label()}


def git_output(cwd: pathlib.Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True).stdout


def listed_results(cwd: pathlib.Path, commit: str, where: str) -> dict[str, str]:
    """name -> blob of the results files directly in `where` at `commit`."""
    found = {}
    for line in git_output(cwd, "ls-tree", commit, "--", f"{where}/").splitlines():
        meta, _, path = line.partition("\t")
        name = pathlib.PurePosixPath(path).name
        if meta.split()[1] == "blob" and name.endswith(paths.RESULTS_SUFFIX):
            found[name] = meta.split()[2]
    return found


def last_committed(directory: pathlib.Path, into: pathlib.Path) -> CommittedTable | str:
    """The last committed table of `directory`, its files written into `into`; or why there is none
    (not a git checkout, never committed, git missing), one line."""
    directory = pathlib.Path(directory).resolve()
    try:
        top = pathlib.Path(git_output(directory, "rev-parse", "--show-toplevel").strip())
        where = directory.relative_to(top).as_posix()
        files = sorted(paths.results_files(directory))
        hashed = git_output(directory, "hash-object", "--", *map(str, files)).split() if files else []
        now = {path.name: blob for path, blob in zip(files, hashed, strict=True)}  # one hash per file
        log = git_output(top, "log", f"-n{COMMITS_LOOKED_AT}", "--format=%H%x09%cI%x09%s", "--",
                         f"{where}/").splitlines()
        found: str | None = None
        then: dict[str, str] = {}  # the found commit's files: set with `found`
        for entry in log:
            listed = listed_results(top, entry.split("\t", 1)[0], where)
            if found is None and listed and listed != now:
                found, then = entry, listed
            elif found is not None and listed == then:
                found = entry  # the same table, committed earlier: name the commit that committed it
            elif found is not None:
                break
        if found is not None:
            commit, date, subject = found.split("\t", 2)
            into.mkdir(parents=True, exist_ok=True)
            for name, blob in then.items():
                (into / name).write_bytes(subprocess.run(["git", "cat-file", "blob", blob], cwd=top,
                                                         capture_output=True, check=True).stdout)
            return CommittedTable(commit, date, subject, into)
    except FileNotFoundError:
        return "git is not installed"
    except subprocess.CalledProcessError as exc:
        said = (exc.stderr or "").strip().splitlines()
        return f"{directory}: git could not say ({said[-1] if said else exc})"
    except ValueError:
        return f"{directory} is outside its git checkout"
    return f"no earlier committed table of {directory} differs from it (in the last {COMMITS_LOOKED_AT} commits)"
