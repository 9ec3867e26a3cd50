# Owner(s): ["module: dynamo"]
# Regression test, in the style of test/dynamo/test_misc.py, for the guard on a getset descriptor
# reached through a method-wrapper argument (VariableBuilder: `desc.__get__` is built from `desc`,
# which had no guard, so a frame traced with one descriptor ran for another).
import copy

import torch
import torch._dynamo.test_case
from torch.overrides import TorchFunctionMode


class PassThrough(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


class GetSetDescriptorGuardTests(torch._dynamo.test_case.TestCase):
    def test_method_wrapper_of_another_getset_descriptor(self):
        f = torch.compile(lambda getter, x: getter(x), backend="eager")
        x = torch.randn(2)
        self.assertIsNone(f(torch.Tensor._backward_hooks.__get__, x))
        self.assertEqual(f(torch.Tensor.device.__get__, x), x.device)
        self.assertEqual(f(torch.Tensor.dtype.__get__, x), x.dtype)
        self.assertIsNone(f(torch.Tensor._backward_hooks.__get__, x))

    def test_copy_of_a_tensor_under_a_torch_function_mode(self):
        @torch.compile(backend="eager")
        def f(x):
            return torch.cos(copy.copy(torch.sin(x)))

        x = torch.randn(3)
        with PassThrough():
            self.assertEqual(f(x), torch.cos(torch.sin(x)))


if __name__ == "__main__":
    from torch._dynamo.test_case import run_tests

    run_tests()
