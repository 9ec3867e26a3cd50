# Owner(s): ["module: higher order operators"]
# Regression test, in the style of test/higher_order_ops/test_invoke_subgraph.py, for
# InvokeSubgraph.create (torch/_inductor/ir.py): the partitioned forward of a
# nested_compile_region returns its input as a saved tensor, so that MultiOutput aliases the
# operand; inductor did not know it and recycled the operand's storage for a later buffer,
# overwriting the saved tensor and giving a wrong gradient.
import torch
import torch._dynamo.test_case
from torch._inductor.utils import run_and_get_code


nested_compile_region = torch.compiler.nested_compile_region


class RegionSavedInputReuseTests(torch._dynamo.test_case.TestCase):
    def _check_grad(self, fn, n=8):
        torch.manual_seed(0)
        x = torch.randn(n, requires_grad=True)
        (expected,) = torch.autograd.grad(fn(x).sum(), x)
        out, code = run_and_get_code(torch.compile(fn, backend="inductor", fullgraph=True), x)
        (actual,) = torch.autograd.grad(out.sum(), x)
        # the region is really lowered as invoke_subgraph, not inlined
        self.assertIn("partitioned_fw_subgraph", code[0])
        self.assertEqual(out, fn(x))
        self.assertEqual(actual, expected)

    def test_region_output_feeds_second_call(self):
        @nested_compile_region
        def block(x):
            return torch.sin(x)

        def fn(x):
            r0 = block(x)
            return r0 * block(r0 * x)

        self._check_grad(fn)
        self._check_grad(fn, n=1000)

    def test_region_on_intermediate_called_once(self):
        @nested_compile_region
        def block(x):
            return torch.sin(x)

        def fn(x):
            return block(x * 2).cos()

        # a single call is inlined by Dynamo unless told otherwise
        with torch._dynamo.config.patch(inline_single_use_invoke_subgraph=False):
            self._check_grad(fn)


if __name__ == "__main__":
    from torch._dynamo.test_case import run_tests

    run_tests()
