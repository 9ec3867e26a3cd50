"""A GPU that is not there, for a machine without one (`-p tests.fake_gpu`): torch reports one device,
and every initialisation of CUDA is written to $FAKE_GPU_LOG (one JSON line: the process that asked,
and where) before it goes on as it would have (the harness's guard in a warm process; torch's own,
which finds no driver here, elsewhere). What a test reads from it is who asked for CUDA, not what a
GPU computes: behind the fake, everything that reaches CUDA fails."""

from __future__ import annotations

import json
import os
import traceback

import pytest
import torch

LOG_ENV = "FAKE_GPU_LOG"
ROLE_ENV = "FAKE_GPU_ROLE"  # a test's own label for the process, written beside its pid

torch.cuda.is_available = lambda: True
torch.cuda.device_count = lambda: 1


def _where() -> str:
    frames = [f for f in traceback.extract_stack()[:-2] if f"{os.sep}torch{os.sep}" not in f.filename]
    return f"{frames[-1].filename}:{frames[-1].lineno}" if frames else "?"


@pytest.hookimpl(trylast=True)  # after the harness's plugin has guarded its warm process: wraps that guard
def pytest_configure(config):
    inner = torch._C._cuda_init

    def logged_init():
        with open(os.environ[LOG_ENV], "a", encoding="utf-8") as log:
            log.write(json.dumps({"pid": os.getpid(), "where": _where()}) + "\n")
        return inner()

    torch._C._cuda_init = logged_init


def pytest_sessionstart(session):
    """The pid of each process that runs pytest's session here (the warm ones), by role."""
    worker = getattr(session.config, "workerinput", None)
    role = worker["workerid"] if worker else "main"
    with open(os.environ[LOG_ENV], "a", encoding="utf-8") as log:
        log.write(json.dumps({"pid": os.getpid(), "warm": role}) + "\n")
