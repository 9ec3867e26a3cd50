"""Where the project's files are, defined once: the checkout's root and what lies in it, and where
results go (`$HARNESS_RESULTS_DIR`, else `results/`).

The harness runs from its checkout (an editable install, or a nox session's working directory), so
every path of the project is built from ROOT here."""

from __future__ import annotations

import os
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "harness"
CASES = ROOT / "cases"
CASEKIT = PACKAGE / "plugin" / "casekit.py"  # carried as it is into every reproduction script
RESULTS_ENV = "HARNESS_RESULTS_DIR"
RESULTS_SUFFIX = ".jsonl"


def results_dir(root: str | os.PathLike = ROOT) -> pathlib.Path:
    """The results directory: `$HARNESS_RESULTS_DIR`, else `root`/results (`root`: the checkout, or
    pytest's rootdir for a plain `pytest cases/`)."""
    return pathlib.Path(os.environ.get(RESULTS_ENV) or pathlib.Path(root) / "results")


# What the results directory holds besides the table (the sessions' results files), each folder named here
# only: an earlier run's files kept when a run replaces them; each run's times (harness.core.timings);
# the logs its records point to (logs_dir); what `repro`, `reduce`, `sweep` and `explore` write.
PREVIOUS, TIMINGS, LOGS, REPRO, REDUCE, SWEEP, EXPLORE = ("previous", "timings", "logs", "repro", "reduce", "sweep",
                                                          "explore")


def results_subdir(name: str, directory: str | os.PathLike | None = None) -> pathlib.Path:
    """A folder of the results directory (`directory`, default the results directory): one of the
    names above."""
    return pathlib.Path(directory if directory is not None else results_dir()) / name


def results_path(session: str, directory: str | os.PathLike | None = None) -> pathlib.Path:
    """Where a session's results file is: in `directory`, default the results directory."""
    return pathlib.Path(directory if directory is not None else results_dir()) / f"{session}{RESULTS_SUFFIX}"


def logs_dir(session: str, run: str, directory: str | os.PathLike | None = None) -> pathlib.Path:
    """Where one run of a session keeps the logs its records point to (`log`): beside its results, one
    folder a run, so that an earlier run's records (moved to previous/) still point to logs that exist.
    They live as long as the results do (pytest's base temporary directory keeps its last three runs)."""
    return results_subdir(LOGS, directory) / session / run


def results_files(directory: str | os.PathLike) -> list[pathlib.Path]:
    """Every session's results file in `directory`."""
    return sorted(pathlib.Path(directory).glob(f"*{RESULTS_SUFFIX}"))


def default_envdir() -> pathlib.Path:
    """Where nox keeps the session venvs."""
    return ROOT / ".nox"


def relative(path: str | os.PathLike) -> str:
    """`path` from the checkout's root, '/'-separated: the same text in every clone."""
    return pathlib.Path(path).resolve().relative_to(ROOT).as_posix()
