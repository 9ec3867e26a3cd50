"""Each attempt of a case in a process of its own, forked from the warm process that runs cases.

A case's outcome must be what it does where nothing else ran before it, whatever earlier cases
changed (a config flag, a monkeypatched torch function, a `torch.library` op, a module global):
resetting a list of known state cannot promise that, since the next leak is one nobody listed. So
the worker (or pytest's own process) only collects and warms up, and every attempt of a case runs
its whole pytest protocol (setup, call, teardown) in a child forked from it; the child sends its
reports back through a pipe and exits, taking whatever it changed with it.

What makes forking cheap and safe, measured on torch 2.15 (2 cores): the parent warms up with an
inference-only compile (Dynamo, AOTAutograd, inductor's C++ toolchain and vector ISA probe are then
loaded and cached, and a child compiles and runs forward and backward in about 0.35 s instead of
6-7 s cold), with inductor's compile workers off (`compile_threads = 1`: a child forked after the
worker pool started hangs) and without running autograd's engine (a child of a process that ran a
backward refuses to: "Unable to handle autograd's threading in combination with fork-based
multiprocessing"), nor OpenMP regions, nor CUDA (a forked child cannot use a CUDA context it
inherits; each child initialises CUDA itself). Before each fork the parent's objects are frozen
(`gc.freeze()`): a garbage collection in the child then leaves them alone instead of copying every
page they lie on (0.6 s a case otherwise).

A child that dies (a signal, `os._exit`, a time limit) sends no reports: the parent reads what it
printed and builds its record as the controller does for a dead worker (`harness.plugin.workerlog`).
"""

from __future__ import annotations

import gc
import json
import os
import select
import signal
import sys
import tempfile
import time
import traceback

from _pytest.reports import TestReport

from harness.core import caseid, outcomes, records
from harness.core.caseid import case_identity
from harness.plugin import cudaguard, workerlog

# The harness's own references, taken at import, before any case runs: a case that replaces
# json.dumps or os.write (a monkeypatch its teardown never undoes, in the child) cannot hijack the
# channel that carries its own report.
_dumps, _os_write, _os_close, _os_exit = json.dumps, os.write, os.close, os._exit
PROBE_TIMEOUT = 120
LEFTOVER_ROUNDS = 20  # killing a leftover orphans its own children: rounds until none is left
UNSENT = 70  # a child's exit status when it could not send its reports (it sends what failed instead)
CASE_STAGES = ("starting the case's process",)  # before any code of the case ran


class HarnessFault(Exception):
    """A forked child cannot run its case, for a reason of the harness's own (not the case's)."""


def _describe(error: BaseException) -> str:
    line = outcomes.message_line(error)
    return f"{type(error).__name__}: {line}" if line else type(error).__name__


def _write_all(fd: int, data: bytes, quiet: bool = False) -> None:
    """All of `data` into the pipe `fd` (os.write may take part of it), then closed."""
    try:
        view = memoryview(data)
        while view:
            view = view[_os_write(fd, view):]
    except OSError:
        if not quiet:
            raise
    finally:
        try:
            _os_close(fd)
        except OSError:
            pass


def _parse(data: bytes) -> dict | None:
    try:
        sent = json.loads(data)
    except ValueError:
        return None
    return sent if isinstance(sent, dict) else None


