"""What a case's marks and the session's options say of its attempts: its time limit (and the
watchdog's behind it), how often a failing case runs again, whether its skip marks skip it."""

from __future__ import annotations


def time_limit(item) -> float | None:
    """The case's limit as pytest-timeout applies it: its `timeout` marker, else `--timeout`
    (or the ini value). None or 0: no limit."""
    marker = item.get_closest_marker("timeout")
    if marker is not None:
        value = marker.args[0] if marker.args else marker.kwargs.get("timeout")
    else:
        value = item.config.getoption("timeout", None)
        if value is None:
            try:
                value = item.config.getini("timeout")
            except ValueError:  # pytest-timeout not loaded
                value = None
    try:
        return float(value) or None
    except (TypeError, ValueError):
        return None


def backstop_after(limit: float) -> float:
    """When the process is ended if the case is still running: pytest-timeout's own thread
    needs the GIL, so a hang that holds it (a native call) is ended by faulthandler's
    C-level watchdog instead, a little later."""
    return limit + 10 + 0.1 * limit


def skipped_by_marks(item) -> bool:
    """Whether the case's skip and skipif marks skip it: pytest then skips it before any fixture or
    code of the case runs (its skipping plugin decides first, in setup)."""
    from _pytest.skipping import evaluate_skip_marks

    try:
        return evaluate_skip_marks(item) is not None
    except Exception:  # a condition that raises: the attempt meets it again and records it
        return False


def rerun_count(item, default: int) -> int:
    """How often a failing case runs again: pytest-rerunfailures' `flaky(reruns=N)` marker where
    a case has one, else the session's setting."""
    marker = item.get_closest_marker("flaky")
    if marker is None:
        return default
    return int(marker.kwargs.get("reruns", marker.args[0] if marker.args else 1))
