"""What cases use: run code eagerly and under torch.compile, compare, and see what a feature did.

A case asks for the `case` fixture (a `CaseRun`) and calls `case.check(...)`:

    def test_plain_checkpoint(case, device, backend, fullgraph):
        model = Block().to(device)
        case.check(model, torch.randn(4, 8, device=device, requires_grad=True))

`Case.check` runs the code eagerly and under `torch.compile` (the case's backend and fullgraph),
twice, and compares outputs, output dtypes and gradients of inputs and parameters with
`torch.testing.assert_close`. Agreement is not enough: a case also checks its feature's own effect,
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

# Compiled against eager: kernels may reorder reductions, so looser than assert_close's float32.
TOLERANCES = {
    torch.float32: dict(rtol=1e-4, atol=1e-5),
    torch.float64: dict(rtol=1e-7, atol=1e-7),
    torch.bfloat16: dict(rtol=2e-2, atol=2e-2),
    torch.float16: dict(rtol=1e-2, atol=1e-2),
}


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

def tensors(value) -> list:
    """The tensors in an output: a tensor, or nested lists, tuples and dicts of them."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, dict):
        value = [value[key] for key in sorted(value)]
    return [t for item in value for t in tensors(item)] if isinstance(value, (list, tuple)) else []


def fresh(value):
    """A copy of the inputs, with new leaf tensors (their own .grad)."""
    if isinstance(value, torch.Tensor):
        return value.detach().clone().requires_grad_(value.requires_grad)
    return type(value)(fresh(v) for v in value) if isinstance(value, (list, tuple)) else value


def run_with_grads(fn, inputs, modules=()):
    """`fn` on copies of `inputs`, then backward of the sum of its outputs: (outputs, gradients of
    the inputs and of fn's parameters). `modules` start without gradients."""
    for module in modules:
        module.zero_grad(set_to_none=True)
    inputs = fresh(inputs)
    outputs = tensors(fn(*inputs))
    losses = [o.float().sum() for o in outputs if o.requires_grad]
    if losses:
        torch.stack(losses).sum().backward()
    grads = [t.grad for t in tensors(inputs) if t.requires_grad]
    if isinstance(fn, torch.nn.Module):
        grads += [p.grad for _, p in sorted(fn.named_parameters()) if p.requires_grad]
    return outputs, grads


class Case:
    """Runs code eagerly and under torch.compile, and compares outputs, dtypes and gradients."""

    def __init__(self, backend="inductor", fullgraph=False):
        self.backend, self.fullgraph, self.metrics = backend, fullgraph, {}

    def compile(self, fn, **options):
        """torch.compile with the case's backend and fullgraph, unless `options` say otherwise."""
        return torch.compile(fn, **{"backend": self.backend, "fullgraph": self.fullgraph, **options})

    def record(self, **figures):
        self.metrics.update(figures)

    def check(self, fn, *inputs, compiled=None, expected_dtype=None, tolerances=None, runs=2):
        """`fn` eagerly, then `compiled` (default: the case's compile of a copy of fn) `runs` times,
        each compared with eager. Returns the compiled run's outputs."""
        from torch._dynamo.utils import counters

        test_fn = copy.deepcopy(fn) if isinstance(fn, torch.nn.Module) else fn
        compiled = compiled if compiled is not None else self.compile(test_fn)
        modules = [m for m in (fn, test_fn, compiled) if isinstance(m, torch.nn.Module)]
        expected = run_with_grads(fn, inputs, modules)
        torch._dynamo.reset()
        counters.clear()
        for attempt in range(runs):
            actual = self.compiled_run(compiled, inputs, modules, attempt)
            self.metrics.update(graphs=counters["stats"]["unique_graphs"],
                                graph_breaks=sum(counters["graph_break"].values()))
            self.compare(expected, actual, expected_dtype, tolerances)
        return actual[0]

    def compiled_run(self, compiled, inputs, modules, attempt):
        return run_with_grads(compiled, inputs, modules)

    def compare(self, expected, actual, expected_dtype=None, tolerances=None):
        (outputs, grads), (got, got_grads) = expected, actual
        assert len(got) == len(outputs), f"compiled returned {len(got)} tensors, eager {len(outputs)}"
        for i, (e, a) in enumerate(zip(outputs, got)):
            assert a.dtype == e.dtype, f"output {i}: compiled dtype {a.dtype}, eager {e.dtype}"
            assert expected_dtype in (None, a.dtype), f"output {i}: dtype {a.dtype}, expected {expected_dtype}"
            torch.testing.assert_close(a, e, **(tolerances or TOLERANCES.get(e.dtype, {})),
                                       msg=lambda m, i=i: f"output {i}: {m}")
        assert len(got_grads) == len(grads), f"compiled gave {len(got_grads)} gradients, eager {len(grads)}"
        for i, (e, a) in enumerate(zip(grads, got_grads)):
            assert (e is None) == (a is None), f"gradient {i}: eager {e is not None}, compiled {a is not None}"
            if e is not None:
                torch.testing.assert_close(a, e, **(tolerances or TOLERANCES.get(e.dtype, {})),
                                           msg=lambda m, i=i: f"gradient {i}: {m}")


class OpLog(TorchDispatchMode):
    """While active, notes each aten op that runs (`mm`, `addmm`, ...) with its output dtype, in
    eager code and in compiled code alike (inductor's fused kernels excepted: its matmuls still
    call aten). Enter it around a backward to see what was recomputed."""

    def __init__(self, names=("mm", "addmm", "bmm")):
        super().__init__()
        self.names, self.ops = set(names), []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = func.overloadpacket.__name__
        if name in self.names:
            self.ops.append(f"{name}:{str(getattr(out, 'dtype', '')).replace('torch.', '')}")
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

    def __init__(self):
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
             for e, a in zip(expected, actual)
             if e is not None and a is not None and e.shape == a.shape and e.numel()]
    return max(diffs) if diffs else None


class CaseRun(Case):
    """The running case of the harness: `Case` plus what its record shows."""

    def __init__(self, params: dict):
        super().__init__(params.get("backend", "inductor"), bool(params.get("fullgraph", False)))
        self.params = params
        self.metrics: dict[str, Any] = {}

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

    def compiled_run(self, compiled, inputs, modules, attempt):
        # The first run compiles; a recompile in a later one is a finding the record keeps.
        with self.watch_compiles():
            start = time.perf_counter()
            try:
                return super().compiled_run(compiled, inputs, modules, attempt)
            finally:
                seconds = round(time.perf_counter() - start, 4)
                if attempt == 0:
                    self.metrics["compile_s"] = seconds
                else:
                    self.metrics["run_s"] = min(seconds, self.metrics.get("run_s", seconds))

    def compare(self, expected, actual, expected_dtype=None, tolerances=None):
        diff = max_abs_diff(expected[0] + expected[1], actual[0] + actual[1])
        self.metrics["max_abs_diff"] = max(diff, self.metrics.get("max_abs_diff") or 0) if diff is not None else None
        super().compare(expected, actual, expected_dtype, tolerances)
