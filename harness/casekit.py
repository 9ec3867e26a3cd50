"""What cases use: run code eagerly and compiled, compare, and record compile metrics.

A case asks for the `case` fixture (a `CaseRun`) and calls `case.check(...)`:

    def test_plain_checkpoint(case, device, backend, fullgraph):
        model = Block().to(device)
        case.check(model, torch.randn(4, 8, device=device, requires_grad=True))

`check` runs the model eagerly and under `torch.compile` (the case's backend and
fullgraph), compares outputs, output dtypes and gradients of inputs and parameters with
`torch.testing.assert_close`, and records graph count, graph breaks, recompiles,
frames, max abs difference and compile/run seconds in the case's record.
"""

from __future__ import annotations

import contextlib
import copy
import importlib
import logging
import time
from typing import Any, Callable

import pytest
import torch

# Tolerances of compiled against eager: kernels may reorder reductions, so looser than
# assert_close's defaults for float32.
TOLERANCES = {
    torch.float32: dict(rtol=1e-4, atol=1e-5),
    torch.float64: dict(rtol=1e-7, atol=1e-7),
    torch.bfloat16: dict(rtol=2e-2, atol=2e-2),
    torch.float16: dict(rtol=1e-2, atol=1e-2),
}


class HarnessError(Exception):
    """The harness itself could not run a case; recorded as `error`, never as `fail`."""


def need(dotted: str):
    """Return the object at `dotted` ("torch.compiler.nested_compile_region"), or skip the
    case naming what this torch or Lightning lacks."""
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


def _flatten(out) -> list[torch.Tensor]:
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (list, tuple)):
        return [t for item in out for t in _flatten(item)]
    if isinstance(out, dict):
        return [t for key in sorted(out) for t in _flatten(out[key])]
    return []


def _clone(value):
    if isinstance(value, torch.Tensor):
        clone = value.detach().clone()
        clone.requires_grad_(value.requires_grad)
        return clone
    if isinstance(value, (list, tuple)):
        return type(value)(_clone(v) for v in value)
    return value


def _run_with_grads(fn, inputs):
    """Forward, then backward of the sum of every output; returns outputs and gradients."""
    out = fn(*inputs)
    outs = _flatten(out)
    differentiable = [o for o in outs if o.requires_grad]
    if differentiable:
        torch.stack([o.float().sum() for o in differentiable]).sum().backward()
    grads = [t.grad for t in _flatten(inputs) if t.requires_grad]
    if isinstance(fn, torch.nn.Module):
        grads += [p.grad for _, p in sorted(fn.named_parameters()) if p.requires_grad]
    return outs, grads


def dynamo_counters() -> dict:
    """Compile metrics since the last `torch._dynamo.reset()`, from Dynamo's own counters."""
    from torch._dynamo.utils import counters

    breaks = dict(counters.get("graph_break", {}))
    metrics = {
        "graphs": counters["stats"].get("unique_graphs", 0),
        "frames": counters["frames"].get("total", 0),
        "frames_ok": counters["frames"].get("ok", 0),
        "graph_breaks": sum(breaks.values()),
        "first_graph_break": next(iter(breaks), None),
    }
    return metrics


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
            # back to what TORCH_LOGS says
            torch._logging.set_logs()
            torch._logging._internal._init_logs()

    @property
    def result(self) -> int | None:
        return self.count if self._loggers else None


def max_abs_diff(expected: list[torch.Tensor], actual: list[torch.Tensor]) -> float | None:
    diffs = [
        (e.detach().double() - a.detach().double()).abs().max().item()
        for e, a in zip(expected, actual)
        if e is not None and a is not None and e.shape == a.shape and e.numel()
    ]
    return max(diffs) if diffs else None


class CaseRun:
    """One case's run: its parameters and the metrics its record will carry."""

    def __init__(self, params: dict):
        self.params = params
        self.metrics: dict[str, Any] = {}

    @property
    def backend(self) -> str:
        return self.params.get("backend", "inductor")

    @property
    def fullgraph(self) -> bool:
        return bool(self.params.get("fullgraph", False))

    def compile(self, fn, **kwargs):
        """`torch.compile(fn)` with the case's backend and fullgraph unless given."""
        kwargs.setdefault("backend", self.backend)
        kwargs.setdefault("fullgraph", self.fullgraph)
        return torch.compile(fn, **kwargs)

    def record(self, **metrics) -> None:
        """Add case-specific metrics (e.g. which backend compiled a nested function)."""
        self.metrics.update(metrics)

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

    def check(
        self,
        fn: Callable,
        *inputs,
        compiled: Callable | None = None,
        expected_dtype: torch.dtype | None = None,
        tolerances: dict | None = None,
        runs: int = 2,
    ):
        """Run `fn` eagerly and compiled on copies of `inputs` (and of `fn` if it is a module),
        then compare outputs, output dtypes and gradients. `compiled` replaces
        `self.compile(copy of fn)` where the case compiles in its own way (nested compiles).
        Returns the compiled run's outputs."""
        import torch._dynamo

        eager_fn = fn
        test_fn = copy.deepcopy(fn) if isinstance(fn, torch.nn.Module) else fn
        eager_inputs, test_inputs = _clone(inputs), _clone(inputs)
        compiled_fn = compiled if compiled is not None else self.compile(test_fn)
        modules = {id(m): m for m in (eager_fn, test_fn, compiled_fn) if isinstance(m, torch.nn.Module)}

        def fresh_grads():  # each run's gradients are its own, not added to earlier ones
            for module in modules.values():
                module.zero_grad(set_to_none=True)

        fresh_grads()
        expected, expected_grads = _run_with_grads(eager_fn, eager_inputs)

        torch._dynamo.reset()
        from torch._dynamo.utils import counters

        counters.clear()
        fresh_grads()
        with self.watch_compiles():
            start = time.perf_counter()
            try:
                actual, actual_grads = _run_with_grads(compiled_fn, test_inputs)
            finally:
                self.metrics["compile_s"] = round(time.perf_counter() - start, 4)
        # Later runs should hit the compiled code; their time is the run time, and a
        # recompile here is a finding the record keeps.
        run_times = []
        with self.watch_compiles():
            for _ in range(max(runs - 1, 0)):
                again = _clone(inputs)
                fresh_grads()
                start = time.perf_counter()
                _run_with_grads(compiled_fn, again)
                run_times.append(time.perf_counter() - start)
        if run_times:
            self.metrics["run_s"] = round(min(run_times), 4)

        self.metrics["max_abs_diff"] = max_abs_diff(expected + expected_grads, actual + actual_grads)
        assert len(actual) == len(expected), f"compiled returned {len(actual)} tensors, eager {len(expected)}"
        for index, (e, a) in enumerate(zip(expected, actual)):
            assert a.dtype == e.dtype, f"output {index}: compiled dtype {a.dtype}, eager {e.dtype}"
            if expected_dtype is not None:
                assert a.dtype == expected_dtype, f"output {index}: dtype {a.dtype}, expected {expected_dtype}"
            torch.testing.assert_close(a, e, **(tolerances or TOLERANCES.get(e.dtype, {})),
                                       msg=lambda m, i=index: f"output {i}: {m}")
        assert len(actual_grads) == len(expected_grads)
        for index, (e, a) in enumerate(zip(expected_grads, actual_grads)):
            if e is None or a is None:
                assert e is None and a is None, f"gradient {index}: eager {e is not None}, compiled {a is not None}"
                continue
            torch.testing.assert_close(a, e, **(tolerances or TOLERANCES.get(e.dtype, {})),
                                       msg=lambda m, i=index: f"gradient {i}: {m}")
        return actual