def die_with_parent() -> None:
    """PR_SET_PDEATHSIG: a child whose worker is killed must not go on computing."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)
    except (OSError, AttributeError):  # no prctl (not Linux): the parent's own deadline still ends the child
        return


def _flush(stream) -> None:
    """Flush what a stream holds before a fork or an exit; a stream the case closed or whose reader
    is gone (OSError, ValueError) has nothing left to give, and what it held is lost either way."""
    try:
        stream.flush()
    except (OSError, ValueError):
        return


def probe() -> str | None:
    """None when a child forked from this process can run autograd; else why not."""
    if not hasattr(os, "fork"):
        return "this platform has no fork()"
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.close(read)
            import torch

            x = torch.ones(2, requires_grad=True)
            (x * 2).sum().backward()
            code = 0
        except BaseException as exc:
            os.write(write, f"{type(exc).__name__}: {exc}".splitlines()[0].encode())
        finally:
            os._exit(code)
    os.close(write)
    data, _, status = _read_all(read, pid, time.monotonic() + PROBE_TIMEOUT)
    message = data.decode(errors="replace")
    if status == 0:
        return None
    return message or f"a forked child exited with status {status}"


def _read_all(fd: int, pid: int, deadline: float | None) -> tuple[bytes, bool, int]:
    """What the child writes to `fd` until it exits, then its exit status: (data, killed, status);
    past `deadline` the child is killed. The child's end is its exit, never EOF on the pipe: a
    process the case started (a daemon, a double fork) inherits the pipe's write end and may hold it
    open long after the child is gone. Once the child has exited, what it wrote is in the pipe."""
    chunks, killed, status, pipe_open = [], False, None, True
    watch = _exit_watch(pid)
    os.set_blocking(fd, False)
    try:
        while status is None:
            wait = None if deadline is None else max(0.0, deadline - time.monotonic())
            if watch is None:  # no exit descriptor: look again every 50 ms
                wait = 0.05 if wait is None else min(wait, 0.05)
            ready, _, _ = select.select([fd] * pipe_open + ([watch] if watch is not None else []), [], [], wait)
            if fd in ready:
                chunk = _read_some(fd)
                pipe_open = bool(chunk)  # EOF: every writer closed it; the exit is still to come
                chunks.append(chunk)
            status = _exited(pid)
            if status is None and deadline is not None and time.monotonic() >= deadline:
                os.kill(pid, signal.SIGKILL)
                killed, status = True, _wait(pid)
        chunks.append(_read_some(fd, everything=True))
    finally:
        os.close(fd)
        if watch is not None:
            os.close(watch)
    return b"".join(chunks), killed, status


def _exit_watch(pid: int) -> int | None:
    """A descriptor that becomes readable when `pid` exits (Linux 5.3+), or None: then polled."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


def _read_some(fd: int, everything: bool = False) -> bytes:
    """What the pipe holds now (all of it, with `everything`), without waiting for more."""
    chunks = []
    while True:
        try:
            chunk = os.read(fd, 1 << 16)
        except BlockingIOError:
            break
        chunks.append(chunk)
        if not chunk or not everything:
            break
    return b"".join(chunks)


def _exited(pid: int) -> int | None:
    """The child's exit status once it has exited (reaped), else None."""
    done, status = os.waitpid(pid, os.WNOHANG)
    return os.waitstatus_to_exitcode(status) if done else None


def _wait(pid: int) -> int:
    """The child's exit status: its code, or minus the signal that ended it."""
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def become_subreaper() -> bool:
    """PR_SET_CHILD_SUBREAPER: what a case's child leaves running (a daemon, a setsid'd or
    double-forked process) becomes this process's child when its parent exits, so that it can be
    found and ended with its case. False where there is no such call (not Linux)."""
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl(36, 1) == 0
    except (OSError, AttributeError):
        return False


def _children() -> set[int]:
    """This process's children, from /proc (empty where there is none)."""
    me, found = os.getpid(), set()
    for entry in os.scandir("/proc") if os.path.isdir("/proc") else ():
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as handle:
                fields = handle.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == me:
            found.add(int(entry.name))
    return found


