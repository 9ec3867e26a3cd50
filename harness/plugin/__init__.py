"""pytest plugin of the harness (`-p harness.plugin`): its options, and which role each process plays.

- Where cases run (an xdist worker, or pytest's own process when nothing is distributed):
  `harness.plugin.runner.CaseRunner` runs each case and classifies its outcome.
- Where the results file is written (xdist's controller, or pytest's own process):
  `harness.plugin.recorder.ResultsRecorder` appends one record per case, crashed ones included.
- xdist's controller: `harness.plugin.scheduling` keeps the cases' order when a worker dies.

Loaded by cases/conftest.py, so plain `pytest cases/` records too. Everything in this folder runs in a
session's venv, and every module of it (with harness/core) is in the reuse key (harness.plugin.reuse).
"""

from __future__ import annotations

import json
import os
import pathlib
from collections.abc import Callable

import pytest

from harness.core import limits, paths
from harness.core.caseid import case_identity
from harness.plugin import lightning_use


def pytest_addoption(parser):
    group = parser.getgroup("harness")
    group.addoption("--results-dir", default=None,
                    help=f"where <session>.jsonl goes (default ${paths.RESULTS_ENV} or ./results)")
    group.addoption("--session-name", default=None,
                    help="results file name (default $HARNESS_SESSION, else local_torch<version>)")
    group.addoption("--case-reruns", type=int, default=limits.case_reruns(),
                    help="run a failing case this many more times; attempts that disagree make it `flaky` "
                         f"(default ${limits.RERUNS_ENV} or {limits.DEFAULT_RERUNS}; pytest-rerunfailures' --reruns "
                         "and flaky marker set it too where that plugin is installed)")
    group.addoption("--reuse-plan", default=None, metavar="PATH",
                    help="written by `python -m harness.plugin.reuse` (nox sessions): records to carry over from the "
                         "last run into this one, and the reuse keys to keep")
    group.addoption("--isolation", choices=("auto", "fork", "none"),
                    default=os.environ.get("HARNESS_ISOLATION", "auto"),
                    help="where each attempt of a case runs: `fork`, a child forked from the warm process, so "
                         "that no case meets what an earlier one changed (harness.plugin.isolation); `none`, the "
                         "process itself, with known torch state reset between cases; `auto` (default, or "
                         "$HARNESS_ISOLATION), fork where a forked child can run cases")
    group.addoption("--lightning-cases", action="store_true",
                    help="run only the cases that use Lightning (harness.plugin.lightning_use): "
                         "a Lightning-axis session")
    group.addoption("--cuda-cases", action="store_true",
                    help="run only the cases whose device is `cuda`: a CUDA session (the cells on the CPU of its "
                         "torch row are its CPU session's)")
    group.addoption("--memory-limit", default=limits.memory_limit(),
                    help="data memory of each process that runs cases: N%% of this machine's memory shared "
                         "by the workers, or a size such as 8G; 0 for none. A case that exceeds it is "
                         f"recorded as `crash` (out of memory) (default ${limits.MEMORY_LIMIT_ENV} or "
                         f"{limits.DEFAULT_MEMORY_LIMIT}%)")


def pytest_configure(config):
    _check_limits(config)
    config.addinivalue_line(
        "markers",
        "upstream_bug(ref, raises, match=None, since=None, until=None): a known upstream bug on torch "
        "`since` to `until` (inclusive, either open); there, the case is `known` when it fails with `raises` "
        "(a class name; `match` searched in the message) and `fixed` when it passes; elsewhere the "
        "declaration does not apply. Several markers of one ref may give one message per version range")
    config.addinivalue_line(
        "markers",
        "limitation(ref, raises, match=None, since=None, until=None): documented behaviour of torch.compile "
        "that rejects what the case does; the case is `limitation` when it raises that way, `pass` when it "
        "does not")
    config.addinivalue_line(
        "markers", "flaky(reruns=1): pytest-rerunfailures' marker, honoured without it: run a failing case "
        "up to `reruns` more times")
    config.addinivalue_line(
        "markers", f"{lightning_use.MARKER}: this parametrisation of a case that uses Lightning does not (a "
        "control): a Lightning-axis session does not run it")
    _adopt_rerunfailures_option(config)
    worker = getattr(config, "workerinput", None)
    distributing = xdist_distributes(config)
    if not distributing:
        from harness.plugin import runner

        config.pluginmanager.register(runner, "harness-case-fixture")
        config.pluginmanager.register(runner.CaseRunner(config, worker), "harness-runner")
    if worker is None:
        from harness.plugin.recorder import ResultsRecorder

        config.pluginmanager.register(ResultsRecorder(config), "harness-recorder")
    if distributing:
        from harness.plugin import cudaguard, scheduling

        if config.getoption("isolation") != "none":  # as each worker would, before any starts
            try:
                cudaguard.check_countable_before_workers()
            except cudaguard.GpuUncountable as exc:
                raise pytest.UsageError(f"harness: {exc}") from None

        config.pluginmanager.register(scheduling, "harness-scheduling")
        from harness.plugin.workerdeaths import WorkerDeaths

        config.pluginmanager.register(WorkerDeaths(), "harness-worker-deaths")


