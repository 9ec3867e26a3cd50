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
        # A frame traced with one descriptor's method-wrapper must not run for another's. Each
        # `desc.__get__` is a new, short-lived object: before torch 2.5 the frame's guard was its id,
        # which the next method-wrapper takes over once the first is freed (so the copy.copy cells on
        # 2.2-2.4 fail in some processes only); from 2.5 on there is no guard at all. The second
        # getter is taken at the first one's address where the allocator gives it, to meet both.
        f = torch.compile(lambda getter, x: getter(x), backend="eager")
        x = torch.randn(2)
        first = torch.Tensor._backward_hooks.__get__
        address = id(first)
        self.assertIsNone(f(first, x))
        del first
        getters = [torch.Tensor.device.__get__ for _ in range(64)]
        device_getter = next((getter for getter in getters if id(getter) == address), getters[0])
        self.assertEqual(f(device_getter, x), x.device)
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
