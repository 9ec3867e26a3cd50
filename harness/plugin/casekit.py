"""What cases use: run code eagerly and under torch.compile, compare, and see what a feature did.

A case asks for the `case` fixture (a `CaseRun`) and calls `case.check(...)`:

    def test_plain_checkpoint(case, device, backend, fullgraph):
        model = Block().to(device)
        case.check(model, torch.randn(4, 8, device=device, requires_grad=True))

`Case.check` runs the code eagerly and under `torch.compile` (the case's backend and fullgraph),
twice, and compares outputs, output dtypes and gradients of inputs and parameters with
`torch.testing.assert_close`, within `TOLERANCES` (compiled kernels may reorder reductions: looser
than assert_close's float32 defaults). Agreement is not enough: a case also checks its feature's own effect,
with `OpLog` (which ops ran, in which dtype, during forward and backward) or its own figures, and
keeps the figures that show it with `case.record(...)`.

`Case` and the functions it calls are small and self-contained on purpose: a reproduction script
(`python -m harness repro`) carries them as they are. `CaseRun` adds what the harness's record
shows: compile and run seconds, frames, recompiles, the largest difference from eager.
"""

from __future__ import annotations

import contextlib
import copy
import importlib
import logging
import time
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

TOLERANCES = {torch.float32: dict(rtol=1e-4, atol=1e-5), torch.float64: dict(rtol=1e-7, atol=1e-7),
              torch.bfloat16: dict(rtol=2e-2, atol=2e-2), torch.float16: dict(rtol=1e-2, atol=1e-2)}


class HarnessError(Exception):
    """The harness itself could not run a case; recorded as `error`, never as `fail`."""


def need(dotted: str):
    """The object at `dotted` ("torch.compiler.nested_compile_region"), or a skip that names what
    this torch or Lightning lacks."""
    import pytest

    module_name, _, rest = dotted.partition(".")
    try:
        obj = importlib.import_module(module_name)
    except ImportError:
        pytest.skip(f"missing: {module_name} is not installed")
    path = module_name
    for part in rest.split(".") if rest else ():
        path = f"{path}.{part}"
        try:
            obj = getattr(obj, part)
        except AttributeError:
            try:
                obj = importlib.import_module(path)
            except ImportError:
                pytest.skip(f"missing: {dotted} (this version has no {path})")
    return obj


# --- the comparison (carried as it is by reproduction scripts) --------------------------------------

def run_with_grads(fn, inputs):
    """`fn` on copies of `inputs`, then backward of the sum of its outputs: (outputs, gradients)."""
    if isinstance(fn, torch.nn.Module):
        fn.zero_grad(set_to_none=True)
    inputs = [x.detach().clone().requires_grad_(x.requires_grad) if torch.is_tensor(x) else x for x in inputs]
    outputs = [t for t in torch.utils._pytree.tree_flatten(fn(*inputs))[0] if torch.is_tensor(t)]
    if any(o.requires_grad for o in outputs):
        sum(o.float().sum() for o in outputs if o.requires_grad).backward()
    parameters = list(fn.parameters()) if isinstance(fn, torch.nn.Module) else []
    return outputs, [t.grad for t in inputs + parameters if torch.is_tensor(t) and t.requires_grad]


class Case:
    """Eager against torch.compile with the case's backend and fullgraph: the same outputs, output
    dtypes and gradients (of inputs and parameters), on the first run and on a second one."""

    def __init__(self, backend="inductor", fullgraph=False):
        self.backend, self.fullgraph, self.metrics = backend, fullgraph, {}

    def compile(self, fn, **options):
        return torch.compile(fn, **{"backend": self.backend, "fullgraph": self.fullgraph, **options})

    def record(self, **figures):
        self.metrics.update(figures)

    def check(self, fn, *inputs, compiled=None, tolerances=None, runs=2):
        """Returns the compiled run's outputs; `compiled` replaces the case's compile of a copy of fn."""
        from torch._dynamo.utils import counters

        if compiled is None:
            compiled = self.compile(copy.deepcopy(fn) if isinstance(fn, torch.nn.Module) else fn)
        expected = run_with_grads(fn, inputs)
        torch._dynamo.reset()
        counters.clear()
        for attempt in range(runs):
            self.compared = expected, self.compiled_run(compiled, inputs, attempt)
            self.record(graphs=counters["stats"]["unique_graphs"], graph_breaks=sum(counters["graph_break"].values()))
            for kind, wanted, got in zip(("output", "gradient"), *self.compared, strict=True):
                assert len(got) == len(wanted), f"compiled gave {len(got)} {kind}s, eager {len(wanted)}"
                for i, (e, a) in enumerate(zip(wanted, got, strict=True)):
                    torch.testing.assert_close(a, e, **(tolerances or TOLERANCES.get(getattr(e, "dtype", None), {})),
                                               msg=lambda m, k=kind, i=i: f"{k} {i}: {m}")
        return self.compared[1][0]

    def compiled_run(self, compiled, inputs, attempt):
        return run_with_grads(compiled, inputs)


