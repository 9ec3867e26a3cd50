"""CUDA stays out of the warm process that forks cases, and each forked child initialises its own.

A child forked from a process that initialised CUDA cannot use it: torch marks such children and refuses
them CUDA ("Cannot re-initialize CUDA in forked subprocess"), and a driver initialised without that mark
gives a child raw driver errors. On a GPU machine Dynamo reaches for CUDA on every compile (it saves the
CUDA RNG state, Triton asks for the device's capability), as does importing torch's OpInfo database. So
the warm process that forks (an xdist worker, or pytest's own process):

- asks whether a GPU is there through NVML only (`PYTORCH_NVML_BASED_CUDA_CHECK`), which creates no CUDA
  context; where NVML cannot count the GPUs of a machine that has some (MIG devices in
  `CUDA_VISIBLE_DEVICES`, a broken NVML), torch would ask the CUDA runtime instead and spoil every case's
  process: the run stops with one line (`GpuUncountable`) before anything runs;
- refuses, where NVML counts a GPU, every entry of torch's C API that marks forked children or initialises
  the driver (REFUSED), raising `CudaInWarmProcess` that names who asked; each refusal is written to the
  worker's log and kept for the environment record (`summary`);
- after collection, forks one child that must find CUDA as a fresh process does (`probe`); where it
  cannot, the run stops with one line before any case runs.

A child that finds torch's mark anyway records the harness's `error` (`inherited_fault`), never the case's
`fail`.
"""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
import time
import traceback
import warnings

# torch.cuda.is_available() and device_count() then ask NVML, not the CUDA runtime (whose first call
# initialises the driver in this process, which a forked child cannot then use either).
NVML_CHECK_ENV = "PYTORCH_NVML_BASED_CUDA_CHECK"

# The entries of torch._C that, called in a process, set torch's fork mark or initialise the CUDA driver
# (cuInit), found by calling every CUDA entry of torch 2.11 and 2.15 under stand-in driver libraries
# (tests/standin_gpu/survey.py, which tests/test_cuda_guard.py runs again on the suite's torch). An entry
# a torch lacks is passed over.
REFUSED = (
    "_accelerator_exchangeDevice", "_accelerator_getDefaultGenerator", "_accelerator_getDeviceCapability",
    "_accelerator_getDeviceIndex", "_accelerator_getMemoryInfo", "_accelerator_getStream",
    "_accelerator_hooks_device_count", "_accelerator_hooks_get_current_device", "_accelerator_maybeExchangeDevice",
    "_accelerator_setDeviceIndex", "_cuda_attach_out_of_memory_observer", "_cuda_canDeviceAccessPeer",
    "_cuda_exchangeDevice", "_cuda_getArchFlags", "_cuda_getCublasWorkspaceSize", "_cuda_getCurrentBlasHandle",
    "_cuda_getCurrentRawStream", "_cuda_getCurrentSolverHandle", "_cuda_getCurrentStream", "_cuda_getDefaultStream",
    "_cuda_getDevice", "_cuda_getDeviceCount", "_cuda_getMemoryMetadata", "_cuda_hasPrimaryContext", "_cuda_init",
    "_cuda_isCurrentStreamCapturing", "_cuda_isHistoryEnabled", "_cuda_maybeExchangeDevice", "_cuda_setDevice",
    "_cuda_sleep", "_cuda_synchronize", "_cuda_tunableop_clear_all", "_cuda_tunableop_get_results",
    "_cuda_tunableop_get_rotating_buffer_size", "_cuda_tunableop_get_validators", "_cudnn_clear_dropout_state",
    "_ensureCUDADeviceGuardSet", "_get_accelerator", "_is_cudnn_attention_decode_disabled",
)
PROBE_TIMEOUT = 120  # seconds for the forked child, and again for a fresh process, to initialise CUDA

# What the probe runs, in a forked child and, to compare, in a fresh interpreter: "ok", or the first line
# of what stopped CUDA (a context, an allocation, a kernel and its result).
CUDA_CHECK = """
def cuda_check():
    import torch
    try:
        torch.cuda.init()
        x = torch.ones(4, device="cuda")
        assert float((x * 2).sum()) == 8.0, "a kernel gave a wrong sum"
        return "ok"
    except Exception as error:
        return (f"{type(error).__name__}: {error}".splitlines() or [type(error).__name__])[0]
"""


class CudaInWarmProcess(RuntimeError):
    """Something in the warm process that forks cases asked for CUDA: the harness refused."""


class GpuUncountable(Exception):
    """The machine has a GPU that NVML cannot count: the warm process cannot learn whether one is there
    without spoiling every case's process."""


