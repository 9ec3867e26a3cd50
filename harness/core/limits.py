"""The limits a case or a script runs under, defined once for sessions (harness.plugin.runner) and
the tools that run scripts (harness.tools.scriptrun): its data memory (RLIMIT_DATA), its time, and
how often a failing case runs again."""

from __future__ import annotations

import os
import resource

from harness.core.errors import BadInput

MEMORY_LIMIT_ENV = "HARNESS_MEMORY_LIMIT"
DEFAULT_MEMORY_LIMIT = "75%"  # of the machine's memory, shared by the processes that run cases
DEFAULT_TIME_LIMIT = 600  # seconds: a case (matrix.toml's case_timeout unless a row says), a script
CASE_TIMEOUT_ENV = "HARNESS_CASE_TIMEOUT"  # seconds a session's case may run, in place of its row's case_timeout
RERUNS_ENV = "HARNESS_RERUNS"
DEFAULT_RERUNS = 1
SIZE_UNITS = {"K": 2 ** 10, "M": 2 ** 20, "G": 2 ** 30, "T": 2 ** 40}


def memory_limit(spec: str | None = None) -> str:
    """The memory limit asked for: `spec`, else $HARNESS_MEMORY_LIMIT, else DEFAULT_MEMORY_LIMIT."""
    return spec if spec is not None else os.environ.get(MEMORY_LIMIT_ENV, DEFAULT_MEMORY_LIMIT)


def machine_memory_gib() -> float:
    """This machine's memory, in GiB."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30


def memory_limit_bytes(spec: str, workers: int = 1) -> int | None:
    """`N%` of this machine's memory shared by `workers` processes, or a size per process (`8G`,
    `512M`, a number of bytes); None for `0` (no limit). BadInput for anything else."""
    text = str(spec).strip().upper()
    if text in ("", "0", "NONE"):
        return None
    try:
        if text.endswith("%"):
            return int(machine_memory_gib() * 2**30 * float(text[:-1]) / 100 / max(workers, 1))
        if text[-1] in SIZE_UNITS:
            return int(float(text[:-1]) * SIZE_UNITS[text[-1]])
        return int(text)
    except ValueError:
        raise BadInput(f"memory limit {spec!r}: expected N% of this machine's memory, a size such as 8G, "
                       "or 0 for none") from None


def limit_memory(limit: int | None) -> tuple[int, int] | None:
    """Set this process's data-memory limit (never above the hard limit); returns the limits it
    replaced, to put back, or None when `limit` is None."""
    if limit is None:
        return None
    soft, hard = resource.getrlimit(resource.RLIMIT_DATA)
    resource.setrlimit(resource.RLIMIT_DATA, (limit if hard == resource.RLIM_INFINITY else min(limit, hard), hard))
    return soft, hard


def case_timeout(row_default: int) -> int:
    """Seconds a session's case may run: $HARNESS_CASE_TIMEOUT where set (a GPU machine lent for minutes
    cannot give one hung case ten), else the row's `case_timeout`. Part of the reuse key, as the row's is."""
    text = os.environ.get(CASE_TIMEOUT_ENV, "").strip()
    if not text:
        return row_default
    if not text.isdigit() or int(text) < 1:
        raise BadInput(f"${CASE_TIMEOUT_ENV} is {text!r}: a number of seconds, 1 or more")
    return int(text)


def case_reruns() -> int:
    """How often a failing case runs again unless asked otherwise: $HARNESS_RERUNS, else 1."""
    text = os.environ.get(RERUNS_ENV, str(DEFAULT_RERUNS))
    try:
        return int(text)
    except ValueError:
        raise BadInput(f"{RERUNS_ENV}={text!r}: expected a number of reruns") from None


def restore_memory_limit(previous: tuple[int, int] | None) -> None:
    """Put back the limits limit_memory() replaced (None: it set none)."""
    if previous is not None:
        resource.setrlimit(resource.RLIMIT_DATA, previous)
