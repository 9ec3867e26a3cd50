"""pytest plugin: classifies each case's outcome and appends one JSON record per case.

Loaded by cases/conftest.py, so plain `pytest cases/` records too. The results file is
`<results dir>/<session>.jsonl`; the session is $HARNESS_SESSION (set by nox), else a
name derived from the running torch.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import time

import pytest
from _pytest.runner import runtestprotocol

from harness import isolation, records

# torch is imported only where cases run (the xdist worker): the controller starts the
# workers without waiting for its own torch import, which the environment record does in a thread.

SESSION_ENV = "HARNESS_SESSION"
CASE_PARAMS = ("device", "backend", "fullgraph", "variant", "dtype")


def pytest_addoption(parser):
    group = parser.getgroup("harness")
    group.addoption("--results-dir", default=None,
                    help=f"where results/<session>.jsonl goes (default ${records.RESULTS_ENV} or ./results)")
    group.addoption("--session-name", default=None,
                    help=f"results file name (default ${SESSION_ENV}, else local_torch<version>)")
    group.addoption("--reruns", type=int, default=int(os.environ.get("HARNESS_RERUNS", "1")),
                    help="run a failing case this many more times; differing outcomes make it `flaky` (default 1)")


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "upstream_bug(ref, raises, match=None): a known upstream bug; the case is `known` when it "
        "fails with `raises` (a class name; `match` searched in the message), `fixed` when it passes",
    )
    worker = getattr(config, "workerinput", None)
    config.pluginmanager.register(CaseRunner(config, worker), "harness-runner")
    if worker is None:  # the controller (or a run without xdist) writes the results file
        config.pluginmanager.register(ResultsRecorder(config), "harness-recorder")


def session_name(config) -> str:
    name = config.getoption("--session-name") or os.environ.get(SESSION_ENV)
    if name:
        return name
    import torch

    return "local_torch" + re.sub(r"[^0-9A-Za-z.]+", "_", torch.__version__)


def _check_session_pins(name: str) -> None:
    """Inside a matrix session, refuse to run (and to touch its results) if the pins drifted."""
    from harness import envcheck, matrix

    try:
        session = matrix.find(name)
    except matrix.MatrixError:
        return  # not a matrix session: record the environment as it is
    try:
        envcheck.check(session)
    except envcheck.EnvironmentMismatch as exc:
        raise pytest.UsageError(str(exc)) from None


# --- outcome classification (runs where the case runs: here or in an xdist worker) ---

def _qualname(cls) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _exception_chain(exc: BaseException):
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


def _first_line(exc: BaseException) -> str:
    """The exception's first line; when it only announces what follows ("backend='x' raised:"),
    the next line too."""
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    if not lines:
        return ""
    return f"{lines[0]} {lines[1]}" if lines[0].endswith(":") and len(lines) > 1 else lines[0]


def _is_instance_named(exc: BaseException, name: str) -> bool:
    return any(name in (cls.__name__, _qualname(cls)) for cls in type(exc).__mro__)


def match_upstream_bug(item, exc: BaseException):
    """The upstream_bug marker that `exc` (or an exception it was raised from) matches."""
    for marker in item.iter_markers("upstream_bug"):
        ref = marker.args[0] if marker.args else marker.kwargs["ref"]
        raises = marker.kwargs.get("raises") or (marker.args[1] if len(marker.args) > 1 else None)
        pattern = marker.kwargs.get("match")
        names = raises if isinstance(raises, (list, tuple)) else [raises]
        names = [n if isinstance(n, str) else n.__name__ for n in names]
        for candidate in _exception_chain(exc):
            if any(_is_instance_named(candidate, n) for n in names) and (
                pattern is None or re.search(pattern, str(candidate))
            ):
                return ref
    return None


def _upstream_refs(item) -> list[str]:
    return [m.args[0] if m.args else m.kwargs["ref"] for m in item.iter_markers("upstream_bug")]


def _without_test_prefix(name: str) -> str:
    """`test_checkpoint` -> `checkpoint`: file and function names give family and variant."""
    return name[len("test_"):] if name.startswith("test_") else name


def case_identity(item) -> dict:
    family = _without_test_prefix(pathlib.Path(str(item.fspath)).stem)
    variant = _without_test_prefix(getattr(item, "originalname", None) or item.name.split("[")[0])
    callspec = getattr(item, "callspec", None)
    raw = dict(callspec.params) if callspec else {}
    params = {key: _plain(raw[key]) for key in CASE_PARAMS if key in raw}
    params.setdefault("variant", variant)
    extra = {k: _plain(v) for k, v in raw.items() if k not in CASE_PARAMS}
    if extra:
        params["extra"] = extra
    case_id = f"{family}/{variant}" + (f"[{callspec.id}]" if callspec else "")
    return {"case": case_id, "family": family, "params": params, "nodeid": item.nodeid}


def _plain(value):
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return str(value).replace("torch.", "")


def _classify(item, call, report) -> dict:
    upstream = _upstream_refs(item)
    data = {"phase": report.when, "upstream": upstream, "exc_type": None, "message": None}
    if report.skipped and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        data.update(outcome="skip", message=reason.removeprefix("Skipped: "))
        return data
    if report.passed:
        data["outcome"] = "fixed" if (report.when == "call" and upstream) else "pass"
        if data["outcome"] == "fixed":
            report.wasxfail = f"fixed upstream? {', '.join(upstream)} no longer reproduces"
        return data
    exc = call.excinfo.value if call.excinfo else None
    if exc is not None:
        data.update(exc_type=_qualname(type(exc)), message=_first_line(exc))
    if exc is not None and _is_instance_named(exc, "Failed") and data["message"].startswith("Timeout"):
        data["outcome"] = "timeout"  # pytest-timeout interrupted the case
        return data
    if report.when != "call" or (exc is not None and _is_instance_named(exc, "harness.casekit.HarnessError")):
        data["outcome"] = "error"
        return data
    ref = match_upstream_bug(item, exc) if exc is not None else None
    if ref:
        data.update(outcome="known", upstream=[ref] + [u for u in upstream if u != ref])
        report.outcome = "skipped"  # shown by pytest as xfailed
        report.wasxfail = f"{ref}: {data['message']}"
    else:
        data["outcome"] = "fail"
    return data


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    data = _classify(item, call, report)
    data.update(case_identity(item))
    run = item.stash.get(CASE_RUN, None)
    data["metrics"] = dict(run.metrics) if run is not None else {}
    report.user_properties.append(("harness", data))


# --- running each case (where cases run: an xdist worker, or the only process) ---

RERUN_ON = {"fail", "error"}


def _harness_data(report) -> dict | None:
    return next((v for k, v in reversed(report.user_properties) if k == "harness"), None)


def _outcome_of(reports) -> dict:
    """The worst phase of one attempt, as the record will show it."""
    phases = [d for d in map(_harness_data, reports) if d is not None]
    return max(phases, key=lambda d: _SEVERITY[d["outcome"]])


class CaseRunner:
    """Runs each case between a saved and a restored torch state, reruns a failing case, and
    in an xdist worker sends its output to a log the controller reads if the worker dies."""

    def __init__(self, config, workerinput):
        self.config = config
        self.reruns = max(config.getoption("--reruns"), 0)
        self.worker = workerinput.get("workerid") if workerinput else None
        directory = workerinput.get("harness_worker_dir") if workerinput else None
        self.worker_dir = pathlib.Path(directory) if directory else None
        if self.worker_dir is not None:
            isolation.redirect_worker_output(self.worker_dir, self.worker)

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_protocol(self, item, nextitem):
        identity = case_identity(item)
        if self.worker_dir is not None:
            isolation.mark_case_start(self.worker_dir, self.worker, identity)
        item.ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
        state = isolation.TorchState()
        state.fresh()
        attempts, leaked = [], []
        while True:
            reports = runtestprotocol(item, nextitem=nextitem, log=False)
            leaked += [thing for thing in state.restore() if thing not in leaked]
            final = _outcome_of(reports)
            attempts.append({k: final[k] for k in ("outcome", "exc_type", "message")})
            if final["outcome"] not in RERUN_ON or len(attempts) > self.reruns:
                break
            item._initrequest()  # fresh fixtures for the next attempt
        for report in reports:
            data = _harness_data(report)
            if data is None:
                continue
            if len(attempts) > 1:
                data["attempts"] = attempts
                if len({a["outcome"] for a in attempts}) > 1:
                    data["outcome"] = "flaky"
            if leaked:
                data["leaked"] = leaked
        for report in reports:
            item.ihook.pytest_runtest_logreport(report=report)
        item.ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
        return True


CASE_RUN = pytest.StashKey["CaseRun"]()


@pytest.fixture
def case(request):
    """The running case: `case.check(fn, *inputs)` compares eager and compiled runs."""
    from harness.casekit import CaseRun

    run = CaseRun(case_identity(request.node)["params"])
    request.node.stash[CASE_RUN] = run
    return run


# --- writing records (runs in the process that owns the results file) ---

# When several phases report, the worst one names the case's outcome.
_SEVERITY = {"pass": 0, "fixed": 1, "skip": 2, "known": 3, "fail": 4, "flaky": 5, "error": 6, "timeout": 7, "crash": 8}


def identity_from_nodeid(nodeid: str) -> dict:
    """What a case's record needs when its worker died before telling."""
    path, _, name = nodeid.partition("::")
    family = _without_test_prefix(pathlib.PurePath(path).stem)
    function, _, params = name.partition("[")
    variant = _without_test_prefix(function)
    return {"case": f"{family}/{variant}" + (f"[{params}" if params else ""), "family": family,
            "params": {"variant": variant}, "nodeid": nodeid}


