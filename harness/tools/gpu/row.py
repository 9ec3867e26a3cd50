"""A CUDA row on a GPU machine whose environment is already there, in steps that each keep to a budget of
seconds (a lent GPU is minutes): the row, then later and apart the alone-checks and the CPU cells.

    python -m harness gpu row SESSION --out DIR [--budget S] [--case-timeout S]
    python -m harness gpu alone SESSION --row DIR --out DIR [--count 20] [--budget S]
    python -m harness gpu cpu-cells SESSION --out DIR [--budget S]

`row` runs `python -m harness run SESSION` (its pin check, its workers, its cuda cells, its records) into
DIR/results, says how far it got every PROGRESS_EVERY seconds, stops it (SIGINT, as a user would) at the
budget, and prints a summary, also written to DIR/summary.txt at each progress line, so that a run cut off
from outside still leaves one. A row cut off is not complete, and the summary says so.
"""

from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
import os
import pathlib
import re
import signal
import subprocess
import sys
import threading
import time

from harness.core import limits, matrix, outcomes, paths, pytestrun, records, timings

PROGRESS_EVERY = 20  # seconds between progress lines
STOP_GRACE = 60  # seconds pytest gets to write its end record after SIGINT, before the group is killed
COLLECTED = re.compile(r"\[(\d+) items?\]")  # xdist's "16 workers [245 items]"


def _children(parent: int) -> list[int]:
    """The processes whose parent is `parent` (from /proc)."""
    found = []
    for entry in pathlib.Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = entry.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == parent:
            found.append(int(entry.parent.name))
    return found


def _run_env(results: pathlib.Path, case_timeout: int | None, workers: str | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in (pytestrun.SESSION_ENV, paths.RESULTS_ENV)}
    env[paths.RESULTS_ENV] = str(results)
    if case_timeout:
        env[limits.CASE_TIMEOUT_ENV] = str(case_timeout)
    if workers:
        env[pytestrun.WORKERS_ENV] = workers
    return env


