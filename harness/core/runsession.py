"""What a case session does, step by step, wherever its environment comes from: nox's venv (the
noxfile's sessions) or an environment that is already there (`python -m harness run SESSION`, for a GPU
machine or a container without a package registry). One sequence for both, so that neither can drift:

  1. the machine: a CUDA session needs a GPU (unless it only collects); before anything is installed
  2. the environment: installed by nox (`install`), or taken as it is
  3. its pins and tools checked (`python -m harness check-env`), in that environment
  4. the reuse plan (`python -m harness.plugin.reuse`): which families run, which records carry over;
     with pytest arguments, none (a narrowed run neither reuses nor is reused)
  5. pytest, the session's own command (harness.core.pytestrun.pytest_args)

Each step runs through `step(argv, env)`, which runs a command in that environment and raises when
it fails (nox's session.run, or run_here's subprocess).
"""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys
import tempfile
from typing import Callable, Optional

from harness.core import caseid, envcheck, limits, matrix, paths, pytestrun

Step = Callable[[list, dict], object]


def compile_caches_of(venv: os.PathLike, session: str | None = None) -> str:
    """Where a run's cases keep their compile caches (harness.plugin.compilecaches): the folder the caller
    names in $HARNESS_COMPILE_CACHES (a folder of `session`'s in it, for a run that goes through several
    sessions' venvs: a bisection), else the venv's own (pytestrun.compile_caches). Two runs in one venv at
    once must not share one: each worker points a link in it at its case's caches, so a second run's
    worker would point the first run's link elsewhere (docs/isolation.md, "one run at a time")."""
    chosen = os.environ.get(pytestrun.COMPILE_CACHES_ENV)
    if not chosen:
        return str(pytestrun.compile_caches(venv))
    return os.path.join(chosen, session) if session else chosen


def session_env(spec: matrix.Session, venv: os.PathLike, workers: pytestrun.Workers | None = None) -> dict:
    """The environment of a session's pytest run (pytestrun.run_env), with its compile caches where
    compile_caches_of says."""
    return {**pytestrun.run_env(spec, venv, workers), pytestrun.COMPILE_CACHES_ENV: compile_caches_of(venv)}


class StepFailed(Exception):
    """A step of the session exited non-zero (run_here's steps)."""

    def __init__(self, argv: list, returncode: int):
        super().__init__(f"{' '.join(map(str, argv[:4]))} ... exited with status {returncode}")
        self.returncode = returncode


class CarriedFailures(Exception):
    """Nothing needed to run, and records carried over from the last run fail the session."""


def no_more_than_cases(workers: pytestrun.Workers, targets: list[str]) -> pytestrun.Workers:
    """`workers`, or one per case where the run names fewer cases than that, each by its node id (a run
    narrowed to a few cases, or a plan that runs a few again): every worker imports torch before it
    takes a case, so one with no case to take is only cost. Files, folders and options say nothing of
    how many cases they hold: `workers` as chosen."""
    if targets and all(caseid.is_nodeid(target) for target in targets) and len(targets) < workers.count:
        return pytestrun.Workers(len(targets), f"{workers.basis}; as many as the cases the run names ({len(targets)})")
    return workers


def run(spec: matrix.Session, posargs, python: str, cache_root: os.PathLike, step: Step,
        install: Optional[Callable[[], None]] = None) -> None:
    """The session's steps (above). Raises harness.core.errors.BadInput (the machine or the environment does not fit the
    session), CarriedFailures, or what `step` raises."""
    collect = pytestrun.collect_only(posargs)
    limits.case_timeout(spec.case_timeout)  # a bad $HARNESS_CASE_TIMEOUT, before anything is installed
    pytestrun.check_args(posargs)
    if not collect:
        envcheck.require_gpu(spec)
    if install is not None:
        install()
    step([python, "-m", "harness", "check-env", spec.name, *(["--no-gpu"] if collect else [])], {})
    workers = pytestrun.choose_workers(spec)
    env = session_env(spec, cache_root, workers)
    args = [a for a in posargs if a != pytestrun.FRESH]
    if args:
        workers = no_more_than_cases(workers, args)
        step([python, *pytestrun.pytest_args(spec, args, workers)], session_env(spec, cache_root, workers))
        return
    handle, name = tempfile.mkstemp(prefix=f"reuse-plan-{spec.name}-", suffix=".json")
    os.close(handle)
    plan = pathlib.Path(name)
    try:
        step([python, "-m", "harness.plugin.reuse", spec.name, "--plan", str(plan),
              *(["--fresh"] if pytestrun.FRESH in posargs else [])], env)
        if not plan.stat().st_size:
            return  # `nox --install-only`: nothing was run
        the_plan = json.loads(plan.read_text())
        if not the_plan["run"]:  # every record reused: the results file is written
            if the_plan["exitstatus"]:
                raise CarriedFailures("cases fail (their records were carried over from the last run)")
            return
        workers = no_more_than_cases(workers, the_plan["run"])
        step([python, *pytestrun.pytest_args(spec, [*the_plan["run"], f"--reuse-plan={plan}"], workers)],
             session_env(spec, cache_root, workers))
    finally:
        plan.unlink(missing_ok=True)  # read by pytest's plugin while it runs, then no longer needed


def run_here(session: str, posargs) -> int:
    """`python -m harness run SESSION [pytest args]`: the session's steps in this interpreter's
    environment, installing nothing; its compile caches where nox's would be (this environment's
    prefix), else in the temporary directory. pytest's exit status; BadInput (exit 2) for an unknown
    session, a machine without the GPU it needs, or an environment that does not match its pins."""
    spec = matrix.find(session)
    pytestrun.choose_workers(spec)  # a bad $HARNESS_WORKERS, before anything runs
    prefix = pathlib.Path(sys.prefix)
    cache_root = prefix if os.access(prefix, os.W_OK) else pathlib.Path(tempfile.gettempdir()) / f"harness-{spec.name}"
    environ = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(paths.ROOT), *([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])])}

    def step(argv: list, env: dict) -> None:
        with subprocess.Popen(argv, cwd=paths.ROOT, env={**environ, **env}) as process:
            # Ctrl-C reaches the step as well (one process group): pytest stops its cases and writes its end
            # record, and this process waits for that instead of killing it mid-write.
            previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
            try:
                returncode = process.wait()
            finally:
                signal.signal(signal.SIGINT, previous)
        if returncode != 0:  # the step said why (check-env: one line, exit 2)
            raise StepFailed(argv, returncode)

    try:
        run(spec, posargs, sys.executable, cache_root, step)
    except StepFailed as failed:
        return failed.returncode
    except CarriedFailures as failed:
        print(f"{spec.name}: {failed}", file=sys.stderr)
        return 1
    return 0
