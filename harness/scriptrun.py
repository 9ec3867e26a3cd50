"""One run of a plain Python script in an interpreter (a session's venv), and what it came to.

Shared by `sweep`, `bisect --script` and `reduce`: the script runs as its own process group from
an empty directory, under a time limit and the sessions' memory limit (RLIMIT_DATA, as
harness.runner sets it for cases), and is classified by its exit status: 0 pass, 125 skip, the
codes of scripts `repro` exports (harness.outcomes: 3 known, 5 limitation) as those outcomes,
anything else fail with the code and the script's last exception line. A process killed by a
signal is a crash (named by the signal), one past its time limit a timeout, one that ran out of
memory a crash saying so.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import re
import resource
import signal
import subprocess
import tempfile
import time

from harness import outcomes, repro, sessions

DEFAULT_TIMEOUT = 600.0
DEFAULT_MEMORY_LIMIT = "75%"
# Exit status -> outcome: pass, skip and the reproduction scripts' own codes (fixed also exits 0,
# and says so on its OUTCOME line).
BY_EXIT_CODE = {o.exit_code: name for name, o in outcomes.OUTCOMES.items()
                if name in ("pass", "skip", "known", "limitation")}
TRACEBACK = "Traceback (most recent call last):"
EXCEPTION_LINE = re.compile(r"^(?P<type>[A-Za-z_][\w.]*)(?::\s?(?P<message>.*))?$")


@dataclasses.dataclass
class ScriptRun:
    outcome: str  # a name of harness.outcomes.OUTCOMES
    code: int | None  # the exit status; negative: the signal; None: it ran past its time limit
    message: str  # the last exception line, or how it crashed or timed out
    exception: str  # the last exception's type as printed ('AssertionError', 'torch._dynamo.exc.Unsupported')
    output: str  # stdout and stderr together
    seconds: float

    @property
    def exit(self) -> str:
        """The exit status in words: 'exit 1', 'SIGSEGV', 'timed out'."""
        if self.code is None:
            return "timed out"
        if self.code < 0:
            try:
                return signal.Signals(-self.code).name
            except ValueError:
                return f"signal {-self.code}"
        return f"exit {self.code}"


def exceptions(output: str) -> list[tuple[str, str]]:
    """(type, first line of the message) of every traceback in `output`, in order (a chained
    exception prints its causes first, the exception that ended the script last)."""
    lines = output.splitlines()
    found = []
    for index, line in enumerate(lines):
        if line.strip() != TRACEBACK:
            continue
        indent = len(line) - len(line.lstrip())
        for following in lines[index + 1:]:
            if not following.strip() or len(following) - len(following.lstrip()) > indent:
                continue  # a frame, its source line, or the ^^^ markers
            match = EXCEPTION_LINE.match(following.strip())
            if match:
                found.append((match["type"], (match["message"] or "").strip()))
            break
    return found


def last_exception(output: str) -> tuple[str, str]:
    found = exceptions(output)
    return found[-1] if found else ("", "")


def classify(code: int | None, output: str, seconds: float, timeout: float | None = None) -> ScriptRun:
    kind, message = last_exception(output)
    line = f"{kind}: {message}" if message else kind
    if code is None:
        return ScriptRun("timeout", None, f"ran past its time limit{f' of {timeout:g} s' if timeout else ''}",
                         kind, output, seconds)
    if kind in ("MemoryError", "torch.OutOfMemoryError") or (code != 0 and line
                                                              and outcomes.MEMORY_EXHAUSTED.search(line)):
        return ScriptRun("crash", code, f"out of memory: {line}", kind, output, seconds)
    if code < 0:
        from harness.workerlog import crash_summary

        return ScriptRun("crash", code, crash_summary(output, code)[1], kind, output, seconds)
    outcome = BY_EXIT_CODE.get(code, "fail")
    if outcome == "pass" and re.search(r"^OUTCOME: fixed\b", output, re.M):
        outcome = "fixed"  # a repro script whose declared bug no longer reproduces
    if outcome == "skip":
        skip = re.findall(r"^OUTCOME: skip: (.*)$", output, re.M)
        line = skip[-1] if skip else line or (output.strip().splitlines() or [""])[-1]
    elif outcome == "fail" and not line:
        line = f"exit {code}; last output: {(output.strip().splitlines() or ['(none)'])[-1]}"
    return ScriptRun(outcome, code, line if outcome != "pass" else "", kind, output, seconds)


def _limit_memory(limit: int | None):
    def apply():
        if limit is not None:
            _, hard = resource.getrlimit(resource.RLIMIT_DATA)
            resource.setrlimit(resource.RLIMIT_DATA, (limit if hard == resource.RLIM_INFINITY else min(limit, hard), hard))
    return apply


def memory_limit_bytes(spec: str | None) -> int | None:
    from harness.runner import memory_limit_bytes as parse

    return parse(spec if spec is not None else os.environ.get("HARNESS_MEMORY_LIMIT", DEFAULT_MEMORY_LIMIT), 1)


def run(python: os.PathLike, script: os.PathLike, timeout: float = DEFAULT_TIMEOUT, memory_limit: str | None = None,
        cache_dir: os.PathLike | None = None) -> ScriptRun:
    """Run `script` with `python` from an empty directory and classify the run. `cache_dir`: the
    session venv whose compile caches (harness.sessions.compile_cache_env) the run shares."""
    script = pathlib.Path(script).resolve()
    env = repro.clean_env(**(sessions.compile_cache_env(cache_dir) if cache_dir else {}))
    env.pop("PYTHONPATH", None)  # a user's script runs as a user runs it: the harness is not on its path
    env["PYTHONFAULTHANDLER"] = "1"  # a crash in native code prints where it happened
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="harness-script-") as cwd:
        process = subprocess.Popen([str(python), str(script)], cwd=cwd, env=env, stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, text=True, errors="replace", start_new_session=True,
                                   preexec_fn=_limit_memory(memory_limit_bytes(memory_limit)))
        try:
            output, _ = process.communicate(timeout=timeout)
            code = process.returncode
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)  # and inductor's compile workers with it
            output, _ = process.communicate()
            code = None
        finally:
            try:  # what the script left running in its group (compile workers)
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            process.wait()
    return classify(code, output or "", time.monotonic() - started, timeout)