class EnvironmentProbe:
    """`python -m harness.environment SESSION` in the background: the environment record."""

    def __init__(self, name: str):
        self.process = subprocess.Popen([sys.executable, "-m", "harness.environment", name],
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                        cwd=pathlib.Path(__file__).resolve().parent.parent)
        self.record = None

    def result(self) -> dict:
        if self.record is None:
            out, err = self.process.communicate()
            if self.process.returncode != 0:
                raise pytest.UsageError(f"cannot read this environment: {err.strip().splitlines()[-1:]}")
            self.record = json.loads(out)
        return self.record


class ResultsRecorder:
    def __init__(self, config):
        self.config = config
        self.writer = None
        self.environment = None
        self.pending: dict[str, list[dict]] = {}
        self.durations: dict[str, float] = {}
        self.counts: dict[str, int] = {}
        self.worker_dir = None

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionstart(self, session):

        self.name = session_name(self.config)
        _check_session_pins(self.name)
        directory = self.config.getoption("--results-dir") or records.results_dir(self.config.rootpath / "results")
        self.path = pathlib.Path(directory) / f"{self.name}.jsonl"
        try:
            records.check_writable(self.path.parent)
        except records.ResultsError as exc:
            raise pytest.UsageError(str(exc)) from None
        # The file itself is opened with the first record: a run that records nothing
        # (a usage error, nothing collected) leaves an earlier file where it was. The record
        # (torch import, collect_env) is gathered by another process while the workers start.
        self.environment = EnvironmentProbe(self.name)
        self.started = time.time()
        self.worker_dir = pathlib.Path(tempfile.mkdtemp(prefix=f"harness-{self.name}-"))

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node, ids):
        self.collected = ids

    def _unknown_cases(self) -> list[str]:
        """Node ids asked for on the command line that no worker collected (pytest itself says
        so only without xdist)."""
        collected = getattr(self, "collected", None)
        if collected is None:
            return []
        asked = [arg for arg in self.config.args if "::" in arg]
        return [arg for arg in asked
                if not any(c == arg or c.startswith((arg + "[", arg + "::")) for c in collected)]

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node):
        """xdist: tell each worker where to keep its output log."""
        node.workerinput["harness_worker_dir"] = str(self.worker_dir)

    def _write(self, record: dict) -> None:
        if self.writer is None:
            try:
                self.writer = records.ResultsWriter(self.path)
            except records.ResultsError as exc:
                raise pytest.UsageError(str(exc)) from None
            self.writer.write(self.environment.result())
        self.writer.write(record)

    def pytest_runtest_logreport(self, report):
        if report.when == "???":  # xdist: the worker died while running this case
            self._record_crash(report)
            return
        data = _harness_data(report)
        if data is None:
            return
        data = dict(data, phase=report.when)
        self.pending.setdefault(report.nodeid, []).append(data)
        self.durations[report.nodeid] = self.durations.get(report.nodeid, 0.0) + report.duration
        if report.when == "teardown":
            self._finish(report.nodeid)

    def _record_crash(self, report) -> None:
        worker = report.node.gateway.id
        identity, output = isolation.crashed_case(self.worker_dir, worker, report.nodeid)
        identity = identity or identity_from_nodeid(report.nodeid)
        outcome, message = isolation.crash_summary(output)
        self.pending.pop(report.nodeid, None)
        self._emit({**identity, "outcome": outcome, "exc_type": None, "message": message,
                    "upstream": [], "metrics": {}, "output_tail": isolation.shorten(output)}, report.nodeid)

    def _finish(self, nodeid: str) -> None:
        phases = self.pending.pop(nodeid)
        worst = max(phases, key=lambda d: _SEVERITY[d["outcome"]])
        metrics = {}
        for phase in phases:
            metrics.update(phase.get("metrics") or {})
        extra = {key: worst[key] for key in ("attempts", "leaked") if key in worst}
        self._emit({**worst, "metrics": metrics, **extra}, nodeid)

    def _emit(self, data: dict, nodeid: str) -> None:
        record = {
            "kind": "case",
            "case": data["case"],
            "family": data["family"],
            "params": data["params"],
            "outcome": data["outcome"],
            "exc_type": data["exc_type"],
            "message": data["message"],
            "upstream": data["upstream"],
            "metrics": data["metrics"],
            "duration": round(self.durations.pop(nodeid, 0.0), 4),
            "nodeid": nodeid,
        }
        for key in ("attempts", "leaked", "output_tail"):
            if key in data:
                record[key] = data[key]
        self.counts[record["outcome"]] = self.counts.get(record["outcome"], 0) + 1
        self._write(record)

    def pytest_sessionfinish(self, session, exitstatus):
        if self.worker_dir is not None:
            shutil.rmtree(self.worker_dir, ignore_errors=True)
        unknown = self._unknown_cases()
        if unknown:
            # workers collected only what was asked for: `python -m harness repro ID` names the closest
            self.config.get_terminal_writer().line(f"ERROR: unknown case {unknown[0]}", red=True)
            session.exitstatus = pytest.ExitCode.USAGE_ERROR
        if self.environment is None:
            return
        for nodeid in list(self.pending):  # reported but never torn down
            self._finish(nodeid)
        if self.writer is None:
            return
        self.writer.write({
            "kind": "end",
            "exitstatus": int(exitstatus),
            "counts": self.counts,
            "seconds": round(time.time() - self.started, 2),
        })
        self.writer.close()

    def pytest_terminal_summary(self, terminalreporter):
        if self.environment is not None:
            counts = ", ".join(f"{n} {k}" for k, n in sorted(self.counts.items()))
            where = self.writer.path if self.writer else "no results file written"
            terminalreporter.write_line(f"harness: {counts or 'no cases'} -> {where}")
