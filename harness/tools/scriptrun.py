"""One run of a plain Python script in an interpreter (a session's venv), and what it came to.

Shared by `sweep`, `bisect --script` and `reduce`: the script runs as its own process group from
an empty directory, under a time limit and the sessions' memory limit (harness.core.limits, as
sessions set it for cases), and is classified by its exit status: 0 pass, 125 skip, the
codes of scripts `repro` exports (harness.core.outcomes: 3 known, 5 limitation) as those outcomes,
anything else fail with the code and the script's last exception line. A process killed by a
signal is a crash (named by the signal), one past its time limit a timeout, one that ran out of
memory a crash saying so.

`without_compile=True` runs the script with `torch.compile` replaced by the identity (WITHOUT_COMPILE):
the script's own code, eagerly, which is how `reduce` tells a compile bug from a script that fails
anyway where no torch row passes.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import re
import signal
import subprocess
import sys
import tempfile
import time
from typing import IO, cast

from harness.core import limits, outcomes, outputs, pytestrun
from harness.core.venvs import SessionError

DEFAULT_TIMEOUT = float(limits.DEFAULT_TIME_LIMIT)
TRACEBACK = "Traceback (most recent call last):"
# An exception named at the head of another's message ('LoweringException: AssertionError: ...'), as torch
# wraps a backend's error in its own (InductorError, BackendCompilerFailed)
NESTED_EXCEPTION = re.compile(r"(?P<name>[A-Z]\w*(?:Error|Exception|Failed|Unsupported)):\s*")
EXCEPTION_LINE = re.compile(r"^(?P<type>[A-Za-z_][\w.]*)(?::\s?(?P<message>.*))?$")

# torch.compile(fn, **options) returns fn, torch.compile(**options) a decorator returning fn; the rest
# of torch as it is (torch.compiler.disable, nested_compile_region run eagerly). Not TORCHDYNAMO_DISABLE:
# with Dynamo disabled, torch >= 2.13 makes fullgraph=True raise "found no compiled frames".
WITHOUT_COMPILE = """
import torch
def _compile_as_identity(model=None, **options):
    return model if model is not None else (lambda fn: fn)
torch.compile = _compile_as_identity
"""
# A fresh run without compile: the patch, then the script as __main__ (as `python script.py` would).
FRESH_WITHOUT_COMPILE = WITHOUT_COMPILE + """
import os, runpy, sys
sys.argv = sys.argv[1:]
sys.path[0] = os.path.dirname(sys.argv[0])
runpy.run_path(sys.argv[0], run_name="__main__")
"""


# A fresh run with modules made unimportable (a repro script proves it needs neither pytest nor the
# harness): in isolated mode (-I), the modules named in argv[1], then the script as __main__.
FRESH_WITH_BLOCKED = """
import runpy, sys
for name in sys.argv[1].split(","):
    sys.modules[name] = None