class OpLog(TorchDispatchMode):
    """While active, notes each aten op that runs (`mm`, `addmm`, ...) with its output dtype, in
    eager code and in compiled code alike (inductor's fused kernels excepted: its matmuls still
    call aten). Enter it around a backward to see what was recomputed."""

    def __init__(self, names=("mm", "addmm", "bmm")):
        super().__init__()
        self.names, self.ops = set(names), []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func.overloadpacket.__name__ in self.names:
            self.ops.append(f"{func.overloadpacket.__name__}:{str(getattr(out, 'dtype', '')).replace('torch.', '')}")
        return out


# --- the harness's case ---------------------------------------------------------------------------

def dynamo_counters() -> dict:
    """Compile metrics since the last `torch._dynamo.reset()`, from Dynamo's own counters."""
    from torch._dynamo.utils import counters

    breaks = dict(counters.get("graph_break", {}))
    return {
        "graphs": counters["stats"].get("unique_graphs", 0),
        "frames": counters["frames"].get("total", 0),
        "frames_ok": counters["frames"].get("ok", 0),
        "graph_breaks": sum(breaks.values()),
        "first_graph_break": next(iter(breaks), None),
    }


class RecompileCounter(logging.Handler):
    """Counts Dynamo's own "Recompiling function ..." log records (what TORCH_LOGS=recompiles
    shows): the one signal every torch from 2.1 gives for a recompile."""

    def __init__(self) -> None:
        super().__init__(level=logging.DEBUG)
        self.count = 0
        self.reasons: list[str] = []

    def emit(self, record):
        self.count += 1
        if len(self.reasons) < 3:
            self.reasons.append(record.getMessage().splitlines()[0][:300])

    def __enter__(self):
        import torch._dynamo.convert_frame  # noqa: F401  (the loggers exist once imported)
        import torch._dynamo.guards  # noqa: F401

        self._loggers = [logging.getLogger(name) for name in list(logging.root.manager.loggerDict)
                         if name.startswith("torch._dynamo") and name.endswith("__recompiles")]
        try:
            torch._logging.set_logs(recompiles=True)
        except Exception:
            self._loggers = []
        for logger in self._loggers:
            logger.addHandler(self)
        return self

    def __exit__(self, *exc):
        for logger in self._loggers:
            logger.removeHandler(self)
        if self._loggers:
            torch._logging.set_logs()  # back to what TORCH_LOGS says
            torch._logging._internal._init_logs()

    @property
    def result(self) -> int | None:
        return self.count if self._loggers else None


def max_abs_diff(expected: list, actual: list) -> float | None:
    diffs = [(e.detach().double() - a.detach().double()).abs().max().item()
             for e, a in zip(expected, actual, strict=False)  # a failed check: the counts may differ
             if e is not None and a is not None and e.shape == a.shape and e.numel()]
    return max(diffs) if diffs else None


class CaseRun(Case):
    """The running case of the harness: `Case` plus what its record shows."""

    def __init__(self, params: dict):
        super().__init__(params.get("backend", "inductor"), bool(params.get("fullgraph", False)))
        self.params = params
        self.metrics: dict[str, Any] = {}
        self.declared: list = []  # what the case declares for this torch (set by the harness's fixture)

    @contextlib.contextmanager
    def watch_compiles(self):
        """Record Dynamo's counters and recompiles for what runs inside (accumulating)."""
        recompiles = self.metrics.get("recompiles") or 0
        with RecompileCounter() as counter:
            try:
                yield
            finally:
                self.metrics.update(dynamo_counters())
                if counter.result is not None:
                    self.metrics["recompiles"] = recompiles + counter.result
                    if counter.reasons:
                        self.metrics.setdefault("recompile_reasons", counter.reasons)

    def compiled_run(self, compiled, inputs, attempt):
        # The first run compiles; a recompile in a later one is a finding the record keeps.
        with self.watch_compiles():
            start = time.perf_counter()
            try:
                return super().compiled_run(compiled, inputs, attempt)
            finally:
                seconds = round(time.perf_counter() - start, 4)
                if attempt == 0:
                    self.metrics["compile_s"] = seconds
                else:
                    self.metrics["run_s"] = min(seconds, self.metrics.get("run_s", seconds))

    def check(self, *args, **kwargs):
        self.compared = None  # type: ignore[assignment]  # Case (carried into scripts as it is) declares no type
        try:
            return super().check(*args, **kwargs)
        finally:
            if self.compared is not None:
                expected, actual = self.compared
                self.metrics["max_abs_diff"] = max_abs_diff(expected[0] + expected[1], actual[0] + actual[1])


class GraphRecorder:
    """A backend that keeps the graphs it gets, then compiles them with a named backend."""

    def __init__(self, backend: str):
        from torch._dynamo.backends.registry import lookup_backend

        self.backend = lookup_backend(backend)
        self.graphs: list = []  # torch.fx.GraphModule, as Dynamo hands them over

    def __call__(self, gm, example_inputs):
        self.graphs.append(gm)
        return self.backend(gm, example_inputs)

    def ops(self) -> list[str]:
        """Names of the functions and methods the graphs call, sorted, without repeats."""
        return sorted({n.target if isinstance(n.target, str) else getattr(n.target, "__name__", str(n.target))
                       for gm in self.graphs for n in gm.graph.nodes if n.op in ("call_function", "call_method")})
