"""A GPU that is not there, for a machine without one: stand-in driver libraries (libcuda.so.1 and
libnvidia-ml.so.1, built here from the C beside this file with the machine's compiler) that torch loads
as it loads the real ones, so that torch's own code runs unchanged: NVML's count, the CUDA runtime's
fallback, fork marks. NVML counts one GPU; the driver logs each cuInit with its process and Python
stack, then reports no usable device. What a test reads from it is who asked CUDA for what, not what a
GPU computes."""

from __future__ import annotations

import dataclasses
import os
import pathlib
import shutil
import subprocess

HERE = pathlib.Path(__file__).parent
CUDA_LOG_ENV = "STANDIN_CUDA_LOG"
NVML_COUNT_ENV = "STANDIN_NVML_COUNT"
LIBRARIES = {"libcuda.so.1": "libcuda.c", "libnvidia-ml.so.1": "libnvidia-ml.c"}
TOOL = "nvidia-smi"  # a stand-in answering the queries the harness makes


@dataclasses.dataclass(frozen=True)
class DriverCall:
    """One call of the stand-in driver: which, by which process, from where in Python."""
    what: str
    pid: int
    inherited: bool  # the process was forked after an earlier cuInit
    stack: str


def build(directory: os.PathLike) -> pathlib.Path:
    """The stand-in libraries compiled into `directory`, with the stand-in nvidia-smi; returns it (for
    LD_LIBRARY_PATH and PATH)."""
    directory = pathlib.Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        raise RuntimeError("no C compiler on PATH: the stand-in GPU cannot be built")
    for library, source in LIBRARIES.items():
        subprocess.run([compiler, "-shared", "-fPIC", "-O1", "-o", str(directory / library), str(HERE / source),
                        "-ldl"], check=True, capture_output=True, text=True)
    shutil.copy2(HERE / TOOL, directory / TOOL)
    return directory


def environment(directory: os.PathLike, log: os.PathLike, nvml_count: int = 1, tool: bool = False) -> dict:
    """Variables under which a process finds the stand-in GPU: its libraries first on the loader's path
    (with `tool`, its nvidia-smi first on PATH too)."""
    found = {"PATH": os.pathsep.join([str(directory), os.environ.get("PATH", "")])} if tool else {}
    return {**found,
            "LD_LIBRARY_PATH": os.pathsep.join([str(directory), *filter(None, [os.environ.get("LD_LIBRARY_PATH")])]),
            CUDA_LOG_ENV: str(log), NVML_COUNT_ENV: str(nvml_count)}


def driver_calls(log: os.PathLike) -> list[DriverCall]:
    """What the stand-in driver logged, in order."""
    path = pathlib.Path(log)
    if not path.exists():
        return []
    calls, head, stack = [], None, []
    for line in path.read_text(errors="replace").splitlines():
        if line.startswith("CALL "):
            head, stack = line.split(), []
        elif line == "END" and head is not None:
            fields = dict(field.split("=", 1) for field in head[2:])
            calls.append(DriverCall(head[1], int(fields["pid"]), fields["inherited"] == "1", "\n".join(stack)))
            head = None
        elif head is not None:
            stack.append(line)
    return calls
