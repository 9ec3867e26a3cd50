"""How the sessions' xdist controller hands cases to workers after a crash.

xdist's `load` scheduling, which already drops the case a worker died on (its file-grouping modes
hand that case to the replacement worker, which dies on it again: pytest-dev/pytest-xdist#1371),
with one change: the cases the dead worker had been given but not started go back to the front
of the queue rather than the end, so that every case runs in the same order as without the crash.
"""

from __future__ import annotations

from xdist.scheduler import LoadScheduling


class InOrderAfterCrash(LoadScheduling):
    def remove_node(self, node):
        pending = self.node2pending.pop(node)
        if not pending:
            return None
        crashitem = self.collection[pending.pop(0)]
        self.pending[:0] = pending  # xdist: self.pending.extend(pending)
        for other in self.node2pending:
            self.check_schedule(other)
        return crashitem


def pytest_xdist_make_scheduler(config, log):
    if config.getvalue("dist") == "load":
        return InOrderAfterCrash(config, log)
    return None
