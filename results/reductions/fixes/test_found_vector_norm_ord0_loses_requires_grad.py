# Owner(s): ["module: aotdispatch"]
# Regression test, in the style of test/dynamo/test_aot_autograd.py, for AOTAutograd's
# _compute_indices_of_inps_to_detach (torch/_functorch/_aot_autograd/graph_compile.py; Note
# [Detaching inputs that never need gradients]): when every input that requires grad is a non-leaf
# whose gradient is statically None, all were detached before the CompiledFunction ran, so an
# output that requires grad eagerly (linalg.vector_norm(x, ord=0), a custom Function whose backward
# returns None) did not, and its backward raised "element 0 of tensors does not require grad".
import torch
import torch._dynamo.test_case
from torch._dynamo.testing import CompileCounterWithBackend


class NoneGrad(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        return None


def norm_ord0(x):
    return torch.linalg.vector_norm(x, ord=0)


def none_grad_fn(x):
    return NoneGrad.apply(x)


class NoneGradientInputsTests(torch._dynamo.test_case.TestCase):
    def _check_like_eager(self, fn, backend):
        leaf = torch.randn(5, requires_grad=True)
        leaf_ref = leaf.detach().clone().requires_grad_()
        expected = fn(leaf_ref.clone())  # the input is not a leaf
        counter = CompileCounterWithBackend(backend)
        result = torch.compile(fn, backend=counter, fullgraph=True)(leaf.clone())
        self.assertEqual(counter.frame_count, 1)
        self.assertTrue(expected.requires_grad)
        self.assertEqual(result.requires_grad, expected.requires_grad)
        self.assertEqual(result, expected)
        expected.sum().backward()
        result.sum().backward()  # raised: element 0 of tensors does not require grad
        self.assertEqual(leaf.grad, leaf_ref.grad)

    def test_vector_norm_ord0_non_leaf_requires_grad_aot_eager(self):
        self._check_like_eager(norm_ord0, "aot_eager")

    def test_vector_norm_ord0_non_leaf_requires_grad_inductor(self):
        self._check_like_eager(norm_ord0, "inductor")

    def test_none_gradient_function_non_leaf_requires_grad_aot_eager(self):
        self._check_like_eager(none_grad_fn, "aot_eager")

    def test_leaf_input_still_requires_grad(self):
        x = torch.randn(5, requires_grad=True)
        out = torch.compile(norm_ord0, backend="aot_eager", fullgraph=True)(x)
        self.assertTrue(out.requires_grad)

    def test_input_with_none_gradient_still_detached(self):
        # See https://github.com/pytorch/pytorch/issues/97745: y's gradient is None and another
        # input (x) keeps the output attached, so y is still detached and the backward does not
        # walk y's autograd graph, which was already freed.
        def fn(x, y):
            return x * y.detach()

        w = torch.randn(4, requires_grad=True)
        y = w * 2
        y.sum().backward()
        x = torch.randn(4, requires_grad=True)
        out = torch.compile(fn, backend="aot_eager", fullgraph=True)(x, y)
        self.assertTrue(out.requires_grad)
        out.sum().backward()  # would raise "Trying to backward through the graph a second time"
        self.assertEqual(x.grad, y.detach())


if __name__ == "__main__":
    from torch._dynamo.test_case import run_tests

    run_tests()
