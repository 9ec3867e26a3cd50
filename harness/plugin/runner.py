"""Where cases run: an xdist worker, or pytest's own process when nothing is distributed.

One protocol loop: every attempt of a case starts from the same clean torch state, runs within the
case's time limit and the process's memory limit, and a failing case runs again (`--case-reruns`);
attempts that are retried show as `R` in pytest's output. Start-up (torch, Dynamo and inductor
imports, the state snapshot, the memory limit) happens once per process, before any case's clock
starts, so that no case is charged for it.
"""

from __future__ import annotations

import contextlib
import faulthandler
import os
import signal
import sys
import traceback
from typing import TYPE_CHECKING

import pytest
from _pytest.runner import runtestprotocol

from harness.core import limits, outcomes, records
from harness.core.caseid import case_identity
from harness.plugin import compilecaches, cudaguard, gathering, isolation, workerlog
from harness.plugin.marks import backstop_after, rerun_count, skipped_by_marks, time_limit
from harness.plugin.torchstate import TorchState
from harness.plugin.warmup import warm_up
from harness.plugin.workdir import WorkingDirectory
from harness.plugin.workerlog import WorkerLog

if TYPE_CHECKING:  # casekit imports torch at its top: the fixture `case` imports it when a case asks for it
    from harness.plugin.casekit import CaseRun

CASE_RUN: pytest.StashKey[CaseRun] = pytest.StashKey()
TIMER_SETTINGS = pytest.StashKey[object]()  # pytest-timeout's settings of a case, for its own process


# --- what a case may use --------------------------------------------------------------------

@pytest.fixture
def case(request):
    """The running case: `case.check(fn, *inputs)` compares eager and compiled runs."""
    import torch

    from harness.plugin.casekit import CaseRun

    run = CaseRun(case_identity(request.node)["params"])
    run.declared = outcomes.declared_for(request.node, torch.__version__)  # a property classifies each example
    request.node.stash[CASE_RUN] = run
    return run


def read_captured_output_with_replacement() -> None:
    """A case that writes bytes that are not UTF-8 to `sys.stdout.buffer` must still get its own
    outcome: pytest's sys-level capture decodes what it caught strictly (`CaptureIO.getvalue`), and
    its UnicodeDecodeError would replace the case's failure with an error of the harness."""
    from _pytest import capture

    def getvalue(self) -> str:
        return self.buffer.getvalue().decode("UTF-8", errors="replace")

    capture.CaptureIO.getvalue = getvalue  # type: ignore[method-assign]  # patched on purpose (above)


# --- between attempts -----------------------------------------------------------------------------

def _outcome_of(reports) -> records.PhaseData:
    """The most severe phase of one attempt, as the record will show it."""
    return outcomes.worst([d for d in map(records.phase_of, reports) if d is not None], outcome=lambda d: d["outcome"])


def reset_fixtures(item) -> None:
    """Let the next attempt set the case up from scratch: drop the failed attempt's fixture
    results and setup state (what pytest-rerunfailures does), then a fresh fixture request."""
    for definitions in getattr(getattr(item, "_fixtureinfo", None), "name2fixturedefs", {}).values():
        for definition in definitions:
            cached = getattr(definition, "cached_result", None)
            if cached is not None and cached[2] is not None:  # the fixture raised
                definition.cached_result = None
                getattr(definition, "_finalizers", []).clear()
    stack = item.session._setupstate.stack
    if item in stack:
        del stack[item]
    item._initrequest()


def log_as_rerun(item, reports) -> None:
    """Show an attempt that will be retried: its failed phases as `rerun` (pytest prints `R`),
    without harness data, so that only the final attempt makes a record."""
    for report in reports:
        if report.failed:
            report.outcome = "rerun"
            report.user_properties = [(k, v) for k, v in report.user_properties if k != records.PHASE_PROPERTY]
            item.ihook.pytest_runtest_logreport(report=report)


# --- classification ---------------------------------------------------------------------------

def classify_phase(item, call, report) -> records.PhaseData:
    """The outcome of one phase of a case, set on pytest's report too (a known bug or a
    documented limitation shows as xfailed, a fixed bug as xpassed). `reference` is the one
    declaration the run met; `declared`, what the case declares for this torch."""
    import torch

    declared = outcomes.declared_for(item, torch.__version__)
    run = item.stash.get(CASE_RUN, None)
    data = records.phase_data(case_identity(item), report.when, "error", declared=[e.as_record() for e in declared],
                              metrics=run.metrics if run is not None else {})
    if report.skipped and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        data.update({"outcome": "skip", "message": reason.removeprefix("Skipped: ")})
        return data
    if report.passed:
        # set-up and teardown pass whatever the case declares: only the call is the bug's
        data["outcome"] = outcomes.clean_outcome(e.kind for e in declared) if report.when == "call" else "pass"
        if data["outcome"] == "fixed":
            bug = next(e.ref for e in declared if e.kind == "known")
            data["reference"] = bug
            report.wasxfail = f"fixed upstream? {bug} no longer reproduces"
        return data
    exc = call.excinfo.value if call.excinfo else None
    if exc is None:
        data["outcome"] = "error"
        return data
    message = outcomes.message_line(exc)
    data.update({"exc_type": outcomes.qualname(type(exc)), "message": message})
    if outcomes.is_instance_named(exc, "Failed") and message.startswith("Timeout"):
        data["outcome"] = "timeout"  # pytest-timeout's signal method interrupted the case
        return data
    if outcomes.out_of_memory(exc):
        data.update({"outcome": "crash", "message": f"out of memory: {message}"})
        return data
    if report.when != "call" or outcomes.is_instance_named(exc, "harness.plugin.casekit.HarnessError"):
        data["outcome"] = "error"
        return data
    outcome, ref = outcomes.classify_exception(exc, declared)
    data.update({"outcome": outcome, "reference": ref})
    if ref:
        report.outcome = "skipped"  # pytest shows it as xfailed
        report.wasxfail = f"{ref}: {data['message']}"
    return data