class WarmProcessSpoiled(Exception):
    """A child forked from the warm process cannot use CUDA as a fresh process can."""


_warm_pid: int | None = None
_NVML_CHECK_BEFORE = os.environ.get(NVML_CHECK_ENV)  # the session's own, before any guard set it
_state: dict = {"nvml_count": None, "guarded": False, "refused": [], "probe": None}


def _caller() -> str:
    """The innermost frame outside torch that asked, as `file:line in function`."""
    frames = traceback.extract_stack()[:-3]
    outside = [f for f in frames if f"{os.sep}torch{os.sep}" not in f.filename] or frames
    frame = outside[-1]
    return f"{frame.filename}:{frame.lineno} in {frame.name}"


def nvml_count() -> int:
    """How many GPUs NVML counts for this process (CUDA_VISIBLE_DEVICES applied), without any CUDA call:
    0 without a CUDA build or GPU, negative where NVML cannot count (no NVML library, a failed NVML, MIG
    devices named in CUDA_VISIBLE_DEVICES)."""
    import torch

    counter = getattr(torch.cuda, "_device_count_nvml", None)
    if not hasattr(torch._C, "_cuda_getDeviceCount"):  # a CPU-only build
        return 0
    if counter is None:  # a torch older than NVML-based counting
        return -1
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "Can't initialize NVML": said below, once, where it matters
        return int(counter())