class Run:
    """`python -m harness run SESSION ARGS` in a process group of its own, its output to `log`, stopped
    with SIGINT at `deadline` (and killed STOP_GRACE later)."""

    def __init__(self, spec: matrix.Session, args: list[str], env: dict, log: pathlib.Path):
        log.parent.mkdir(parents=True, exist_ok=True)
        self.log = log
        self.started = time.monotonic()
        with open(log, "wb") as out:
            self.process = subprocess.Popen([sys.executable, "-m", "harness", "run", spec.name, *args], cwd=paths.ROOT,
                                            env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        self.stopped = ""  # why it was stopped before its end, once it was

    def stop(self, why: str) -> None:
        """SIGINT to pytest's own process (xdist's controller): it stops handing out cases, lets each worker
        end the case it runs, and writes its end record. Not to the whole group: a case's process that
        got it would record the interrupt as the case's failure."""
        if self.stopped or self.process.poll() is not None:
            return
        self.stopped = why
        # before pytest has started, the command itself takes the SIGINT (it ignores one only while pytest runs)
        for pid in _children(self.process.pid) or [self.process.pid]:
            try:
                os.kill(pid, signal.SIGINT)
            except ProcessLookupError:
                continue

    def _group_alive(self) -> bool:
        try:
            os.killpg(self.process.pid, 0)
            return True
        except ProcessLookupError:
            return False

    def wait(self, deadline: float | None, tick=None) -> int:
        """The command's exit status once it and every process it started are gone; at `deadline` the
        group gets SIGINT (pytest writes its end record), and SIGKILL STOP_GRACE later."""
        stopping = None
        while self.process.poll() is None or (self.stopped and self._group_alive()):
            if deadline is not None and time.monotonic() >= deadline and stopping is None:
                self.stop("cut off at the budget")
            if self.stopped and stopping is None:
                stopping = time.monotonic()
            if stopping is not None and time.monotonic() - stopping > STOP_GRACE:
                os.killpg(self.process.pid, signal.SIGKILL)
                break
            time.sleep(1)
            if tick is not None:
                tick()
        return self.process.wait()

    def expected(self) -> int | None:
        """How many cases the run collected, as xdist said it."""
        found = COLLECTED.findall(self.log.read_text(errors="replace")) if self.log.exists() else []
        return int(found[-1]) if found else None


@dataclasses.dataclass
class RowState:
    """How far a row got, read from its results file."""
    session: str
    recorded: int
    expected: int | None
    seconds: float
    stopped: str  # why it was stopped before its end ("" when it was not)
    ended: bool  # its end record was written
    environment: dict
    end: dict | None
    counts: collections.Counter
    harness_faults: list[str]
    pytest_seconds: float | None

    @property
    def complete(self) -> bool:
        return self.ended and not self.stopped and (self.expected is None or self.recorded >= self.expected)

    def text(self) -> str:
        env = self.environment
        state = "complete" if self.complete else "NOT COMPLETE" + (f"; {self.stopped}" if self.stopped else "")
        return "\n".join([
            f"{self.session}: {self.recorded} of {self.expected if self.expected is not None else '?'} cases recorded "
            f"in {self.seconds:.0f} s{'' if self.ended else ', no end record'}; {state}",
            f"  pytest {self.pytest_seconds} s; workers {env.get('workers')}; "
            f"exit status {self.end and self.end.get('exitstatus')}",
            f"  GPU {env.get('gpu')}, driver {env.get('gpu_driver')}, CUDA {env.get('cuda')}, "
            f"torch {env.get('torch')}, lightning {env.get('lightning')}",
            "  outcomes: " + (", ".join(f"{n} {o}" for o, n in self.counts.most_common()) or "none"),
            f"  records that name the harness or are its fault: {len(self.harness_faults)} {self.harness_faults[:5]}",
            f"  the CUDA guard: {env.get('cuda_guard')}",
        ])


def row_state(spec: matrix.Session, results: pathlib.Path, expected: int | None, seconds: float,
              stopped: str) -> RowState:
    path = paths.results_path(spec.name, results)
    back = records.read(path, passed_over=lambda text: None) if path.is_file() else []
    environment = back[0] if back and back[0].get("kind") == "environment" else {}
    cases = [r for r in back if r.get("kind") == "case"]
    end = back[-1] if back and back[-1].get("kind") == "end" else None
    theirs = [r["case"] for r in cases
              if r["outcome"] in outcomes.HARNESS_FAULTS or "harness" in (r.get("message") or "")]
    return RowState(spec.name, len(cases), expected, seconds, stopped, end is not None, environment, end,
                    collections.Counter(r["outcome"] for r in cases), theirs,
                    timings.read(path).get("seconds") if end else None)


def row(session: str, out: pathlib.Path, budget: float | None, case_timeout: int | None, say=print) -> bool:
    """The session's cases into out/results within `budget` seconds; True when the row is complete."""
    spec = matrix.find(session)
    limits.case_timeout(spec.case_timeout)  # a bad setting, before anything runs
    out.mkdir(parents=True, exist_ok=True)
    results = out / "results"
    run = Run(spec, [], _run_env(results, case_timeout), out / "row.log")
    deadline = run.started + budget if budget else None
    next_line = [run.started + PROGRESS_EVERY]

    def progress() -> RowState:
        state = row_state(spec, results, run.expected(), time.monotonic() - run.started, run.stopped)
        (out / "summary.txt").write_text(state.text() + "\n")
        return state

    def tick() -> None:
        if time.monotonic() >= next_line[0]:
            next_line[0] += PROGRESS_EVERY
            say("progress: " + progress().text().splitlines()[0])

    def interrupted(signum, frame):  # stopped from outside (a loan's limit): the run first, then the summary
        run.stop(f"stopped from outside ({signal.Signals(signum).name})")

    # Only the main thread may set a signal handler: elsewhere none is set, and none restored.
    previous = [signal.signal(s, interrupted) for s in (signal.SIGTERM, signal.SIGINT)] \
        if threading.current_thread() is threading.main_thread() else []
    try:
        code = run.wait(deadline, tick)
    finally:
        for s, handler in zip((signal.SIGTERM, signal.SIGINT), previous, strict=False):
            signal.signal(s, handler)
    state = progress()
    say(state.text())
    say(f"  `python -m harness run` exited {code}; its output: {run.log}")
    return state.complete


def spread(cases: list[dict], count: int) -> list[dict]:
    """`count` records, families in turn and within a family its outcomes in turn, so that every family
    comes before any comes twice, and each one's outcomes alike."""
    by_family: collections.defaultdict[str, collections.defaultdict[str, list[dict]]] = \
        collections.defaultdict(lambda: collections.defaultdict(list))
    for record in sorted(cases, key=lambda r: r["case"]):
        by_family[record["family"]][record["outcome"]].append(record)
    chosen: list[dict] = []
    while len(chosen) < count and any(any(groups.values()) for groups in by_family.values()):
        for family in sorted(by_family):
            groups = [g for _, g in sorted(by_family[family].items()) if g]
            if groups and len(chosen) < count:
                turn = sum(1 for r in chosen if r["family"] == family) % len(groups)
                chosen.append(groups[turn].pop(0))
    return chosen


def alone(session: str, row_dir: pathlib.Path, out: pathlib.Path, count: int, budget: float | None,
          case_timeout: int | None, say=print) -> bool:
    """`count` cells of the row in `row_dir`, chosen across families and outcomes, each run again alone (a
    fresh pytest and worker, the one case); True when every one that ran gave the row's outcome."""
    spec = matrix.find(session)
    source = paths.results_path(spec.name, row_dir / "results")
    cases = [r for r in records.read(source) if r["kind"] == "case" and r["outcome"] != "skip"]
    chosen = spread(cases, count)
    started = time.monotonic()
    deadline = started + budget if budget else None

    def one(index_record):
        index, record = index_record
        if deadline is not None and time.monotonic() > deadline - 30:
            return record, None, "not run: the budget was spent"
        results = out / str(index)
        run = Run(spec, [record["nodeid"]], _run_env(results, case_timeout, workers="1"), out / f"{index}.log")
        run.wait(deadline)
        back = [r for r in records.read(paths.results_path(spec.name, results), passed_over=lambda text: None)
                if r["kind"] == "case"] if paths.results_path(spec.name, results).is_file() else []
        return record, (back[0] if back else None), "stopped at the budget" if run.stopped else ""

    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, (os.cpu_count() or 2) // 2)) as pool:
        pairs = list(pool.map(one, enumerate(chosen)))
    ran = [(r, a) for r, a, why in pairs if a is not None]
    differ = [(r["case"], r["outcome"], a["outcome"]) for r, a in ran if a["outcome"] != r["outcome"]]
    missing = [(r["case"], why or "no record") for r, a, why in pairs if a is None]
    families = sorted({r["family"] for r, _ in ran})
    say(f"alone: {len(ran) - len(differ)} of {len(ran)} cells ({', '.join(families)}) give the row's outcome "
        f"when each runs in a fresh process, in {time.monotonic() - started:.0f} s; differ: {differ}; "
        f"not checked: {missing}")
    return not differ and not missing


def _cases(path: pathlib.Path) -> dict[str, dict]:
    return {r["case"]: r for r in records.read(path) if r["kind"] == "case"} if path.is_file() else {}


def cpu_cells(session: str, out: pathlib.Path, budget: float | None, say=print) -> bool:
    """The row's CPU session on this machine (a GPU visible) against the committed CPU row: what the CPU
    cells would add to a CUDA session."""
    spec = matrix.find(session)
    twin = next(s for s in matrix.load() if s.device == "cpu" and s.torch == spec.torch and s.label == spec.label
                and not s.lightning_of)
    results = out / "cpu-here"
    run = Run(twin, [], _run_env(results, None, workers=str(max(1, (os.cpu_count() or 2) // 2))), out / "cpu-here.log")
    run.wait(time.monotonic() + budget if budget else None)
    here, table = _cases(paths.results_path(twin.name, results)), _cases(paths.results_path(twin.name))
    differ = [(c, table[c]["outcome"], r["outcome"]) for c, r in here.items()
              if c in table and table[c]["outcome"] != r["outcome"]]
    say(f"{twin.name} on this machine: {len(here)} of {len(table)} cells"
        f"{' (cut off at the budget)' if run.stopped else ''}; "
        f"{len(differ)} differ from the committed table: {differ[:20]}")
    return not differ and not run.stopped
