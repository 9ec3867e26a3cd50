"""Which entries of torch._C, called in a process, spoil CUDA for the children it forks: those that set
torch's fork mark (the child is then refused CUDA) or initialise the driver (the child inherits a driver
state it cannot use). Run under the stand-in driver (`python -m tests.standin_gpu.survey`, its
environment from tests.standin_gpu.build): one JSON object, {name: {"marks": bool, "initialises": bool}},
for every entry that does either.

Each entry is called in a child of a process that has not touched CUDA, with no arguments, else one
device index, else two (the first that its argument parser accepts); the child then forks a grandchild
that reports torch's fork mark, and the stand-in's log says whether the child initialised the driver.
With `--guarded`, each child first guards itself as the harness guards the warm process that forks
cases (harness.plugin.cudaguard): then nothing should be found.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import types

import torch

from tests.standin_gpu import CUDA_LOG_ENV, driver_calls

CUDA_NAMES = re.compile("cuda|cudnn|accelerator|nvrtc", re.IGNORECASE)
ARGUMENTS = ((), (0,), (0, 0))
CALL_LIMIT = 10  # seconds: an entry that waits on a device that never answers


def entries() -> list[str]:
    """The functions of torch._C whose name is CUDA's (not its classes: torch's Python code builds those
    only after torch.cuda's own initialisation, which goes through the entries)."""
    return sorted(name for name in dir(torch._C) if CUDA_NAMES.search(name)
                  and isinstance(getattr(torch._C, name), types.BuiltinFunctionType))


def _call(function) -> None:
    for arguments in ARGUMENTS:
        try:
            function(*arguments)
            return
        except TypeError:
            continue
        except BaseException:
            return


def effect(name: str, guarded: bool = False) -> dict:
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        signal.alarm(CALL_LIMIT)
        if guarded:
            from harness.plugin import cudaguard

            cudaguard.guard_warm_process()
        _call(getattr(torch._C, name))
        grandchild = os.fork()
        if grandchild == 0:
            os.write(write, b"1" if torch.cuda._is_in_bad_fork() else b"0")
            os._exit(0)
        os.waitpid(grandchild, 0)
        os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    marked = os.read(read, 1) == b"1"
    os.close(read)
    initialised = any(call.pid == pid for call in driver_calls(os.environ[CUDA_LOG_ENV]))
    return {"marks": marked, "initialises": initialised}


def main() -> None:
    guarded = "--guarded" in sys.argv[1:]
    found = {}
    for name in entries():
        result = effect(name, guarded)
        if result["marks"] or result["initialises"]:
            found[name] = result
    json.dump(found, sys.stdout, indent=1, sort_keys=True)


if __name__ == "__main__":
    main()
