"""Where the environment record (harness.plugin.environment) is read.

In a child forked from the process that runs cases (an xdist worker, or pytest's own process), which
has imported what the record reads (torch, inductor's and AOTAutograd's configs) for its own warm-up:
about 1 s of CPU where a process of its own costs 9 on this machine (torch's imports once more), in
every session. The child is forked before that process changes anything the record reads (the compile
caches' variables, inductor's config). Where no such child gives the record (no fork, the worker died
first, the child failed), a process of its own reads it: `python -m harness.plugin.environment SESSION`.
"""

from __future__ import annotations

import importlib
import json
import os
import pathlib
import subprocess
import sys
import time
from collections.abc import Callable

import pytest

from harness.core import paths
from harness.plugin import workerlog
from harness.plugin.environment import CACHE_FLAGS, environment_record, recorded_session

# xdist's controller names, in its first worker's input, the file that worker's child writes the record to.
WORKER_INPUT_KEY = "harness_environment"
GATHER_TIMEOUT = 300  # seconds for the child: collect_env shells out (pip, lscpu, gcc, nvidia-smi)
# What the record imports besides torch, imported first in the process that forks (its warm-up imports
# the configs too), where this torch has them.
RECORD_MODULES = ("torch.utils.collect_env", *dict.fromkeys(module for module, _ in CACHE_FLAGS))


class ForkedGathering:
    """The record of `session` read in a child forked from this process, written whole to `path`
    (or why it could not be: {"unread": ...})."""

    def __init__(self, session: str, path: pathlib.Path):
        self.path = pathlib.Path(path)
        self.pid: int | None = None
        self.environ = dict(os.environ)  # as the record reads it, for a process of its own where no child can
        try:
            import torch  # noqa: F401

            for module in RECORD_MODULES:
                try:
                    importlib.import_module(module)
                except ImportError:  # not in this torch: the record says so
                    pass
            for stream in (sys.stdout, sys.stderr):
                stream.flush()
            self.pid = os.fork()
        except (ImportError, OSError, AttributeError) as exc:  # torch does not import; no fork() here
            _write_unread(self.path, f"no child forked: {type(exc).__name__}: {exc}")
            return
        if self.pid == 0:
            code = 1
            try:
                from harness.plugin import cudaguard
                from harness.plugin.isolation import die_with_parent

                die_with_parent()
                cudaguard.as_in_a_fresh_process()
                _write_whole(self.path, json.dumps(environment_record(session), default=str))
                code = 0
            except BaseException as exc:
                _write_unread(self.path, f"{type(exc).__name__}: {exc}")
            finally:
                os._exit(code)

    def wait(self, timeout: float = GATHER_TIMEOUT) -> None:
        """The child ended and reaped (killed after `timeout`)."""
        if self.pid is None:
            return
        deadline = time.monotonic() + timeout
        try:
            while os.waitpid(self.pid, os.WNOHANG) == (0, 0):
                if time.monotonic() >= deadline:
                    os.kill(self.pid, 9)
                    os.waitpid(self.pid, 0)
                    break
                time.sleep(0.02)
        except ChildProcessError:  # reaped already
            pass
        self.pid = None


def _write_whole(path: pathlib.Path, text: str) -> None:
    """A reader polling for `path` never sees part of it."""
    staged = path.with_name(f".{path.name}.{os.getpid()}")
    staged.write_text(text)
    os.replace(staged, path)


def _write_unread(path: pathlib.Path, why: str) -> None:
    """In place of the record: why it could not be read (read_written says it)."""
    _write_whole(path, json.dumps({"unread": why[:1000]}))


def read_written(path: pathlib.Path) -> tuple[dict | None, str]:
    """The record a child wrote to `path` (removed once read), or None and why not."""
    try:
        written = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        return None, f"{path} unreadable: {type(exc).__name__}: {exc}"
    path.unlink(missing_ok=True)
    if "unread" in written:
        return None, f"the forked child failed: {written['unread']}"
    return written, ""


def read_in_own_process(session: str, environ: dict[str, str]) -> dict:
    """The record read by `python -m harness.plugin.environment` (torch imported afresh) in `environ`;
    RuntimeError with the process's last line where it fails."""
    done = subprocess.run([sys.executable, "-m", "harness.plugin.environment", session], capture_output=True,
                          text=True, cwd=paths.ROOT, env=environ, timeout=GATHER_TIMEOUT)
    if done.returncode != 0:
        raise RuntimeError((done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1])
    return json.loads(done.stdout)


FORKED = pytest.StashKey["ForkedGathering"]()  # pytest's own process: the child it forked, for its recorder


def fork_where_cases_run(config, workerinput: dict | None) -> ForkedGathering | None:
    """In the process that runs cases, before it changes anything the record reads: the child that reads
    the record for the process that writes the results file (xdist's controller names the file and the
    session in its first worker's input; pytest's own process keeps the child in its config's stash)."""
    if workerinput is not None:
        asked = workerinput.get(WORKER_INPUT_KEY)
        if not asked:  # not this session's first worker
            return None
        session, path = asked["session"], pathlib.Path(asked["path"])
    else:
        session = recorded_session(config)
        path = config._tmp_path_factory.mktemp("environment-record") / "environment.json"
    forked = ForkedGathering(session, path)
    if workerinput is None:
        config.stash[FORKED] = forked
    return forked


class RecordSource:
    """The session's environment record, for the process that writes the results file: what the child
    of the process that runs cases wrote, else read in a process of its own (why is said on stderr)."""

    def __init__(self, session: str, config):
        self.session, self.config = session, config
        self.environ = dict(os.environ)  # the session's, before the process that runs cases sets the caches'
        self.record: dict | None = None
        self.path: pathlib.Path | None = None  # where the first worker's child writes it (xdist)
        self.worker_ended: Callable[[], bool] = lambda: False

    def ask_worker(self, node, path: pathlib.Path) -> None:
        """xdist's controller: the first worker it starts forks the child that writes the record to `path`."""
        if self.path is not None:
            return
        self.path = path
        node.workerinput[WORKER_INPUT_KEY] = {"session": self.session, "path": str(path)}
        popen = workerlog.worker_process(node)
        if popen is not None:
            self.worker_ended = lambda: popen.poll() is not None

    def result(self) -> dict:
        if self.record is None:
            forked = self.config.stash.get(FORKED, None)  # where this process runs the cases, and forked the child
            written, why = self._written(forked)
            if written is None:
                print(f"harness: the environment record is read in a process of its own: {why}", file=sys.stderr)
                try:
                    written = read_in_own_process(self.session, forked.environ if forked else self.environ)
                except (RuntimeError, ValueError, subprocess.TimeoutExpired) as exc:
                    raise pytest.UsageError(f"cannot read this environment: {exc}") from None
            self.record = written
        return self.record

    def _written(self, forked: ForkedGathering | None) -> tuple[dict | None, str]:
        if forked is not None:
            forked.wait()
            return read_written(forked.path)
        if self.path is None:
            return None, "no process that runs cases was asked to fork a child for it"
        deadline = time.monotonic() + GATHER_TIMEOUT
        while not self.path.exists():
            if self.worker_ended() and not self.path.exists():  # its child dies with it (die_with_parent)
                return None, "the worker asked for it ended before its child wrote it"
            if time.monotonic() >= deadline:
                return None, f"no record from the worker's child in {GATHER_TIMEOUT} s"
            time.sleep(0.05)
        return read_written(self.path)
