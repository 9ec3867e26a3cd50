# Owner(s): ["module: dynamo"]
# Regression test, in the style of test/dynamo/test_misc.py (beside test_dual_tensor_input_graph_breaks), for a
# forward-AD dual tensor passed to a compiled function that a plain call compiled first: inductor's code
# computes the primal alone, so reusing it drops the tangent (an extern matmul's out= call raises instead).
# Dynamo must not reuse code traced for a tensor without a tangent when the tensor carries one.
import torch
import torch._dynamo.test_case
import torch._dynamo.testing
import torch.autograd.forward_ad as fwAD


def scaled_sin(x):
    return x.sin() * 2


class DualTensorAfterPlainCallTests(torch._dynamo.test_case.TestCase):
    def _check(self, backend, plain_call):
        x, t = torch.randn(4), torch.randn(4)
        compiled = torch.compile(scaled_sin, backend=backend)
        if plain_call == "outside the level":
            compiled(x)
        with fwAD.dual_level():
            if plain_call == "inside the level":
                compiled(x)
            out = fwAD.unpack_dual(compiled(fwAD.make_dual(x, t)))
        self.assertIsNotNone(out.tangent)
        self.assertEqual(out.tangent, 2 * x.cos() * t)
        self.assertEqual(out.primal, scaled_sin(x))

    def test_dual_input_after_plain_call_inductor(self):
        self._check("inductor", "outside the level")

    def test_dual_input_after_plain_call_in_level_inductor(self):
        # the same dual level: the level alone cannot tell the two calls apart, the tensor's tangent can
        self._check("inductor", "inside the level")

    def test_dual_input_afresh_inductor(self):
        # the graph break of a dual input traced afresh (torch 2.14+): right before the fix too
        self._check("inductor", None)

    def test_plain_calls_reuse_their_code(self):
        # the guards the fix adds must hold for a second plain call, out of a dual level and in one (entering
        # the level may compile once more: code traced outside it is not reused inside it)
        counter = torch._dynamo.testing.CompileCounter()
        compiled = torch.compile(scaled_sin, backend=counter)
        x = torch.randn(4)
        compiled(x)
        compiled(x)
        self.assertEqual(counter.frame_count, 1)
        with fwAD.dual_level():
            compiled(x)
            in_level = counter.frame_count
            compiled(x)
        self.assertEqual(counter.frame_count, in_level)


if __name__ == "__main__":
    from torch._dynamo.test_case import run_tests

    run_tests()
