"""The process that owns the results file (xdist's controller, or pytest's own process): one record
per case, appended and flushed as each case finishes, including cases whose worker died.

The results file is harness.core.paths.results_path of the session: $HARNESS_SESSION (set by nox),
else the local session the matrix names after the running torch.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import time
from collections.abc import Mapping
from typing import Any

import pytest

from harness.core import caseid, matrix, outcomes, paths, records, resultsfile, timings
from harness.core.pytestrun import WORKERS_BASIS_ENV
from harness.plugin import gathering, junit, workerlog
from harness.plugin.environment import recorded_session


def check_session_pins(name: str, gpu: bool = True) -> None:
    """Inside a matrix session, refuse to run (and to touch its results) if the pins drifted
    (`gpu=False`: collecting only, a CUDA session need not see a GPU)."""
    from harness.core import envcheck

    try:
        session = matrix.find(name)
    except matrix.MatrixError:
        return  # not a matrix session: record the environment as it is
    try:
        envcheck.check(session, gpu=gpu)
    except envcheck.EnvironmentMismatch as exc:
        raise pytest.UsageError(str(exc)) from None


def _exit_status(worker) -> int | None:
    """How a dead xdist worker ended (negative: the signal), where execnet can tell."""
    popen = workerlog.worker_process(worker)
    if popen is None:
        return None
    try:
        return popen.wait(timeout=10)
    except subprocess.TimeoutExpired:  # still dying: the record says it died, without its status
        return None


class ResultsRecorder:
    worker_dir: pathlib.Path  # the workers' logs of this run: made at the session's start, before any record
    def __init__(self, config) -> None:
        self.config = config
        self.writer: resultsfile.ResultsWriter | None = None
        self.environment: gathering.RecordSource | None = None
        self.pending: dict[str, list[records.PhaseData]] = {}
        self.durations: dict[str, float] = {}
        self.locations: dict[str, dict] = {}  # nodeid -> {"file", "line"} of its test function
        self.counts: dict[str, int] = {}
        self.times: dict = {"cases": {}}  # the session's times (harness.core.timings), held for its JUnit file

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionstart(self, session):
        self.name = recorded_session(self.config)
        check_session_pins(self.name, gpu=not self.config.option.collectonly)
        directory = self.config.getoption("results_dir") or paths.results_dir(self.config.rootpath)
        self.path = paths.results_path(self.name, directory)
        try:
            resultsfile.check_writable(self.path.parent)
        except records.ResultsError as exc:
            raise pytest.UsageError(str(exc)) from None
        # The file itself is opened with the first record: a run that records nothing
        # (a usage error, nothing collected) leaves an earlier file where it was. What is there now is
        # that earlier run's; a file there later that is not this one was written by a case.
        self.earlier = resultsfile.file_identity(self.path)
        self.environment = gathering.RecordSource(self.name, self.config)
        plan = self.config.getoption("reuse_plan")
        self.plan = json.loads(pathlib.Path(plan).read_text()) if plan else None
        self.started = time.time()
        # The workers' logs: what every case printed (a record keeps the ends of a long text and names
        # its log), beside the results, as long as they are kept (pytest's base temporary directory
        # keeps its last three runs only).
        run = time.strftime("%Y%m%dT%H%M%S", time.gmtime(self.started)) + f"-{os.getpid()}"
        self.worker_dir = paths.logs_dir(self.name, run, directory)
        self.worker_dir.mkdir(parents=True, exist_ok=True)

    # --- xdist: the controller's view of its workers ---

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node):
        """Tell each worker where to keep its output log, and the first where to write the environment record."""
        node.workerinput["harness_worker_dir"] = str(self.worker_dir)
        assert self.environment is not None  # made at the session's start, before xdist starts its workers
        self.environment.ask_worker(node, self.worker_dir / "environment.json")

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node, ids):
        self.collected = ids

    def pytest_collection_finish(self, session):
        """What this process collected, where it runs the cases itself (xdist's workers say theirs)."""
        if getattr(self.config.option, "dist", "no") == "no" or self.config.option.collectonly:
            self.collected = [item.nodeid for item in session.items]

    def pytest_collectreport(self, report):
        """A case file that cannot be collected is a record of its own, the harness's `error`, named after
        its file: the run's other files go on, and every later run collects it again until it can."""
        if not report.failed or self.config.option.collectonly:
            return
        lines = [line[1:].strip() for line in report.longreprtext.splitlines() if line.startswith("E ")]
        reason = lines[-1] if lines else (report.longreprtext.strip().splitlines() or ["?"])[-1]
        exc_type, _, message = reason.partition(": ")
        identity = caseid.collection_identity(caseid.nodeid_file(report.nodeid))
        data = records.phase_data(identity, "collect", "error", exc_type=exc_type if message else None,
                                  message=f"cannot collect {identity['nodeid']}: {reason}")
        self.counts["error"] = self.counts.get("error", 0) + 1
        self._write(records.case_record(data, metrics={}, duration=0.0, nodeid=identity["nodeid"], location=None))

    @pytest.hookimpl(optionalhook=True)
    def pytest_handlecrashitem(self, crashitem, report, sched):
        """A worker died running `crashitem`: the record says how, from what the worker printed.
        The scheduler does not hand the case to the next worker (see harness.plugin.scheduling)."""
        worker = report.node
        noted, output = workerlog.crashed_case(self.worker_dir, worker.gateway.id, crashitem)
        outcome, message = outcomes.crash_summary(output, _exit_status(worker), caseid.nodeid_file(crashitem),
                                                   noted.get("time_limit"))
        if "started" in noted:
            report.duration = time.time() - noted["started"]
        data, report.longrepr = workerlog.crash_phase(
            noted.get("identity") or caseid.identity_from_nodeid(crashitem), outcome, message, output,
            noted.get("metrics"), workerlog.WorkerLog(self.worker_dir, worker.gateway.id).path)
        records.attach_phase(report, data)

    def _unknown_cases(self) -> list[str]:
        """Node ids asked for on the command line that no worker collected (pytest itself says
        so only without xdist)."""
        collected = getattr(self, "collected", None)
        if collected is None:
            return []
        asked = [arg for arg in self.config.args if caseid.is_nodeid(arg)]
        return [arg for arg in asked
                if not any(c == arg or c.startswith((arg + "[", arg + "::")) for c in collected)]

    # --- records ---

    def _write(self, record: Mapping[str, Any]) -> None:
        """A record into the results file, its times into the timings file beside it."""
        record, times = timings.split(record)
        if self.writer is None:
            try:
                self.writer = resultsfile.ResultsWriter(self.path, earlier=self.earlier)
            except records.ResultsError as exc:
                raise pytest.UsageError(str(exc)) from None
            self.timings = timings.Writer(self.path)
            # The JUnit file beside it was the earlier run's: a run stopped before its end must not leave it.
            self.path.with_suffix(".xml").unlink(missing_ok=True)
            assert self.environment is not None  # made at the session's start, before any record
            environment = self.environment.result()
            environment["workers"] = {"count": getattr(self.config.option, "numprocesses", None) or 0,
                                      "basis": os.environ.get(WORKERS_BASIS_ENV)}
            if self.plan is not None:
                environment.update(reuse_keys=self.plan["keys"], reuse_sources=self.plan["sources"])
            self.guards = environment["cuda_guard"] = self._guard_summaries()
            self.writer.write(environment)
        self.writer.write(record)
        if times is not None and not record.get("reused_from"):  # a carried record was not timed in this run
            self.timings.write(times)
            if times["kind"] == "case":
                self.times["cases"][times["case"]] = {k: v for k, v in times.items() if k not in ("kind", "case")}
            else:
                self.times.update({k: v for k, v in times.items() if k != "kind"})

    def _guard_summaries(self) -> dict:
        """What the CUDA guard of each process that ran cases found (harness.plugin.cudaguard): the
        workers' from beside their logs, or this process's own where it runs the cases."""
        if self.config.pluginmanager.get_plugin("harness-runner") is not None:
            from harness.plugin import cudaguard

            return {"main": cudaguard.summary()}
        return workerlog.guard_summaries(self.worker_dir)

    def _refused_since_start(self) -> list[dict]:
        """Refusals of the CUDA guard that the environment record could not yet hold, by worker."""
        before = getattr(self, "guards", None) or {}
        late = []
        for worker, summary in self._guard_summaries().items():
            known = (before.get(worker) or {}).get("refused") or []
            late += [{"worker": worker, **r} for r in summary.get("refused", [])[len(known):]]
        return late

    def pytest_runtest_logstart(self, nodeid, location):
        """Where the case's function is (xdist forwards this before the case runs: a crash has it too)."""
        if location and location[1] is not None:
            self.locations[nodeid] = {"file": location[0], "line": location[1] + 1}

    def pytest_runtest_logreport(self, report):
        data = records.phase_of(report)
        if data is None:
            return
        self.pending.setdefault(report.nodeid, []).append(data)
        self.durations[report.nodeid] = self.durations.get(report.nodeid, 0.0) + report.duration
        if data["phase"] in ("teardown", "crash"):
            self._finish(report.nodeid)

    def _finish(self, nodeid: str) -> None:
        phases = self.pending.pop(nodeid)
        worst = outcomes.worst(phases, outcome=lambda phase: phase["outcome"])
        metrics: dict = {}
        for phase in phases:
            metrics.update(phase.get("metrics") or {})
        record = records.case_record(worst, metrics=metrics, duration=round(self.durations.pop(nodeid, 0.0), 4),
                                     nodeid=nodeid, location=self.locations.pop(nodeid, None))
        self.counts[record["outcome"]] = self.counts.get(record["outcome"], 0) + 1
        self._write(record)

    def pytest_sessionfinish(self, session, exitstatus):
        unknown = self._unknown_cases()
        if unknown:
            # workers collected only what was asked for: `python -m harness repro ID` names the closest
            self.config.get_terminal_writer().line(f"ERROR: unknown case {unknown[0]}", red=True)
            session.exitstatus = pytest.ExitCode.USAGE_ERROR
        if self.environment is None:
            return
        for nodeid in list(self.pending):  # reported but never torn down
            self._finish(nodeid)
        carried = self.plan["carried"] if self.plan else []
        for record in carried:  # measured in an earlier run; each says which
            self.counts[record["outcome"]] = self.counts.get(record["outcome"], 0) + 1
            self._write({k: v for k, v in record.items() if k != "schema"})
        if any(r["outcome"] in outcomes.HARD for r in carried) and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED  # a failure stays one when it is carried over
        if self.writer is None:  # nothing recorded (collect-only, a usage error): no logs to point to
            workerlog.remove_run(self.worker_dir)
            return
        end = records.end_record(int(session.exitstatus), self.counts, len(carried),
                                 round(time.time() - self.started, 2))
        stopped = session.shouldstop or session.shouldfail
        if stopped or int(session.exitstatus) in records.STOPPED_EXIT:
            end["interrupted"] = (str(stopped) if isinstance(stopped, str)
                                  else f"pytest exit status {int(session.exitstatus)}")
        recorded = {r.get("nodeid") for r in self.writer.records() if r.get("kind") == "case"}
        missing = [nodeid for nodeid in getattr(self, "collected", None) or [] if nodeid not in recorded]
        if missing:  # collected and never recorded: the run is not complete, and a later one runs them
            end.update({"missing": len(missing), "missing_cases": missing[:records.MISSING_NAMED]})
        late = self._refused_since_start()
        if late:  # the environment record was written before these: the run's whole story is here
            end["cuda_refused"] = late
        foreign = self.writer.count_foreign()
        if foreign["lines"] or foreign["files"] or self.writer.remade:
            end["foreign"] = {**foreign, "remade": self.writer.remade}
            records.warn(f"{self.path}: written into by something other than the harness during the session: "
                         f"{foreign['lines']} foreign line(s), {len(foreign['files'])} file(s) set aside, "
                         f"made again {self.writer.remade} time(s)")
        try:
            self._write(end)
        except (records.ResultsError, pytest.UsageError) as exc:  # the records so far are on disk; say what was not
            self.config.get_terminal_writer().line(f"ERROR: harness: the end record was not written: {exc}", red=True)
            session.exitstatus = pytest.ExitCode.INTERNAL_ERROR
        finally:
            self.writer.close()
            self.timings.close()
        # From the session's own records: never from the file, which a case's process may have changed.
        try:
            junit.write(self.path.with_suffix(".xml"), timings.merged(self.writer.records(), self.times))
        except OSError as exc:
            self.config.get_terminal_writer().line(f"ERROR: harness: no JUnit file written: {exc}", red=True)
            session.exitstatus = pytest.ExitCode.INTERNAL_ERROR
        workerlog.prune(self.worker_dir, [record.get("log") for record in self.writer.records()])

    def pytest_terminal_summary(self, terminalreporter):
        if self.environment is not None:
            counts = ", ".join(f"{n} {k}" for k, n in sorted(self.counts.items()))
            where = self.writer.path if self.writer else "no results file written"
            terminalreporter.write_line(f"harness: {counts or 'no cases'} -> {where}")
