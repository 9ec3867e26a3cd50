"""xdist's controller: workers that die before they run any case stop the session, with one line.

A dead worker is replaced (`--max-worker-restart`), which is right when a case killed it: that case is
recorded as `crash` and is never handed out again, so such restarts are bounded by the cases. A worker that
dies before running a case (a full disk, no memory left at its start, a plugin that kills it) dies again in
its replacement, without end: after STARTUP_DEATHS in a row the session stops, saying the last reason, and
xdist's own teardown ends every worker.
"""

from __future__ import annotations

import pytest

STARTUP_DEATHS = 3


class WorkerDeaths:
    def __init__(self):
        self.in_a_row = 0

    def pytest_runtest_logreport(self, report):
        # A case's report, also the one xdist makes of the case a worker died on (after this death was
        # counted below): the workers can start, and a case's death costs that case.
        self.in_a_row = 0

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node, error):
        if error is None:  # it finished
            return
        self.in_a_row += 1
        if self.in_a_row >= STARTUP_DEATHS:
            last = (str(error).strip().splitlines() or ["no reason given"])[-1]
            pytest.exit(f"harness: {self.in_a_row} workers in a row died before running a case (the last: {last}); "
                        "the session stops", returncode=pytest.ExitCode.INTERNAL_ERROR)
