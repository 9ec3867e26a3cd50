import importlib.metadata
import re

import pytest
import torch

from harness import envcheck, matrix

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
        ("cpu_torch_nightly", found(torch="2.15.0", lightning="2.6.6", **{"pytorch-lightning": "2.6.6"}), "needs a pre-release"),
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
    with pytest.raises(envcheck.EnvironmentMismatch, match="cuda12_torch25 runs CUDA cases but this machine has no GPU"):
        envcheck.require_gpu(matrix.find("cuda12_torch25", SESSIONS))
    envcheck.require_gpu(matrix.find("cpu_torch25", SESSIONS))  # CPU sessions need none