def _command(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return handle.read().replace(b"\0", b" ").decode(errors="replace").strip()[:120] or "?"
    except OSError:
        return "?"


def end_leftovers(before: set[int]) -> list[str]:
    """Kill and reap the processes a case left running (this process's children that were not its
    children before the case: they reached it as the subreaper), round after round, since each
    killed one orphans its own; what was killed, for the record."""
    killed = []
    for _ in range(LEFTOVER_ROUNDS):
        leftovers = _children() - before
        if not leftovers:
            break
        for pid in leftovers:
            killed.append(f"{_command(pid)} (pid {pid})")
            try:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            except (ProcessLookupError, ChildProcessError):
                continue
    return killed


class ForkedAttempt:
    """One attempt of `item`, run by `protocol()` (which returns (reports, leaked)) in a child.

    `log`: the worker's log (xdist), where the child's output lands after the case's start mark;
    without one (pytest's own process), the child's output goes to a file of its own, which the
    parent then copies to its stderr."""

    def __init__(self, item, log, time_limit: float | None, hard_limit: float | None):
        self.item, self.log, self.time_limit, self.hard_limit = item, log, time_limit, hard_limit

    def run(self, protocol) -> tuple[list, list[str]]:
        config = self.item.config
        output = None if self.log is not None else tempfile.TemporaryFile()
        for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
            _flush(stream)
        # A collection in the child would touch every object the parent made, copying the pages they
        # lie on (0.6 s a case on torch 2.15 with Lightning): frozen, the collector leaves them alone.
        gc.freeze()
        started = time.time()
        children = _children()
        try:
            read, write = os.pipe()
            pid = os.fork()
        except OSError as error:  # no process or descriptor left: the harness's failure, not the case's
            if output is not None:
                output.close()
            return [self._harness_error("starting the case's process", _describe(error), "", 0.0)], []
        if pid == 0:
            os.close(read)
            self._child(protocol, write, output)
        os.close(write)
        deadline = time.monotonic() + self.hard_limit if self.hard_limit else None
        data, killed, status = _read_all(read, pid, deadline)
        leftovers = end_leftovers(children | {pid})
        printed = self._child_output(output)
        sent = _parse(data) if not killed else None
        if status == 0 and sent and "reports" in sent:
            try:
                reports = [config.hook.pytest_report_from_serializable(config=config, data=d) for d in sent["reports"]]
                return reports, (sent["leaked"]
                                 + [f"process left running, killed after the case: {p}" for p in leftovers])
            except Exception as error:  # logged in the record: what the worker could not read
                return [self._harness_error("reading its reports in the worker", _describe(error), printed,
                                            time.time() - started)], []
        if status == UNSENT and sent and "unsent" in sent:
            return [self._harness_error(sent["unsent"], sent["error"], printed, time.time() - started)], []
        return [self._died(status, printed, time.time() - started, killed)], []

    def _child(self, protocol, write: int, output) -> None:
        code, stage = UNSENT, "starting the case's process"
        try:
            die_with_parent()
            if output is not None:
                os.dup2(output.fileno(), 1)
                os.dup2(output.fileno(), 2)
                import faulthandler

                faulthandler.enable(file=output, all_threads=True)
            fault = cudaguard.inherited_fault()
            if fault:
                raise HarnessFault(fault)
            stage = "running the case's protocol"
            reports, leaked = protocol()
            stage = "serialising its reports"
            config = self.item.config
            payload = _dumps({"leaked": leaked, "reports": [
                config.hook.pytest_report_to_serializable(config=config, report=r) for r in reports]},
                default=str).encode()
            stage = "sending its reports"
            _write_all(write, payload)
            code = 0
        except BaseException as error:
            traceback.print_exc()
            # What part failed, for the record: the parent otherwise sees a silent status.
            _write_all(write, _dumps({"unsent": stage, "error": _describe(error)}).encode(), quiet=True)
        finally:
            for stream in (sys.stdout, sys.stderr):
                _flush(stream)
            _os_exit(code)

    def _harness_error(self, stage: str, error: str, printed: str, seconds: float) -> TestReport:
        """The report of an attempt the harness could not carry out, or whose reports did not reach
        it: an `error` of the harness naming the part that failed (not the case's outcome, not a
        crash: nothing the case did died)."""
        if stage in CASE_STAGES:
            message = f"the harness could not run the case: {stage} raised {error}"
        else:
            message = f"the case's report did not reach the harness: {stage} raised {error}"
        return self._report("error", message, printed, seconds)

    def _child_output(self, output) -> str:
        if output is None:
            return workerlog.case_output(self.log, self.item.nodeid)
        output.seek(0)
        text = output.read().decode(errors="replace")
        output.close()
        if text:
            sys.stderr.write(text)
        return text

    def _died(self, status: int, printed: str, seconds: float, killed: bool) -> TestReport:
        """The report of an attempt whose process died: what it printed and how it ended."""
        case_file = caseid.nodeid_file(self.item.nodeid)
        outcome, message = outcomes.crash_summary(printed, status, case_file, self.time_limit)
        if killed:
            outcome, message = "timeout", f"ran past its time limit of {self.time_limit:g} s; killed by the harness"
        return self._report(outcome, message, printed, seconds)

    def _report(self, outcome: str, message: str, printed: str, seconds: float) -> TestReport:
        data, text = workerlog.crash_phase(case_identity(self.item), outcome, message, printed,
                                           self.log.measured(self.item.nodeid) if self.log is not None else {},
                                           self.log.path if self.log is not None else None)
        return TestReport(self.item.nodeid, self.item.location, {}, "failed", text, "call",
                          user_properties=[(records.PHASE_PROPERTY, data)], duration=seconds)