def gpu_evidence() -> str | None:
    """Why this machine has a GPU, read without NVML or CUDA (device nodes, the driver's own listing,
    MIG devices named for CUDA); None where nothing says so."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    if visible.startswith("MIG-"):
        return f"CUDA_VISIBLE_DEVICES names MIG devices ({visible[:40]})"
    listed = glob.glob("/proc/driver/nvidia/gpus/*")
    if listed:
        return f"the NVIDIA driver lists {len(listed)} GPU(s) in /proc/driver/nvidia/gpus"
    nodes = sorted(glob.glob("/dev/nvidia[0-9]*"))
    if nodes:
        return f"{nodes[0]} exists"
    return None


def check_countable() -> int:
    """NVML's count of this process's GPUs; GpuUncountable where it cannot count them on a machine that
    has some (checked by xdist's controller too, so that the run stops with one line before any worker
    starts)."""
    count = nvml_count()
    evidence = gpu_evidence() if count < 0 else None
    if evidence:
        raise GpuUncountable(
            f"NVML cannot count this machine's GPUs ({evidence}); torch would ask the CUDA runtime instead, and "
            "no case's process forked after that could use CUDA. Name GPUs in CUDA_VISIBLE_DEVICES by index or "
            "GPU- UUID, or repair NVML (nvidia-smi must work)")
    return count


def check_countable_before_workers() -> None:
    """check_countable as xdist's controller runs it, before any worker starts: only where something says
    the machine has a GPU, since without one there is nothing NVML could fail to count, and asking would
    import torch into a process that runs no case (4 s of every session's start on a 2-core machine)."""
    if gpu_evidence():
        check_countable()


def guard_warm_process() -> None:
    """From now on this process (not its children) refuses every CUDA entry of REFUSED, where NVML
    counts a GPU. GpuUncountable where the machine has a GPU that NVML cannot count."""
    global _warm_pid
    os.environ[NVML_CHECK_ENV] = "1"
    import torch

    if _warm_pid is not None:  # guarded already (pytester runs sessions inside one process)
        _warm_pid = os.getpid()
        return
    count = _state["nvml_count"] = check_countable()
    if count <= 0:  # no GPU: a CUDA call here marks children but spoils nothing they could use
        return
    _warm_pid = os.getpid()
    for name in REFUSED:
        real = getattr(torch._C, name, None)
        if real is not None:
            setattr(torch._C, name, _refusing(name, real))
    _state["guarded"] = True


def release() -> None:
    """Put torch's own entries back: this process runs its cases itself after all."""
    global _warm_pid
    import torch

    for name in REFUSED:
        wrapped = getattr(getattr(torch._C, name, None), "__wrapped__", None)
        if wrapped is not None:
            setattr(torch._C, name, wrapped)
    _warm_pid = None
    _state["guarded"] = False


def _refusing(name: str, real):
    def refused(*args, **kwargs):
        if os.getpid() != _warm_pid:
            return real(*args, **kwargs)
        where = _caller()
        _state["refused"].append({"call": f"torch._C.{name}", "where": where})
        print(f"harness: refused in the warm process: torch._C.{name}, asked at {where}", file=sys.stderr, flush=True)
        raise CudaInWarmProcess(
            f"harness: the warm process that forks cases must not initialise CUDA or mark its forked children "
            f"(a child could not use CUDA); torch._C.{name} asked at {where}")

    refused.__name__ = name
    refused.__wrapped__ = real  # type: ignore[attr-defined]  # typeshed's functions have none; release() reads it
    return refused


def as_in_a_fresh_process() -> None:
    """In a child of the warm process that must see CUDA as a fresh process of the session does (the
    environment record's): torch asks the CUDA runtime again where the session's environment says so."""
    if _NVML_CHECK_BEFORE is None:
        os.environ.pop(NVML_CHECK_ENV, None)
    else:
        os.environ[NVML_CHECK_ENV] = _NVML_CHECK_BEFORE


def gpu_visible() -> bool:
    """Whether NVML counts a GPU for this process (asked without initialising CUDA)."""
    os.environ[NVML_CHECK_ENV] = "1"
    try:
        return nvml_count() > 0
    except Exception:  # no driver library, a broken NVML: no GPU to use here
        return False


def _run_check() -> str:
    scope: dict = {}
    exec(CUDA_CHECK, scope)
    return scope["cuda_check"]()


def _forked_check() -> str:
    """What a child forked from this process finds of CUDA: torch's mark, else CUDA_CHECK's answer."""
    import torch

    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        answer = "harness: the probe's child failed"
        try:
            os.close(read)
            answer = "marked" if torch.cuda._is_in_bad_fork() else _run_check()
        finally:
            os.write(write, answer.encode(errors="replace")[:4000])
            os._exit(0)
    os.close(write)
    deadline = time.monotonic() + PROBE_TIMEOUT
    while os.waitpid(pid, os.WNOHANG) == (0, 0):
        if time.monotonic() >= deadline:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            os.close(read)
            return f"no answer in {PROBE_TIMEOUT} s"
        time.sleep(0.05)
    answer = os.read(read, 4096).decode(errors="replace")
    os.close(read)
    return answer or "the probe's child died"


def _fresh_check() -> str:
    """CUDA_CHECK's answer in a fresh interpreter of this environment."""
    try:
        done = subprocess.run([sys.executable, "-c", CUDA_CHECK + "\nprint(cuda_check())"], capture_output=True,
                              text=True, timeout=PROBE_TIMEOUT, env={**os.environ, NVML_CHECK_ENV: "1"})
    except subprocess.TimeoutExpired:
        return f"no answer in {PROBE_TIMEOUT} s"
    lines = done.stdout.strip().splitlines()
    return lines[-1] if lines else f"exit {done.returncode}: {(done.stderr.strip().splitlines() or [''])[-1]}"


def probe() -> None:
    """Where NVML counts a GPU: one forked child must find CUDA as a fresh process does (not marked,
    initialised, a kernel run); WarmProcessSpoiled, one line, where it does not. Where CUDA fails in a
    fresh process too, the machine's GPU fails every process alike and the cases meet it: noted."""
    if not gpu_visible():
        _state["probe"] = "no GPU visible: nothing to probe"
        return
    forked = _forked_check()
    if forked == "ok":
        _state["probe"] = "a forked child initialised CUDA and ran a kernel"
        return
    refused = "; ".join(r["call"] for r in _state["refused"]) or "none"
    if forked == "marked":
        _state["probe"] = "spoiled: torch marked the forked child"
        raise WarmProcessSpoiled(
            "CUDA was reached in the warm process past the harness's guard before it forked (a C++ path of torch, "
            "or an entry taken before the guard): torch marks every child forked from it, and none can use CUDA; "
            f"refused there: {refused}")
    fresh = _fresh_check()
    if fresh == forked:
        _state["probe"] = f"CUDA fails in a fresh process as in a forked one: {fresh}"
        print(f"harness: CUDA fails here in a fresh process as in a forked one, and the cases meet it: {fresh}",
              file=sys.stderr, flush=True)
        return
    _state["probe"] = f"spoiled: a forked child found {forked!r}, a fresh process {fresh!r}"
    raise WarmProcessSpoiled(
        f"a child forked from the warm process cannot use CUDA ({forked}) where a fresh process gets {fresh!r}: "
        f"CUDA's driver was initialised in the warm process; calls the harness refused there: {refused}")


def summary() -> dict:
    """The guard's state for the environment record: NVML's count, whether the refusals are installed,
    what was refused (and where it was asked), and what the probe found."""
    return json.loads(json.dumps(_state))


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
