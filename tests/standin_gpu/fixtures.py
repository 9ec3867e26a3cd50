"""Fixtures of the stand-in GPU (tests/standin_gpu): its libraries built once per pytest process, and a
test's environment under which torch, unchanged, finds them."""

import pytest

from tests import standin_gpu
from tests.standin_gpu.roles import ROLES_LOG_ENV


@pytest.fixture(scope="session")
def standin_libraries(tmp_path_factory):
    return standin_gpu.build(tmp_path_factory.mktemp("standin-gpu"))


@pytest.fixture
def standin_gpu_env(monkeypatch, tmp_path, standin_libraries):
    """This test's processes see one GPU through the stand-in NVML, and the stand-in driver logs each
    cuInit to `cuda.log`; `-p tests.standin_gpu.roles` logs the warm processes to `roles.log`. Returns
    (driver log, roles log)."""
    logs = tmp_path / "cuda.log", tmp_path / "roles.log"
    for name, value in standin_gpu.environment(standin_libraries, logs[0]).items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv(ROLES_LOG_ENV, str(logs[1]))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    return logs
