"""CUDA stays out of the warm process that forks cases, and each forked child initialises its own.

A child forked from a process that initialised CUDA cannot use it ("Cannot re-initialize CUDA in
forked subprocess"), and on a GPU machine Dynamo reaches for CUDA on every compile (it saves the CUDA
RNG state and asks Triton for the device's capability), as does importing torch's OpInfo database
(`common_device_type` calls `has_triton()` at import). So the warm process that forks (an xdist
worker, or pytest's own process) asks for nothing of CUDA beyond whether a GPU is there, through
NVML, which initialises no CUDA context; what would initialise CUDA there is refused with
`CudaInWarmProcess`, naming who asked. A child finds CUDA as a fresh process does.

Were the warm process to have initialised CUDA anyway (before this guard: a plugin loaded earlier), a
child could run nothing that touches CUDA; `inherited_fault` says so, and the attempt is the harness's
`error`, never the case's `fail`.
"""

from __future__ import annotations

import os
import traceback

# torch.cuda.is_available() and device_count() then ask NVML, not the CUDA runtime (whose first call
# initialises the driver in this process, which a forked child cannot then use either).
NVML_CHECK_ENV = "PYTORCH_NVML_BASED_CUDA_CHECK"

_warm_pid: int | None = None
refused: list[str] = []  # where the warm process asked for CUDA, for its log


class CudaInWarmProcess(RuntimeError):
    """Something in the warm process that forks cases asked for CUDA: the harness refused."""


def _caller() -> str:
    """The innermost frame outside torch that asked, as `file:line in function`."""
    frames = traceback.extract_stack()[:-3]
    outside = [f for f in frames if f"{os.sep}torch{os.sep}" not in f.filename] or frames
    frame = outside[-1]
    return f"{frame.filename}:{frame.lineno} in {frame.name}"


def guard_warm_process() -> None:
    """From now on this process (not its children) refuses to initialise CUDA."""
    global _warm_pid
    os.environ[NVML_CHECK_ENV] = "1"
    import torch

    if _warm_pid is not None or not hasattr(torch._C, "_cuda_init"):  # guarded already; a CPU-only build
        _warm_pid = os.getpid()
        return
    _warm_pid = os.getpid()
    real_init = torch._C._cuda_init

    def cuda_init():
        if os.getpid() == _warm_pid:
            where = _caller()
            refused.append(where)
            raise CudaInWarmProcess(
                "harness: the warm process that forks cases must not initialise CUDA (a forked child could "
                f"not use it); asked at {where}")
        return real_init()

    # Every path to a CUDA context, torch's Python API and its C++ lazy init alike, goes through
    # torch.cuda._lazy_init, which looks this name up on torch._C at each call.
    torch._C._cuda_init = cuda_init


def gpu_visible() -> bool:
    """Whether torch sees a GPU, asked without initialising CUDA (NVML)."""
    os.environ[NVML_CHECK_ENV] = "1"
    import torch

    try:
        return bool(torch.cuda.is_available())
    except Exception:  # no driver library, a broken NVML: no GPU to use here
        return False


def inherited_fault() -> str | None:
    """In a forked child: why it cannot run a case, when a GPU is visible and its parent had asked the
    CUDA runtime for something before forking (torch then marks its forked children, and refuses them
    CUDA, which Dynamo reaches for on every compile where a GPU is visible); None when it can. Without
    a GPU the mark means nothing: torch sets it whenever the runtime was asked for the device count,
    which is how availability is asked where NVML is missing."""
    import torch

    bad_fork = getattr(torch.cuda, "_is_in_bad_fork", None)
    if bad_fork is not None and bad_fork() and gpu_visible():
        return ("CUDA was initialised in the warm process before it forked this case's process, which "
                "therefore cannot use CUDA")
    return None
