"""A warm process built as a session's worker builds one (the CUDA guard, the warm-up, the memory limit),
then `--children` children forked from it at once, each doing what a GPU case does: initialise CUDA, a
cuBLAS matmul with its backward pass, and a Triton kernel compiled by inductor, forward and backward,
against eager. Run by the GPU preflight (harness.tools.gpu.preflight) in the environment under test:

    python -m harness.plugin.gpuprobe --children 16 --workers 16 [--timeout 60]

Prints one JSON object: the warm process's guard (harness.plugin.cudaguard.summary) and each child's
answer, {"ok": bool, "error": str, "seconds": {...}}. Exit status 0 when the warm process stayed clean and
every child passed, 1 otherwise.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import select
import signal
import sys
import time
from typing import Any

from harness.core import limits
from harness.plugin import cudaguard
from harness.plugin.warmup import warm_up


def gpu_case() -> dict:
    """What one child does; its answer."""
    import torch

    seconds, started = {}, time.monotonic()
    try:
        torch.cuda.init()
        seconds["cuda_init"] = time.monotonic() - started
        a = torch.randn(256, 256, device="cuda", requires_grad=True)
        b = torch.randn(256, 256, device="cuda")
        (a @ b).sum().backward()
        torch.testing.assert_close(a.grad, b.sum(1).expand(256, 256), rtol=1e-4, atol=1e-3)
        seconds["cublas_backward"] = time.monotonic() - started - seconds["cuda_init"]

        def fn(x):
            return torch.sin(x) * x + 1

        x = torch.randn(1024, device="cuda", requires_grad=True)
        compiled = torch.compile(fn, backend="inductor")
        out = compiled(x)
        out.sum().backward()
        eager_x = x.detach().clone().requires_grad_(True)
        fn(eager_x).sum().backward()
        torch.testing.assert_close(out, fn(x.detach()))
        torch.testing.assert_close(x.grad, eager_x.grad)
        seconds["triton_forward_backward"] = time.monotonic() - started - sum(seconds.values())
        return {"ok": True, "seconds": {k: round(v, 2) for k, v in seconds.items()}}
    except BaseException as error:
        line = (f"{type(error).__name__}: {error}".splitlines() or [type(error).__name__])[0]
        return {"ok": False, "error": line[:500], "seconds": {k: round(v, 2) for k, v in seconds.items()}}


def fork_children(count: int, timeout: float) -> list[dict]:
    """`count` children forked at once, each running gpu_case(); their answers in order."""
    gc.freeze()
    running = {}
    for index in range(count):
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(read)
            answer = {"ok": False, "error": "the child failed before answering"}
            try:
                answer = gpu_case()
            finally:
                os.write(write, json.dumps(answer).encode()[:60000])
                os._exit(0)
        os.close(write)
        running[read] = (index, pid)
    answers: dict[int, dict] = {}  # by index: every child's, once each has answered or been killed
    chunks = {fd: b"" for fd in running}
    deadline = time.monotonic() + timeout
    while running and time.monotonic() < deadline:
        ready, _, _ = select.select(list(running), [], [], max(0.0, deadline - time.monotonic()))
        for fd in ready:
            chunk = os.read(fd, 65536)
            if chunk:
                chunks[fd] += chunk
                continue
            index, pid = running.pop(fd)
            os.close(fd)
            os.waitpid(pid, 0)
            try:
                answers[index] = json.loads(chunks[fd])
            except ValueError:
                answers[index] = {"ok": False, "error": "the child died without an answer"}
    for fd, (index, pid) in running.items():
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        os.close(fd)
        answers[index] = {"ok": False, "error": f"no answer in {timeout:g} s"}
    return [answers[index] for index in range(count)]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--children", type=int, default=4)
    parser.add_argument("--workers", type=int, default=1, help="the session's worker count: the memory limit's share")
    parser.add_argument("--timeout", type=float, default=60)
    args = parser.parse_args(argv)
    started = time.monotonic()
    try:
        cudaguard.guard_warm_process()
    except cudaguard.GpuUncountable as exc:
        print(json.dumps({"warm": {"error": str(exc)}, "children": []}))
        return 1
    warm_up(forking=True, compile_kernels=not cudaguard.gpu_visible())
    memory = limits.memory_limit_bytes(limits.memory_limit(), args.workers)
    limits.limit_memory(memory)
    warm: dict[str, Any] = {"guard": cudaguard.summary(), "seconds": round(time.monotonic() - started, 2),
                            "memory_limit_gib": round(memory / 2**30, 1) if memory else None}
    try:
        cudaguard.probe()
    except cudaguard.WarmProcessSpoiled as exc:
        warm["error"] = str(exc)
    warm["guard"] = cudaguard.summary()
    children = [] if "error" in warm else fork_children(args.children, args.timeout)
    print(json.dumps({"warm": warm, "children": children}))
    clean = "error" not in warm and not warm["guard"]["refused"]
    return 0 if clean and children and all(child["ok"] for child in children) else 1


if __name__ == "__main__":
    sys.exit(main())
