import importlib.metadata
import re
import subprocess
import sys

import pytest
import torch

from harness.core import envcheck, matrix
from tests.conftest import ROOT

SESSIONS = matrix.load()


def found(**overrides):
    base = {"torch": "2.5.1+cu124", "cuda": "12.4", "cuda_available": True,
            "lightning": "2.4.0", "pytorch-lightning": "2.4.0"}
    return {**base, **overrides}


@pytest.mark.parametrize(
    ("session", "installed", "problem"),
    [
        ("cpu_torch25", found(), None),
        ("cpu_torch25", found(cuda=None), None),  # a CPU build is fine for a CPU session
        ("cuda12_torch25", found(), None),
        ("cpu_torch25", found(torch="2.6.0+cu124"), "torch is 2.6.0\\+cu124, the session pins 2.5.1"),
        ("cpu_torch25", found(**{"pytorch-lightning": "2.6.6"}), "pytorch-lightning is 2.6.6, the session pins 2.4.0"),
        ("cpu_torch25", found(lightning=None), "lightning is not installed"),
        ("cuda11_torch25", found(), "built for CUDA 12.4, the session pins CUDA 11"),
        ("cuda12_torch25", found(cuda=None), "CUDA none \\(CPU build\\)"),
        ("cuda12_torch25", found(cuda_available=False), "needs a working GPU"),
        ("cpu_torch_nightly", found(torch="2.15.0", lightning="2.6.6", **{"pytorch-lightning": "2.6.6"}),
         "needs a pre-release"),
    ],
)
def test_mismatches(session, installed, problem):
    problems = envcheck.mismatches(matrix.find(session, SESSIONS), installed)
    if problem is None:
        assert problems == []
    else:
        assert len(problems) == 1 and re.search(problem, problems[0])


def test_check_reads_the_real_environment():
    real = envcheck.installed()
    assert real["torch"] == torch.__version__
    assert real["lightning"] == importlib.metadata.version("lightning")
    # the running environment is the latest CPU session's (the tests session installs its pins)
    matching = [s for s in SESSIONS if s.device == "cpu" and s.torch and
                envcheck.mismatches(s, real) == []]
    assert matching, f"no CPU session matches {real}"
    with pytest.raises(envcheck.EnvironmentMismatch, match="environment does not match session cpu_torch21: torch is"):
        envcheck.check(matrix.find("cpu_torch21", SESSIONS))


def test_require_gpu_refuses_a_cuda_session_without_gpu(monkeypatch):
    monkeypatch.setattr(envcheck, "host_gpus", lambda: [])
    with pytest.raises(envcheck.EnvironmentMismatch,
                       match="cuda12_torch25 runs CUDA cases but this machine has no GPU"):
        envcheck.require_gpu(matrix.find("cuda12_torch25", SESSIONS))
    envcheck.require_gpu(matrix.find("cpu_torch25", SESSIONS))  # CPU sessions need none


def harness_command(*args, code=""):
    """`python -m harness ARGS` as users run it; `code` runs first (e.g. hiding torch)."""
    script = (f"import runpy, sys; {code}; sys.argv = ['harness', *{list(args)!r}]; "
              "runpy.run_module('harness', run_name='__main__')")
    return subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120)


def test_check_env_without_torch_is_one_line():
    # The project's own venv has no torch: `import torch` fails there as it does here.
    result = harness_command("check-env", "cuda12_torch25", code="sys.modules['torch'] = None")
    assert result.returncode == 2, result.stderr
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert result.stderr.startswith("error: environment does not match session cuda12_torch25: torch is not installed")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((), "the following arguments are required: command"),
        (("bogus",), "invalid choice: 'bogus'"),
        (("check-env",), "the following arguments are required: session"),
        (("check-env", "cpu_torch2_5"), "unknown session 'cpu_torch2_5'"),
        (("report", "/nonexistent-results"), "not a directory of results"),
        (("report", "--baseline"), "argument --baseline: expected at least one argument"),
        (("repro",), "repro needs a CASE_ID"),
        (("repro", "checkpoint"), "unknown case 'checkpoint': not a case id"),
        (("repro", "checkpont/plain_checkpoint[cpu-eager-fullgraph]"), "unknown case family 'checkpont'"),
        (("repro", "checkpoint/plain_chekpoint[cpu-eager-fullgraph]"), "did you mean checkpoint/plain_checkpoint"),
        (("repro", "checkpoint/plain_checkpoint", "--session", "cpu_torch99"), "unknown session 'cpu_torch99'"),
        (("bisect", "checkpoint/nope"), "has no test_nope"),
        (("bisect", "checkpoint/plain_checkpoint", "--from", "9.9"), "no cpu row of the matrix"),
        (("bisect", "checkpoint/plain_checkpoint", "--from", "two"), "not a version"),
        (("bisect", "checkpoint/plain_checkpoint", "--device", "tpu"), "invalid choice: 'tpu'"),
    ],
)
def test_every_command_refuses_bad_input_in_one_line(tmp_path, args, message):
    result = harness_command(*args, code=f"import os; os.environ['HARNESS_RESULTS_DIR'] = {str(tmp_path)!r}")
    assert result.returncode == 2, result.stderr
    assert result.stderr.count("\n") == 1, result.stderr
    assert message in result.stderr
    assert "building the environment" not in result.stderr and not list(tmp_path.iterdir())  # nothing built or written


def test_reuse_planner_refuses_an_unknown_session(tmp_path):
    result = subprocess.run([sys.executable, "-m", "harness.plugin.reuse", "cpu_torch99", "--plan",
                             str(tmp_path / "p")], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith("error: unknown session 'cpu_torch99'")
