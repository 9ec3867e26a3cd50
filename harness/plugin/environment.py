"""The environment record that opens every results file (harness.plugin.gathering says where it is read)."""

from __future__ import annotations

import datetime
import importlib.metadata
import json
import os
import pathlib
import platform
import subprocess
import sys

from harness.core import matrix, paths, records, versions
from harness.core.installs import install_environment, installed_torch_wheel
from harness.core.pytestrun import COMPILE_CACHES_ENV, SESSION_ENV


def recorded_session(config) -> str:
    """The session this run records as: --session-name, $HARNESS_SESSION, else a local session."""
    name = config.getoption("session_name") or os.environ.get(SESSION_ENV)
    return name or matrix.local_session_name(versions.installed("torch") or "unknown")


def git_commit(root: pathlib.Path = paths.ROOT) -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def _in_checkout(dist, root: pathlib.Path) -> bool:
    """The project's own metadata found in the checkout itself (the editable install's
    torch_compile_matrix.egg-info, seen through the cwd entry of sys.path): the harness is not an
    installed package of the session, and its sources are keyed on their own."""
    try:
        return pathlib.Path(dist.locate_file("")).resolve() == root
    except (OSError, TypeError, NotImplementedError):  # a distribution with no place on disk
        return False


def installed_packages(root: pathlib.Path = paths.ROOT) -> list[str]:
    """`name==version` of every distribution the interpreter sees, but the checkout's own (`root`)."""
    names: dict[str, str] = {}
    for dist in importlib.metadata.distributions():  # in sys.path's order: the first of a name is the one imported
        name = dist.metadata["Name"]
        if name and not _in_checkout(dist, pathlib.Path(root).resolve()):
            names.setdefault(name.lower(), f"{name}=={dist.version}")
    return [names[key] for key in sorted(names)]


def _collect_env():
    """torch's own collect_env: the same text users paste into upstream issues."""
    try:
        from torch.utils import collect_env

        info = collect_env.get_env_info()
        pretty = collect_env.pretty_str(info)
    except Exception as exc:  # collect_env shells out; a missing tool must not stop the run
        return None, f"collect_env failed: {type(exc).__name__}: {exc}"
    return info, pretty


def _cpu_model(lscpu: str | None) -> str:
    """The 'Model name' line of collect_env's lscpu output, else what platform knows."""
    for line in (lscpu or "").splitlines():
        if line.strip().startswith("Model name:"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


# Torch's cache flags, where this torch has them: (module, flag).
CACHE_FLAGS = (("torch._inductor.config", "fx_graph_cache"), ("torch._inductor.config", "fx_graph_remote_cache"),
               ("torch._functorch.config", "enable_autograd_cache"), ("torch._inductor.config", "autotune_local_cache"))


def compile_caches() -> dict:
    """Which of torch's compile caches are on in the session (its defaults, or what the row's `env`
    sets), the variables that set them, and where each case's caches live."""
    import importlib

    flags = {}
    for module_name, flag in CACHE_FLAGS:
        try:
            flags[flag] = getattr(importlib.import_module(module_name), flag)
        except (ImportError, AttributeError):  # not in this torch
            continue
    return {
        "flags": flags,
        "env": {k: v for k, v in sorted(os.environ.items()) if k.startswith(("TORCHINDUCTOR_", "TRITON_"))},
        "per_case": os.environ.get(COMPILE_CACHES_ENV) or "the pytest run's temporary directory",
        "shared": "C++ builds (.so, .o), named by the hash of their source and compile command",
    }


def _gpu_name() -> tuple[str | None, str | None]:
    """The name of the GPU cases use, and why there is none where one is visible but CUDA fails (a broken
    driver): the cases meet that failure and record it; the environment record says it once."""
    import torch

    if not torch.cuda.is_available():
        return None, None
    try:
        return torch.cuda.get_device_name(0), None
    except Exception as exc:
        return None, f"{type(exc).__name__}: {exc}".splitlines()[0]


def environment_record(session: str) -> records.EnvironmentRecord:
    import torch

    info, pretty = _collect_env()
    gpu_name, gpu_error = _gpu_name()
    record: records.EnvironmentRecord = {
        "kind": "environment",
        "session": session,
        "identity": records.identity(session, torch.__version__, torch.cuda.is_available()),
        "started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "triton": versions.installed("triton", "pytorch-triton"),
        "lightning": versions.installed("lightning"),
        "pytorch_lightning": versions.installed("pytorch-lightning"),
        "python": platform.python_version(),
        "python_executable": sys.executable,
        "gpu": gpu_name,
    }
    if gpu_error:  # beside `gpu`, where there is one
        record["gpu_error"] = gpu_error
    record.update({
        "gpu_driver": getattr(info, "nvidia_driver_version", None),
        "cpu": _cpu_model(getattr(info, "cpu_info", None)),
        "os": getattr(info, "os", None) or platform.platform(),
        "git_commit": git_commit(),
        "harness_session": os.environ.get(SESSION_ENV),
        "install_environment": install_environment(),
        "torch_wheel": installed_torch_wheel(),  # {"build": "cpu"|"registry default"|index, "index", "reason"?}
        "packages": installed_packages(),
        "compile_caches": compile_caches(),
        "collect_env": pretty,
    })
    return record


if __name__ == "__main__":  # where no forked child gave the record
    print(json.dumps(environment_record(sys.argv[1]), default=str))