sys.argv = sys.argv[2:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""
# What a repro script prints last: `OUTCOME: known (torch 2.15.0)`, `OUTCOME: skip: <why>`.
OUTCOME_LINE = re.compile(r"^OUTCOME: (?P<outcome>\w+)(?:: (?P<why>.*))?", re.M)


def printed_outcome(output: str) -> tuple[str | None, str]:
    """(the outcome the script's last `OUTCOME:` line names, or None; what follows `skip:` there)."""
    found = list(OUTCOME_LINE.finditer(output))
    return (found[-1]["outcome"], (found[-1]["why"] or "").strip()) if found else (None, "")


@dataclasses.dataclass
class ScriptRun:
    outcome: str  # a name of harness.core.outcomes.OUTCOMES
    code: int | None  # the exit status; negative: the signal; None: it ran past its time limit
    message: str  # the last exception line, or how it crashed or timed out
    exception: str  # the last exception's type as printed ('AssertionError', 'torch._dynamo.exc.Unsupported')
    output: str  # stdout and stderr together
    seconds: float

    @property
    def chain(self) -> tuple[str, ...]:
        """The exceptions the last exception line names, outermost first, each by its class name:
        'torch._inductor.exc.InductorError: LoweringException: AssertionError: ...' gives
        ('InductorError', 'LoweringException', 'AssertionError')."""
        if not self.exception:
            return ()
        names = [self.exception.rsplit(".", 1)[-1]]
        rest = self.message[len(self.exception):].lstrip(": ") if self.message.startswith(self.exception) else ""
        while (nested := NESTED_EXCEPTION.match(rest)):
            names.append(nested["name"])
            rest = rest[nested.end():]
        return tuple(names)

    @property
    def error(self) -> str:
        """The last exception's whole message, its lines up to the first blank one joined: torch's
        wrappers say what they wrap on the lines after their own ("BackendCompilerFailed: backend='eager'
        raised:", then the RuntimeError), which `message`, one line, cuts off."""
        lines = self.output.splitlines()
        starts = [i for i, line in enumerate(lines) if self.message and line.strip() == self.message]
        if not starts:
            return self.message
        whole = []
        for line in lines[starts[-1]:]:
            if not line.strip():
                break
            whole.append(line.strip())
        return " ".join(whole)

    @property
    def exit(self) -> str:
        """The exit status in words: 'exit 1', 'SIGSEGV', 'timed out'."""
        if self.code is None:
            return "timed out"
        return outcomes.signal_name(self.code) or f"exit {self.code}"


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
        return ScriptRun("crash", code, outcomes.crash_summary(output, code)[1], kind, output, seconds)
    outcome = outcomes.BY_EXIT_CODE.get(code, "fail")
    printed, why = printed_outcome(output)
    if outcome == "pass" and printed == "fixed":
        outcome = "fixed"  # a repro script whose declared bug no longer reproduces
    if outcome == "skip":
        line = why if printed == "skip" and why else line or (output.strip().splitlines() or [""])[-1]
    elif outcome == "fail" and not line:
        line = f"exit {code}; last output: {(output.strip().splitlines() or ['(none)'])[-1]}"
    return ScriptRun(outcome, code, line if outcome != "pass" else "", kind, output, seconds)


def memory_limit_bytes(spec: str | None) -> int | None:
    return limits.memory_limit_bytes(limits.memory_limit(spec))


def run(python: os.PathLike, script: os.PathLike, timeout: float = DEFAULT_TIMEOUT, memory_limit: str | None = None,
        cache_dir: os.PathLike | None = None, without_compile: bool = False,
        blocked: tuple[str, ...] = ()) -> ScriptRun:
    """Run `script` with `python` from an empty directory and classify the run. `cache_dir`: the
    session venv whose compile caches (harness.core.pytestrun.script_cache_env) the run shares;
    `without_compile`: torch.compile replaced by the identity (WITHOUT_COMPILE); `blocked`: modules
    the script cannot import, run in isolated mode (FRESH_WITH_BLOCKED)."""
    script = pathlib.Path(script).resolve()
    env = pytestrun.clean_env(**(pytestrun.script_cache_env(cache_dir) if cache_dir else {}))
    env.pop("PYTHONPATH", None)  # a user's script runs as a user runs it: the harness is not on its path
    env["PYTHONFAULTHANDLER"] = "1"  # a crash in native code prints where it happened
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="harness-script-") as cwd:
        command = [os.path.abspath(python)] + (["-c", FRESH_WITHOUT_COMPILE] if without_compile else []) + [str(script)]
        if blocked:
            command = [os.path.abspath(python), "-I", "-c", FRESH_WITH_BLOCKED, ",".join(blocked), str(script)]
        limit = memory_limit_bytes(memory_limit)  # parsed in this process: the forked child only applies it
        process = subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, start_new_session=True,
                                   preexec_fn=lambda: limits.limit_memory(limit))
        drain = outputs.Drain(process.stdout)  # what it prints, within a bound
        try:
            code = process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)  # and inductor's compile workers with it
            process.wait()
            code = None
        finally:
            try:  # what the script left running in its group (compile workers)
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            process.wait()
        output = drain.text()
    return classify(code, output, time.monotonic() - started, timeout)


# --- many short runs: forked from a process that has imported torch once ------------------------------

