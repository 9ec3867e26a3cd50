# Owner(s): ["module: inductor"]
# Regression test, in the style of test/higher_order_ops/test_invoke_subgraph.py, for
# InvokeSubgraph.create (torch/_inductor/ir.py), which took the device of its layout from the
# first tensor operand only: a nested_compile_region with no tensor input (a factory) failed to
# lower with "AssertionError: Expected device is not None".
import torch
import torch._dynamo.test_case
from torch._inductor.utils import run_and_get_code


nested_compile_region = torch.compiler.nested_compile_region


class RegionWithoutTensorInputTests(torch._dynamo.test_case.TestCase):
    def test_factory_region_called_twice(self):
        @nested_compile_region
        def ones():
            return torch.ones(5, 5)

        def fn():
            return ones() + ones()

        out, code = run_and_get_code(torch.compile(fn, backend="inductor", fullgraph=True))
        self.assertIn("# subgraph: ", code[0])  # lowered as invoke_subgraph, not inlined
        self.assertEqual(out, fn())

    def test_factory_region_with_int_input(self):
        @nested_compile_region
        def filled(n):
            return torch.full((3,), n, dtype=torch.float32), torch.arange(n)

        def fn():
            a, b = filled(4)
            c, d = filled(4)
            return a + c, b + d

        self.assertEqual(torch.compile(fn, backend="inductor", fullgraph=True)(), fn())

    def test_factory_region_called_once_not_inlined(self):
        @nested_compile_region
        def ones():
            return torch.ones(5, 5)

        def fn():
            return ones() * 2

        with torch._dynamo.config.patch(inline_single_use_invoke_subgraph=False):
            out = torch.compile(fn, backend="inductor", fullgraph=True)()
        self.assertEqual(out, fn())


if __name__ == "__main__":
    from torch._dynamo.test_case import run_tests

    run_tests()
