"""CUDA under fork isolation, tried on a machine without a GPU through stand-in driver libraries
(tests/standin_gpu: torch's own NVML count, runtime fallback and fork marks run unchanged): the warm
processes that fork cases never initialise CUDA and each case's process does; a warm process spoiled past
the guard stops the run with one line before any case; what the harness itself cannot do (a child forked
after CUDA was initialised, a child that cannot start) is the harness's `error`, never the case's `fail`.
Every run is the session's own pytest command."""

import json

import pytest

from tests import standin_gpu
from tests.standin_gpu.roles import warm_processes
from tests.test_isolation import case_records, run_session_command, session_env  # noqa: F401 (a fixture, used by name)

OK_CASE = """
import torch


def test_compiled(case):
    case.check(torch.sin, torch.randn(3, requires_grad=True))
"""

# torch's own entry, taken before the harness could guard it, as a C++ path of torch reaches the driver: it
# marks every child forked after it is called.
SPOILER = """
import torch

SPOIL = torch._C._cuda_getArchFlags


def {hook}:
    SPOIL()
"""


@pytest.mark.usefixtures("session_env")
def test_the_warm_processes_never_initialise_cuda_and_each_case_process_does(pytester, standin_gpu_env):
    # A real family: its collection reads the op database, and the warm-up runs, as on a GPU machine.
    cuda_log, roles_log = standin_gpu_env
    from tests.conftest import ROOT

    family = ROOT / "cases" / "test_checkpoint.py"
    result, results_file, _ = run_session_command(
        pytester, family, "-p", "tests.standin_gpu.roles", "--case-reruns=0",
        "-k", "test_plain_checkpoint and inductor and fullgraph or test_property_checkpoint_op and inductor")
    warm = warm_processes(roles_log)
    assert sorted(warm.values()) == ["gw0", "main"], warm
    calls = standin_gpu.driver_calls(cuda_log)
    from_warm = [(warm[c.pid], c.stack) for c in calls if c.pid in warm]
    assert not from_warm, f"a warm process initialised CUDA: {from_warm}"
    cases = case_records(results_file)
    assert len(cases) == 4 and len({c.pid for c in calls}) >= 4, (cases, calls)  # each case's process on its own
    assert not any(c.inherited for c in calls), [c for c in calls if c.inherited]
    # Behind the stand-in, CUDA fails as torch fails where the driver finds no device: the case's outcome.
    assert {r["outcome"] for r in cases} == {"fail"}, [(r["case"], r["message"]) for r in cases]
    assert all("harness" not in r["message"] for r in cases), [r["message"] for r in cases]
    assert "No CUDA GPUs are available" in cases[0]["message"]
    guard = results_file.read_text().splitlines()[0]  # the environment record
    summary = json.loads(guard)["cuda_guard"]
    assert list(summary) == ["gw0"] and summary["gw0"]["guarded"] and summary["gw0"]["refused"] == [], summary
    assert summary["gw0"]["probe"].startswith("CUDA fails in a fresh process as in a forked one: RuntimeError: "
                                              "No CUDA GPUs are available"), summary


@pytest.mark.usefixtures("session_env", "standin_gpu_env")
@pytest.mark.parametrize("mode", [["-n", "0"], ["--collect-only"], []], ids=["in_process", "collect_only", "xdist"])
def test_a_warm_process_spoiled_past_the_guard_stops_the_run_before_any_case(pytester, mode):
    pytester.makeconftest(SPOILER.format(hook="pytest_collection_finish(session)"))
    path = pytester.makepyfile(test_planted=OK_CASE)
    result, results_file, _ = run_session_command(pytester, path, *mode)
    output = result.stdout.str()
    assert result.ret == pytest.ExitCode.INTERRUPTED, output[-3000:]
    stops = [line for line in result.stdout.lines if "Interrupted: harness:" in line]
    assert (len(stops) == 1
            and "CUDA was reached in the warm process past the harness's guard" in stops[0]), output[-3000:]
    assert "passed" not in output and "failed" not in output and not results_file.exists()


REFUSED_AND_SWALLOWED = """
import torch


def pytest_collection_finish(session):
    try:
        torch.cuda.get_arch_list()  # as code that catches what it asked for
    except RuntimeError:
        pass
"""


@pytest.mark.usefixtures("session_env", "standin_gpu_env")
def test_a_refused_call_is_written_to_the_workers_log_and_the_environment_record(pytester):
    pytester.makeconftest(REFUSED_AND_SWALLOWED)
    path = pytester.makepyfile(test_planted=OK_CASE)
    result, results_file, _ = run_session_command(pytester, path, "--case-reruns=0")
    cases = case_records(results_file)
    environment = json.loads(results_file.read_text().splitlines()[0])
    (refusal,) = environment["cuda_guard"]["gw0"]["refused"]
    assert refusal["call"] == "torch._C._cuda_getArchFlags" and refusal["where"].endswith("in pytest_collection_finish")
    logs = list((results_file.parent / "logs").rglob("gw0.log"))
    assert any("harness: refused in the warm process: torch._C._cuda_getArchFlags" in p.read_text() for p in logs), logs
    assert [r["outcome"] for r in cases] == ["fail"] and "harness" not in cases[0]["message"], cases  # it ran


@pytest.mark.usefixtures("session_env")
@pytest.mark.parametrize("gpu", [True, False], ids=["gpu", "no_gpu"])
def test_a_case_process_forked_after_cuda_was_initialised_is_the_harness_error(pytester, request, gpu):
    if gpu:
        request.getfixturevalue("standin_gpu_env")
    # After the probe: what the warm process does between cases (a hook of another plugin, say).
    pytester.makeconftest(SPOILER.format(hook="pytest_runtest_logstart(nodeid, location)"))
    path = pytester.makepyfile(test_planted=OK_CASE)
    result, results_file, _ = run_session_command(pytester, path, "--case-reruns=0")
    (record,) = case_records(results_file)
    if not gpu:  # without a GPU torch's mark refuses nothing a child could use
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
