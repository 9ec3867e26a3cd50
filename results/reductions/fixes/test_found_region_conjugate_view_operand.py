# Owner(s): ["module: higher order operators"]
# Regression test, in the style of test/higher_order_ops/test_invoke_subgraph.py, for the
# invoke_subgraph HOP (torch/_higher_order_ops/invoke_subgraph.py), which had no kernel for
# DispatchKey.Conjugate or DispatchKey.Negative: a conjugate or negative view among its operands
# (the tangent of a region's conjugate-view output, or a view passed in) raised
# "could not find kernel for HigherOrderOperator invoke_subgraph".
import torch
import torch._dynamo.test_case
from torch._dynamo.testing import CompileCounterWithBackend


nested_compile_region = torch.compiler.nested_compile_region


class RegionConjugateViewTests(torch._dynamo.test_case.TestCase):
    def _check_conj_output(self, backend):
        @nested_compile_region
        def region(x):
            return torch.fft.ihfft(x)  # a conjugate view

        def fn(x):
            return region(x), region(x + 1)

        x = torch.randn(8, requires_grad=True)
        grads = (torch.randn(5, dtype=torch.complex64), torch.randn(5, dtype=torch.complex64))
        expected = fn(x)
        (expected_grad,) = torch.autograd.grad(expected, x, grads)
        counter = CompileCounterWithBackend(backend)
        actual = torch.compile(fn, backend=counter, fullgraph=True)(x)
        (actual_grad,) = torch.autograd.grad(actual, x, grads)
        self.assertEqual(counter.frame_count, 1)
        self.assertEqual(actual, expected)
        self.assertEqual(actual_grad, expected_grad)

    def test_conj_view_output_called_twice_aot_eager(self):
        self._check_conj_output("aot_eager")

    def test_conj_view_output_called_twice_inductor(self):
        self._check_conj_output("inductor")

    def test_conj_view_output_called_once_not_inlined(self):
        @nested_compile_region
        def region(x):
            return torch.complex(x, 2 * x).conj()

        def fn(x):
            return region(x)

        x = torch.randn(8, requires_grad=True)
        grad = torch.randn(8, dtype=torch.complex64)
        (expected,) = torch.autograd.grad(fn(x), x, grad)
        with torch._dynamo.config.patch(inline_single_use_invoke_subgraph=False):
            out = torch.compile(fn, backend="aot_eager", fullgraph=True)(x)
        (actual,) = torch.autograd.grad(out, x, grad)
        self.assertEqual(actual, expected)

    def test_conj_and_neg_view_operands(self):
        @nested_compile_region
        def region(z):
            return z * 2

        for view in (torch.conj, torch._neg_view):
            for backend in ("eager", "aot_eager"):

                def fn(z):
                    v = view(z)
                    return region(v), region(v + 1)

                z = torch.randn(4, dtype=torch.complex64)
                torch._dynamo.reset()
                self.assertEqual(torch.compile(fn, backend=backend, fullgraph=True)(z), fn(z))


if __name__ == "__main__":
    from torch._dynamo.test_case import run_tests

    run_tests()
