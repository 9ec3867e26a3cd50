"""A process that runs cases pays once, before any case's clock starts, for what the first compile
costs (Dynamo's and inductor's imports, the C++ toolchain, Triton where there is a GPU) and for the
modules the cases reach (Lightning): harness.plugin.runner calls warm_up at the session's start."""

from __future__ import annotations

import importlib
import sys

from harness.core import paths

# What a first compile imports (Dynamo, AOTAutograd, inductor's lowering, scheduler and C++ codegen):
# importing them initialises no CUDA, where compiling does.
COMPILE_MODULES = ("torch._dynamo", "torch._functorch.aot_autograd", "torch._inductor.compile_fx",
                   "torch._inductor.graph", "torch._inductor.lowering", "torch._inductor.scheduler",
                   "torch._inductor.codecache", "torch._inductor.codegen.cpp")


def warm_up(forking: bool, compile_kernels: bool = True) -> None:
    """What the first compile of a process pays once (Dynamo's and inductor's imports, the C++
    toolchain, Triton where there is a GPU): paid here, before any case's clock starts. A failure
    here is left for the cases to meet and record.

    `forking`: cases run in children forked from this process (harness.plugin.isolation), which must
    then never have started inductor's compile workers, an OpenMP team, autograd's engine or CUDA:
    the warm-up compiles for inference only, a kernel too small for OpenMP to start a team, with
    compile workers off (`torch.set_num_threads` is not called: it makes a pthreadpool that a child
    then finds broken, and autograd's threads abort on it). Without `compile_kernels` (a GPU is visible
    to a process that forks, where any compile would initialise CUDA, harness.plugin.cudaguard; or
    nothing will run) the modules a compile loads are imported, and each child pays its first compile
    itself."""
    import torch

    devices = ([] if not compile_kernels else ["cpu"] if forking
               else ["cpu"] + (["cuda"] if torch.cuda.is_available() else []))
    for module in COMPILE_MODULES:
        try:
            importlib.import_module(module)
        except Exception as exc:  # moved in another torch: the first compile imports what it needs
            note(f"not preloaded for compiling: {module} ({type(exc).__name__}: {exc})")
    try:
        if forking:
            torch._inductor.config.compile_threads = 1
        for device in devices:
            torch.compile(lambda x: torch.sin(x) + 1, backend="inductor")(torch.ones(8, device=device))
    except Exception as exc:  # the cases meet it again and record it; the worker goes on
        note(f"the warm-up compile failed, left for the cases to record: {type(exc).__name__}: {exc}")
    finally:
        torch._dynamo.reset()
    for module in case_modules():  # else every forked child imports Lightning anew (about 1 s a case)
        try:
            importlib.import_module(module)
        except Exception as exc:  # not installed on this row: the case's need() skips, as it would have
            note(f"not preloaded for the cases: {module} ({type(exc).__name__}: {exc})")


def note(text: str) -> None:
    """A line on the process's stderr (the worker's log in a session): what the runner passed over, and why."""
    print(f"harness: {text}", file=sys.stderr, flush=True)


def case_modules() -> list[str]:
    """The modules the cases reach through `need("module.attr")` (Lightning, torch_geometric),
    read from the case files' sources: imported by the warm-up, once per worker."""
    import ast

    found = set()
    for path in sorted(paths.CASES.rglob("*.py")):
        try:
            tree = ast.parse(path.read_bytes())
        except (SyntaxError, ValueError):  # collection records the file as its own error; the others run
            note(f"not read for the modules its cases need: {path} does not parse")
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "need" and node.args \
                    and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
                module = node.args[0].value.rpartition(".")[0]
                if module and module != "torch" and not module.startswith("torch."):
                    found.add(module)
    return sorted(found)
