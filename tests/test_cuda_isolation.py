"""CUDA under fork isolation, tried on a machine without a GPU: the warm processes that fork cases never
initialise CUDA (a fake GPU, tests/fake_gpu.py, makes torch see one and logs who asks for CUDA), and
what the harness itself cannot do (a child forked after CUDA was initialised, a child that cannot start)
is the harness's `error`, never the case's `fail`. Every run is the session's own pytest command."""

import json

import pytest

from tests.test_isolation import case_records, run_session_command, session_env  # noqa: F401 (a fixture, used by name)

OK_CASE = """
import torch


def test_compiled(case):
    case.check(torch.sin, torch.randn(3, requires_grad=True))
"""


def cuda_requests(log) -> tuple[dict, list[dict]]:
    """The fake GPU's log: the warm processes by pid, and each request for CUDA."""
    entries = [json.loads(line) for line in log.read_text().splitlines()]
    warm = {e["pid"]: e["warm"] for e in entries if "warm" in e}
    return warm, [e for e in entries if "where" in e]


@pytest.mark.usefixtures("session_env")
def test_the_warm_processes_never_initialise_cuda_and_each_case_process_does(pytester, monkeypatch):
    # A real family: its collection reads the op database, and the warm-up runs, as on a GPU machine.
    log = pytester.path / "cuda.log"
    monkeypatch.setenv("FAKE_GPU_LOG", str(log))
    from tests.conftest import ROOT

    family = ROOT / "cases" / "test_checkpoint.py"
    result, results_file, _ = run_session_command(
        pytester, family, "-p", "tests.fake_gpu", "--case-reruns=0",
        "-k", "test_plain_checkpoint and inductor and fullgraph or test_property_checkpoint_op and inductor")
    warm, requests = cuda_requests(log)
    assert set(warm.values()) == {"main", "gw0"}, warm
    from_warm = [r for r in requests if r["pid"] in warm]
    assert not from_warm, f"a warm process asked for CUDA: {from_warm}"
    cases = case_records(results_file)
    asked = {r["pid"] for r in requests}
    assert len(cases) == 4 and len(asked) >= 4, (cases, requests)  # each case's process asked on its own
    # Behind the fake, CUDA fails as torch fails without a driver: the case's outcome, not the harness's.
    assert {r["outcome"] for r in cases} == {"fail"}, [(r["case"], r["message"]) for r in cases]
    assert all("harness" not in r["message"] for r in cases), [r["message"] for r in cases]
    assert "NVIDIA driver" in cases[0]["message"]


BAD_FORK = """
import os

import torch

WARM = os.getpid()


def pytest_sessionstart(session):
    # As if the warm process had initialised CUDA before the harness could guard it: torch marks its
    # forked children so, and refuses them CUDA. (Without a GPU, torch marks them whenever the
    # runtime was asked for the device count, as it is here: that mark refuses nothing to use.)
    torch.cuda.is_available = lambda: {gpu}
    torch.cuda._is_in_bad_fork = lambda: os.getpid() != WARM
"""


@pytest.mark.usefixtures("session_env")
@pytest.mark.parametrize("gpu", [True, False], ids=["gpu", "no_gpu"])
def test_a_case_process_forked_after_cuda_was_initialised_is_the_harness_error(pytester, gpu):
    pytester.makeconftest(BAD_FORK.format(gpu=gpu))
    path = pytester.makepyfile(test_planted=OK_CASE)
    result, results_file, _ = run_session_command(pytester, path, "--case-reruns=0")
    (record,) = case_records(results_file)
    if not gpu:
        assert record["outcome"] == "pass", record
        return
    assert record["outcome"] == "error", record
    assert record["message"] == ("the harness could not run the case: starting the case's process raised "
                                 "HarnessFault: CUDA was initialised in the warm process before it forked this "
                                 "case's process, which therefore cannot use CUDA"), record["message"]


NO_FORK = """
import os


def pytest_collection_finish(session):
    # After the harness's start-up (which forks once, to probe): no process can be started any more.
    def refused():
        raise BlockingIOError(11, "Resource temporarily unavailable")

    os.fork = refused
"""


@pytest.mark.usefixtures("session_env")
@pytest.mark.parametrize("reruns", [0, 1])
def test_a_case_process_that_cannot_start_is_the_harness_error(pytester, reruns):
    pytester.makeconftest(NO_FORK)
    path = pytester.makepyfile(test_planted=OK_CASE)
    result, results_file, _ = run_session_command(pytester, path, f"--case-reruns={reruns}")
    (record,) = case_records(results_file)
    assert record["outcome"] == "error", record
    assert record["message"] == ("the harness could not run the case: starting the case's process raised "
                                 "BlockingIOError: [Errno 11] Resource temporarily unavailable"), record["message"]
