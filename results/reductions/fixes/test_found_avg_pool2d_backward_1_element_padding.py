# Owner(s): ["module: inductor"]
# Regression test, in the style of test/inductor/test_torchinductor.py, for inductor's avg_pool2d
# backward lowering with 1-element kernel_size / stride / padding lists: aten takes one int for both
# dims, the forward lowering expands them (pad_listlike), the backward lowering asserted len == 2.
import torch
from torch._inductor.test_case import run_tests, TestCase
from torch._inductor.utils import run_and_get_code
from torch.testing._internal.common_methods_invocations import op_db

AVG_POOL2D = next(op for op in op_db if op.name == "nn.functional.avg_pool2d")


class AvgPool2dBackwardTests(TestCase):
    def _check(self, fn, x):
        torch._dynamo.reset()
        x_ref = x.detach().clone().requires_grad_()
        expected = fn(x_ref)
        expected.sum().backward()
        compiled = torch.compile(fn, backend="inductor", fullgraph=True)

        def step():
            out = compiled(x)
            out.sum().backward()
            return out

        out, codes = run_and_get_code(step)
        self.assertEqual(out, expected)
        self.assertEqual(x.grad, x_ref.grad)
        # lowered, not sent to the aten fallback
        self.assertFalse(any("aten.avg_pool2d_backward" in code for code in codes))

    def test_avg_pool2d_backward_1_element_padding(self):
        def fn(x):
            return torch.nn.functional.avg_pool2d(x, 2, padding=(0,))

        self._check(fn, torch.randn(1, 1, 4, 4, requires_grad=True))

    def test_avg_pool2d_backward_1_element_lists(self):
        def fn(x):
            return torch.nn.functional.avg_pool2d(x, [3], stride=[2], padding=[1])

        self._check(fn, torch.randn(2, 3, 7, 9, requires_grad=True))

    def test_avg_pool2d_backward_opinfo_samples(self):
        # every OpInfo sample of nn.functional.avg_pool2d, several with a 1-element padding: one
        # assertion that names each failing sample (a failing subTest leaves the test passed under pytest)
        failing = []
        for sample in AVG_POOL2D.sample_inputs("cpu", torch.float32, requires_grad=True):
            try:
                self._check(lambda x: AVG_POOL2D(x, *sample.args, **sample.kwargs), sample.input)
            except Exception as exc:
                failing.append(f"args={sample.args} kwargs={sample.kwargs}: {type(exc).__name__}")
        self.assertEqual(failing, [])


if __name__ == "__main__":
    run_tests()