def _check_limits(config) -> None:
    """A memory limit or time limit that cannot be right is one line (xdist's controller says it before
    any worker starts), not a traceback in each worker."""
    from harness.core.errors import BadInput

    try:
        limits.memory_limit_bytes(config.getoption("memory_limit"))
    except BadInput as exc:
        raise pytest.UsageError(f"harness: {exc}") from None
    timeout = getattr(config.option, "timeout", None)
    if timeout is not None and float(timeout) < 0:
        raise pytest.UsageError(f"harness: --timeout {timeout}: a number of seconds, 0 or more (0: no limit)")


def xdist_distributes(config) -> bool:
    """Whether this process is xdist's controller, handing cases to workers: xdist's own condition
    (harness.plugin.runner is then in each worker). With --collect-only xdist starts no workers, and the
    cases are collected here, under the runner's guard as in a worker."""
    return (getattr(config, "workerinput", None) is None and getattr(config.option, "dist", "no") != "no"
            and bool(getattr(config.option, "tx", None)) and not config.option.collectonly)


Selection = Callable[[list], tuple[list, list]]  # items -> (chosen, deselected)


def pytest_collection_modifyitems(config, items):
    """--lightning-cases: the cases that do not use Lightning are deselected (their outcome does not
    depend on its release; the row's own session runs them). --cuda-cases: those that do not run on
    the GPU are (the row's CPU session runs them). --reuse-plan: those whose record is carried over are
    (every other case the file holds runs: one the last run never recorded too)."""
    selections: list[tuple[bool, Selection]] = [(config.getoption(option), select) for option, select in
                  (("lightning_cases", lightning_use.lightning_items), ("cuda_cases", cuda_items))]
    plan = config.getoption("reuse_plan")
    if plan:
        carried = {record["case"] for record in json.loads(pathlib.Path(plan).read_text())["carried"]}
        selections.append((True, lambda found: _not_carried(found, carried)))
    for wanted, select in selections:
        if wanted:
            chosen, others = select(items)
            if others:
                config.hook.pytest_deselected(items=others)
                items[:] = chosen


def _not_carried(items, carried: set) -> tuple[list, list]:
    """(the cases without a carried record, the others)."""
    running = [item for item in items if case_identity(item)["case"] not in carried]
    return running, [item for item in items if case_identity(item)["case"] in carried]


def cuda_items(items) -> tuple[list, list]:
    """(the cases whose `device` is cuda, the others)."""
    on_gpu = [item for item in items if case_identity(item)["params"].get("device") == "cuda"]
    return on_gpu, [item for item in items if item not in on_gpu]


def _adopt_rerunfailures_option(config) -> None:
    """With pytest-rerunfailures installed, its `--reruns N` sets how often a failing case runs
    again; the harness runs the attempts itself (each from a clean torch state), so that
    plugin's own loop is left idle."""
    reruns = getattr(config.option, "reruns", None)
    if config.pluginmanager.hasplugin("rerunfailures") and reruns is not None:
        config.option.case_reruns = reruns
        config.option.reruns = None


def pytest_report_teststatus(report):
    """An attempt that runs again: `R`, as pytest-rerunfailures shows it."""
    if report.outcome == "rerun":
        return "rerun", "R", ("RERUN", {"yellow": True})
