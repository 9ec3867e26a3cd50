"""The CUDA guard of the warm process that forks cases (harness.plugin.cudaguard), against torch's own code
under stand-in driver libraries (tests/standin_gpu): torch's NVML count, its runtime fallback and its fork
marks run unchanged."""

import json
import os
import subprocess
import sys

import pytest

from harness.core import records
from harness.plugin import cudaguard
from tests import standin_gpu
from tests.conftest import ROOT
from tests.test_isolation import SESSION, run_session_command, session_env  # noqa: F401 (a fixture, used by name)

OK_CASE = "import torch\n\n\ndef test_compiled(case):\n    case.check(torch.sin, torch.randn(3, requires_grad=True))\n"


def survey(*args) -> dict:
    """tests/standin_gpu/survey.py in this suite's torch, under the stand-in GPU of the test."""
    done = subprocess.run([sys.executable, "-m", "tests.standin_gpu.survey", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=600, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


@pytest.mark.usefixtures("standin_gpu_env")
def test_every_cuda_entry_that_spoils_a_fork_is_refused_in_the_warm_process():
    spoilers = survey()
    # torch's own poisoning entries are among them, found by calling them, not by name
    assert {"_cuda_init", "_cuda_getDeviceCount", "_cuda_getArchFlags"} <= set(spoilers), spoilers
    assert spoilers["_cuda_getArchFlags"] == {"marks": True, "initialises": False}
    unguarded = sorted(set(spoilers) - set(cudaguard.REFUSED))
    assert not unguarded, f"entries of this torch that spoil a fork and the guard lets through: {unguarded}"
    assert survey("--guarded") == {}  # guarded as the harness guards its warm process: nothing spoils


@pytest.mark.usefixtures("standin_gpu_env", "session_env")
def test_nvml_that_cannot_count_the_machines_gpus_stops_the_run_with_one_line(pytester, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "MIG-4f0e1c2a-0000-5000-8000-000000000000")
    path = pytester.makepyfile(test_planted=OK_CASE)
    earlier = pytester.path / "results" / f"{SESSION.name}.jsonl"
    earlier.parent.mkdir()
    earlier.write_text('{"an": "earlier run"}\n')
    result, results_file, _ = run_session_command(pytester, path)
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str()[-2000:] + result.stderr.str()[-2000:]
    errors = [line for line in result.stderr.lines if line.startswith("ERROR")]
    assert errors == ["ERROR: harness: NVML cannot count this machine's GPUs (CUDA_VISIBLE_DEVICES names MIG devices "
                      "(MIG-4f0e1c2a-0000-5000-8000-000000000000)); torch would ask the CUDA runtime instead, and no "
                      "case's process forked after that could use CUDA. Name GPUs in CUDA_VISIBLE_DEVICES by index or "
                      "GPU- UUID, or repair NVML (nvidia-smi must work)"], result.stderr.str()[-3000:]
    assert results_file.read_text() == '{"an": "earlier run"}\n'


def test_without_nvml_and_without_a_gpu_nothing_is_guarded_and_nothing_stops(monkeypatch, tmp_path):
    """A CPU machine with torch's CUDA build and no NVML (this one): torch asks the runtime, which finds
    no GPU; the mark it sets spoils nothing a child could use."""
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    code = ("from harness.plugin import cudaguard\ncudaguard.guard_warm_process()\nimport torch, json\n"
            "print(json.dumps([cudaguard.summary(), torch.cuda.is_available()]))")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(ROOT), "LD_LIBRARY_PATH": str(tmp_path)})
    assert done.returncode == 0, done.stderr[-2000:]
    summary, available = json.loads(done.stdout.splitlines()[-1])
    if cudaguard.gpu_evidence():  # a machine with a GPU: this test's premise does not hold here
        pytest.skip(f"this machine has a GPU: {cudaguard.gpu_evidence()}")
    assert summary["nvml_count"] < 0 and not summary["guarded"] and available is False, summary


# In every process of the session: what of torch it had imported when it ended, in a file of its own.
TORCH_IMPORTED_PROBE = """
import json, os, sys


def pytest_unconfigure(config):
    role = config.workerinput["workerid"] if hasattr(config, "workerinput") else "controller"
    with open(os.path.join(os.path.dirname(__file__), f"torch-in-{role}.json"), "w") as out:
        json.dump(sorted(name for name in sys.modules if name.split(".")[0] == "torch"), out)
"""


@pytest.mark.usefixtures("session_env")
def test_without_a_gpu_the_controller_of_a_session_never_imports_torch(pytester):
    """xdist's controller runs no case. Where nothing says the machine has a GPU, its check before the
    workers start has nothing to ask NVML, and importing torch for it cost every session's start 4 s of
    CPU on this 2-core machine."""
    if cudaguard.gpu_evidence():
        pytest.skip(f"this machine has a GPU, which the controller must count: {cudaguard.gpu_evidence()}")
    pytester.makeconftest(TORCH_IMPORTED_PROBE)
    path = pytester.makepyfile(test_planted=OK_CASE)
    result, results_file, _ = run_session_command(pytester, path)
    assert result.ret == 0, result.stdout.str()[-2000:] + result.stderr.str()[-2000:]
    assert [r["outcome"] for r in records.read(results_file) if r["kind"] == "case"] == ["pass"]
    assert json.loads((pytester.path / "torch-in-gw0.json").read_text()), "the worker ran a torch case"
    assert json.loads((pytester.path / "torch-in-controller.json").read_text()) == []


@pytest.mark.usefixtures("standin_gpu_env")
def test_a_guarded_process_asks_nvml_whether_a_gpu_is_there(tmp_path):
    """Availability asked after the guard, in a process that has not imported Lightning (which sets the
    same switch at its import): NVML answers, nothing is refused, the driver is not initialised."""
    code = ("import os, json\nfrom harness.plugin import cudaguard\ncudaguard.guard_warm_process()\nimport torch\n"
            "print(json.dumps([torch.cuda.is_available(), torch.cuda.device_count(), cudaguard.summary(), "
            "os.getpid()]))")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr[-2000:]
    available, count, summary, pid = json.loads(done.stdout.splitlines()[-1])
    assert "lightning" not in done.stderr
    assert (available, count, summary["refused"]) == (True, 1, []), summary
    assert [c for c in standin_gpu.driver_calls(os.environ[standin_gpu.CUDA_LOG_ENV]) if c.pid == pid] == []
