"""`-p tests.standin_gpu.roles`: each process that runs pytest's session (the warm ones: pytest's own,
each xdist worker) writes its pid and role to $STANDIN_ROLES_LOG, one JSON line, so that a test can tell
the stand-in driver's calls from warm processes from those of the processes they fork. It changes
nothing of torch."""

import json
import os

ROLES_LOG_ENV = "STANDIN_ROLES_LOG"


def pytest_sessionstart(session):
    worker = getattr(session.config, "workerinput", None)
    with open(os.environ[ROLES_LOG_ENV], "a", encoding="utf-8") as log:
        log.write(json.dumps({"pid": os.getpid(), "role": worker["workerid"] if worker else "main"}) + "\n")


def warm_processes(log) -> dict[int, str]:
    """The warm processes a run logged: pid -> role."""
    with open(log, encoding="utf-8") as lines:
        return {entry["pid"]: entry["role"] for entry in map(json.loads, lines)}