# --- the runner -----------------------------------------------------------------------------------

class CaseRunner:
    def __init__(self, config, workerinput: dict | None):
        self.config = config
        self.reruns = max(config.getoption("case_reruns"), 0)
        workers = 1
        directory = None
        self.worker, self.workerinput = (workerinput["workerid"] if workerinput else "main"), workerinput
        self.caches: compilecaches.CaseCaches | None = None
        self.gathering: gathering.ForkedGathering | None = None  # the environment record's child, where asked
        if workerinput:
            workers = int(workerinput.get("workercount", 1))
            directory = workerinput.get("harness_worker_dir")
        self.log = WorkerLog(directory, self.worker) if directory else None
        self.memory = limits.memory_limit_bytes(config.getoption("memory_limit"), workers)
        self.previous_memory_limit: tuple[int, int] | None = None
        self.state: TorchState | None = None
        self.isolation = config.getoption("isolation")
        self.forking = self.isolation != "none" and hasattr(os, "fork")
        self.in_child = False
        if self.forking:  # before collection imports the cases (and whatever they import)
            try:
                cudaguard.guard_warm_process()
            except cudaguard.GpuUncountable as exc:
                raise pytest.UsageError(f"harness: {exc}") from None
        read_captured_output_with_replacement()

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionstart(self, session):
        if self.log is not None:
            self.log.capture()
        if self.worker != "main":
            # xdist's controller owns Ctrl-C (it stops handing out cases and writes the end record); a case that
            # interrupts its worker, or its own process (inherited by each case's process), costs nothing else.
            signal.signal(signal.SIGINT, signal.SIG_IGN)
        self.previous_memory_limit = limits.limit_memory(self.memory)
        # Made here, once: a forked child that made it first would make it anew, deleting what every
        # earlier case left there (with xdist the base is given, and pytest clears a given one).
        self.config._tmp_path_factory.getbasetemp()
        # The environment record's child, forked before what the record reads changes (the caches' variables).
        self.gathering = gathering.fork_where_cases_run(self.config, self.workerinput)
        self.caches = compilecaches.CaseCaches.install(self.config, self.worker)
        collecting_only = self.config.option.collectonly
        # Where a GPU is visible a compile here would initialise CUDA; collecting only, nothing will compile.
        warm_up(self.forking, compile_kernels=not collecting_only and not (self.forking and cudaguard.gpu_visible()))
        self.state = TorchState()
        self.caches.warmed_up()
        if self.forking and not collecting_only:
            reason = isolation.probe()
            if reason and self.isolation == "fork":
                raise pytest.UsageError(f"--isolation=fork: a forked child cannot run cases here: {reason}")
            if reason:  # --isolation=auto
                self.forking = False
                cudaguard.release()  # the cases run here, and may use CUDA here
                print(f"harness: cases share this process (a forked child cannot run them: {reason})",
                      file=sys.stderr)
            else:
                isolation.become_subreaper()  # what a case leaves running ends with it

    @pytest.hookimpl(tryfirst=True)  # before xdist's worker loop, or pytest's own, runs a case
    def pytest_runtestloop(self, session):
        """The warm process, as collection and every plugin left it, must fork children that find CUDA as
        a fresh process does: where it cannot, the run stops here with one line, before any case runs
        (a worker says why to the controller, which stops the run: `Interrupted: harness: ...`)."""
        if self.gathering is not None:  # ended before any case forks (the cases' leftovers are killed)
            self.gathering.wait()
        if not self.forking:
            return None
        try:
            cudaguard.probe()
        except cudaguard.WarmProcessSpoiled as exc:
            reason = f"harness: {exc}"
            print(reason, file=sys.stderr, flush=True)  # the worker's log
            if self.worker == "main":
                raise session.Interrupted(reason) from None
            session.shouldstop = reason
            return True
        finally:
            self.keep_guard_summary()
        return None

    def keep_guard_summary(self) -> None:
        """The CUDA guard's state beside the worker's log, for the results' records."""
        if self.log is not None:
            workerlog.write_guard_summary(self.log, cudaguard.summary())

    def pytest_sessionfinish(self, session):
        if self.gathering is not None:  # where no case ran (runtestloop waited for it otherwise)
            self.gathering.wait()
        self.keep_guard_summary()  # with what was refused after collection
        if self.forking:
            import gc

            gc.unfreeze()  # what was frozen for the children is this process's to collect again
        limits.restore_memory_limit(self.previous_memory_limit)  # pytester runs cases inside the test process
        if self.caches is not None:
            self.caches.uninstall()

    # pytest-timeout arms its timer around the protocol, in this process; with forked cases it is
    # armed in the case's own process instead (where a hang happens), by pytest-timeout itself.
    @pytest.hookimpl(tryfirst=True, optionalhook=True)
    def pytest_timeout_set_timer(self, item, settings):
        if self.forking and not self.in_child:
            item.stash[TIMER_SETTINGS] = settings
            return True
        return None

    @pytest.hookimpl(tryfirst=True, optionalhook=True)
    def pytest_timeout_cancel_timer(self, item):
        return True if self.forking and not self.in_child else None

    @contextlib.contextmanager
    def time_backstop(self, item):
        limit = time_limit(item)
        if limit:
            out = self.log.file if self.log is not None and self.log.file is not None else sys.__stderr__
            faulthandler.dump_traceback_later(backstop_after(limit), exit=True, file=out or sys.stderr)
        try:
            yield
        finally:
            if limit:
                faulthandler.cancel_dump_traceback_later()

    def attempt_here(self, item, nextitem) -> tuple[list, list[str]]:
        """One attempt in this process: from the clean state, in a working directory of its own,
        then the state put back."""
        assert self.state is not None  # pytest_sessionstart took it, before any case
        self.state.fresh()
        with self.time_backstop(item), WorkingDirectory(item) as workdir:
            reports = runtestprotocol(item, nextitem=nextitem, log=False)
        for report in reports:
            data = records.phase_of(report)
            if data is None:
                continue
            if workdir.kept is not None:
                data["workdir"] = str(workdir.kept)
            if self.log is not None and len(data.get("message") or "") > records.text_limit("message"):
                # The record keeps the message's ends; the whole of it goes to the worker log it names.
                os.write(2, f"\n=== harness: {report.when} of {item.nodeid}, in full\n{report.longreprtext}\n"
                         .encode(errors="replace"))
                data["log"] = str(self.log.path)
        return reports, self.state.restore()

    def attempt_forked(self, item) -> tuple[list, list[str]]:
        """One attempt in a child of this process (harness.plugin.isolation); its whole fixture stack is
        set up and torn down there."""
        def in_child():
            self.in_child = True
            settings = item.stash.get(TIMER_SETTINGS, None)
            if settings is not None:
                item.config.hook.pytest_timeout_set_timer(item=item, settings=settings)
            return self.attempt_here(item, None)

        limit = time_limit(item)
        hard = backstop_after(limit) + 30 if limit else None
        return isolation.ForkedAttempt(item, self.log, limit, hard).run(in_child)

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_protocol(self, item, nextitem):
        item.ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
        reruns = rerun_count(item, self.reruns)
        assert self.caches is not None  # pytest_sessionstart installed them, before any case
        attempts, leaked = [], []
        log_cut: list[str] = []
        while True:
            if self.log is not None:
                self.log.case_started(case_identity(item), time_limit(item))
            if self.forking and skipped_by_marks(item):  # no code of the case runs: no child to fork (CUDA variants)
                reports, left = self.attempt_here(item, None)
            else:
                case_id = case_identity(item)["case"]
                self.caches.enter_case(case_id)
                try:
                    reports, left = self.attempt_forked(item) if self.forking else self.attempt_here(item, nextitem)
                finally:
                    outside = self.caches.leave_case()
                left = left + outside
                if _outcome_of(reports)["outcome"] not in outcomes.CUT_SHORT:
                    self.caches.share_builds(case_id)
            if self.log is not None:
                log_cut += filter(None, [self.log.bound_case()])
            leaked += [thing for thing in left if thing not in leaked]
            final = _outcome_of(reports)
            attempts.append({k: final[k] for k in ("outcome", "exc_type", "message")})
            if final["outcome"] not in outcomes.RETRIED or len(attempts) > reruns:
                break
            log_as_rerun(item, reports)
            if not self.forking:
                reset_fixtures(item)
        for report in reports:
            data = records.phase_of(report)
            if data is not None and len(attempts) > 1:
                data["attempts"] = attempts
                if len({a["outcome"] for a in attempts}) > 1:
                    data["outcome"] = "flaky"
            if data is not None and leaked:
                data["leaked"] = leaked
            if data is not None and log_cut and self.log is not None:  # only a log cuts
                data.update({"log_cut": "; ".join(log_cut), "log": str(self.log.path)})
            item.ihook.pytest_runtest_logreport(report=report)
        item.ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
        return True

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item, call):
        if call.excinfo is not None and outcomes.out_of_memory(call.excinfo.value):
            # The case's frames still hold what filled the memory: free it before the report is built.
            traceback.clear_frames(call.excinfo.tb)
        result = yield
        report = result.get_result()
        data = classify_phase(item, call, report)
        records.attach_phase(report, data)
        if self.log is not None and data["metrics"]:
            self.log.phase_done(data["metrics"])
