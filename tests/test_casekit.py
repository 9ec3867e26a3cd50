"""The validation helper must catch a compiled result that differs from eager."""

import pytest
import torch

from harness.plugin.casekit import CaseRun, need


def wrong_backend(offset=0.0, dtype=None):
    """A backend that compiles 'wrong' code: outputs shifted or cast."""
    def backend(gm, example_inputs):
        def run(*args):
            out = gm(*args)
            outs = out if isinstance(out, (list, tuple)) else (out,)
            changed = [(o + offset) if dtype is None else o.to(dtype) for o in outs]
            return type(out)(changed) if isinstance(out, (list, tuple)) else changed[0]
        return run
    return backend


def test_check_passes_and_records_metrics_for_a_real_inductor_compile():
    run = CaseRun({"backend": "inductor", "fullgraph": False})
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU())
    run.check(model, torch.randn(4, 8, requires_grad=True))
    assert run.metrics["graphs"] == 1 and run.metrics["frames"] >= 1
    assert run.metrics["max_abs_diff"] < 1e-4


def test_check_fails_when_outputs_differ():
    run = CaseRun({"backend": wrong_backend(offset=0.5)})
    with pytest.raises(AssertionError, match="output 0"):
        run.check(lambda x: x * 2, torch.randn(3))
    assert run.metrics["max_abs_diff"] == pytest.approx(0.5)


def test_check_fails_when_dtype_differs():
    run = CaseRun({"backend": wrong_backend(dtype=torch.float64)})
    with pytest.raises(AssertionError, match="dtype"):
        run.check(lambda x: x * 2, torch.randn(3))


def test_check_fails_when_gradients_differ():
    class SkewedGrad(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, grad):
            return grad * 3  # wrong on purpose

    run = CaseRun({"backend": "eager"})
    with pytest.raises(AssertionError, match="gradient 0"):
        run.check(lambda x: x * 2, torch.randn(3, requires_grad=True), compiled=SkewedGrad.apply)


def test_check_counts_graph_breaks():
    def breaks(x):
        x = x.sin()
        torch._dynamo.graph_break()
        return x.cos()

    run = CaseRun({"backend": "eager", "fullgraph": False})
    run.check(breaks, torch.randn(3, requires_grad=True))
    assert run.metrics["graphs"] == 2
    assert run.metrics["graph_breaks"] >= 1


def test_need_returns_what_exists_and_skips_naming_what_is_missing():
    assert need("torch.utils.checkpoint.checkpoint") is torch.utils.checkpoint.checkpoint
    with pytest.raises(pytest.skip.Exception, match="missing: torch.no_such_api"):
        need("torch.no_such_api")
    with pytest.raises(pytest.skip.Exception, match="missing: no_such_package is not installed"):
        need("no_such_package.thing")


def test_recompiles_are_counted():
    run = CaseRun({"backend": "eager"})
    compiled = torch.compile(lambda x, n: x * n, backend="eager", dynamic=False)
    with run.watch_compiles():
        for n in range(4):
            compiled(torch.randn(3), n)
    assert run.metrics["recompiles"] == 3
    assert "Recompiling function" in run.metrics["recompile_reasons"][0]