# Runs in the session's venv. Imports torch and compiles once, then forks a child per request: the
# child runs the script as __main__ with its output in a file, the server answers with its exit
# status. Threads of inductor's compile pool do not survive a fork: one compile thread.
SERVER = r'''
import json, os, resource, runpy, sys, time, traceback
import torch
passed_over = []  # said in the ready line: the scripts meet these again and show them
try:
    torch.compile(lambda x: torch.sin(x) + 1, backend="inductor")(torch.ones(8))
except Exception as error:
    passed_over.append(f"the warm-up compile ({type(error).__name__}: {error})")
torch._dynamo.reset()
for name in filter(None, os.environ.get("HARNESS_PRELOAD", "").split(",")):
    try:
        __import__(name)
    except Exception as error:
        passed_over.append(f"preloading {name} ({type(error).__name__}: {error})")
channel = os.fdopen(os.dup(1), "w")
os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
channel.write(json.dumps({"ready": True, "passed_over": passed_over}) + "\n"); channel.flush()
for line in sys.stdin:
    request = json.loads(line)
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.setsid()
            out = os.open(request["output"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            os.dup2(out, 1); os.dup2(out, 2)
            os.chdir(request["cwd"])
            if request["memory"]:
                hard = resource.getrlimit(resource.RLIMIT_DATA)[1]
                resource.setrlimit(resource.RLIMIT_DATA, (request["memory"], hard))
            sys.argv = [request["script"]]
            torch.manual_seed(0)
            if request["without_compile"]:
                exec(WITHOUT_COMPILE, {})
            try:
                runpy.run_path(request["script"], run_name="__main__")
                code = 0
            except SystemExit as exit:
                code = exit.code if isinstance(exit.code, int) else (0 if exit.code is None else 1)
                if not isinstance(exit.code, (int, type(None))):
                    print(exit.code, file=sys.stderr)
            except BaseException:
                traceback.print_exc()
                code = 1
        finally:
            sys.stdout.flush(); sys.stderr.flush()
            os._exit(code)
    deadline, status = time.monotonic() + request["timeout"], None
    while True:
        done, raw = os.waitpid(pid, os.WNOHANG)
        if done:
            status = -os.WTERMSIG(raw) if os.WIFSIGNALED(raw) else os.WEXITSTATUS(raw)
            break
        if time.monotonic() > deadline:
            os.killpg(pid, 9); os.waitpid(pid, 0)
            break
        time.sleep(0.02)
    try:
        os.killpg(pid, 9)
    except OSError:
        pass
    channel.write(json.dumps({"code": status}) + "\n"); channel.flush()
'''


class WarmRunner:
    """Runs scripts in `python` forked from one warm process (harness.tools.scriptrun.SERVER): a run
    costs the script's own work, not torch's import. What it reports is what `run` would, but a
    forked process is not a fresh one: a result that matters is checked again with `run`."""

    def __init__(self, python: os.PathLike, cache_dir: os.PathLike | None = None, memory_limit: str | None = None,
                 preload=()):
        """`preload`: modules the scripts import, imported once before the first fork."""
        self.python, self.cache_dir = python, cache_dir
        self.memory = memory_limit_bytes(memory_limit)
        self.workdir = tempfile.TemporaryDirectory(prefix="harness-warm-")
        env = pytestrun.clean_env(**(pytestrun.script_cache_env(cache_dir) if cache_dir else {}),
                              TORCHINDUCTOR_COMPILE_THREADS="1", PYTHONFAULTHANDLER="1",
                              HARNESS_PRELOAD=",".join(preload))
        env.pop("PYTHONPATH", None)
        server = f"WITHOUT_COMPILE = {WITHOUT_COMPILE!r}\n{SERVER}"
        self.process = subprocess.Popen([os.path.abspath(python), "-c", server], cwd=self.workdir.name, env=env,
                                        text=True, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=subprocess.DEVNULL)
        # the requests to the server and its replies: both pipes were asked for, so neither is None
        self.requests = cast(IO[str], self.process.stdin)
        self.replies = cast(IO[str], self.process.stdout)
        ready = self.replies.readline().strip()
        if not ready:
            self.close()
            raise SessionError(f"{python} could not import torch to run scripts")
        for what in json.loads(ready).get("passed_over", []):
            print(f"harness: the warm runner of {python} passed over {what}", file=sys.stderr, flush=True)

    def run(self, script: os.PathLike, timeout: float = DEFAULT_TIMEOUT, without_compile: bool = False) -> ScriptRun:
        """`without_compile`: torch.compile replaced by the identity in the child (WITHOUT_COMPILE)."""
        output = pathlib.Path(self.workdir.name) / "output.txt"
        request = {"script": str(pathlib.Path(script).resolve()), "output": str(output), "timeout": timeout,
                   "cwd": self.workdir.name, "memory": self.memory, "without_compile": without_compile}
        started = time.monotonic()
        try:
            self.requests.write(json.dumps(request) + "\n")
            self.requests.flush()
            reply = json.loads(self.replies.readline())
        except (OSError, ValueError) as exc:
            raise SessionError(f"the warm runner of {self.python} died: {exc}") from exc
        text = outputs.read_file(output)
        return classify(reply["code"], text, time.monotonic() - started, timeout)

    def close(self) -> None:
        if self.process.poll() is None:
            self.requests.close()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.workdir.cleanup()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
