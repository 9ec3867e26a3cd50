# Owner(s): ["module: dynamo"]
# Regression test, in the style of test/dynamo/test_activation_checkpointing.py, for the
# forward-loss-backward remat pass (remat_using_tags_for_fwd_loss_bwd_graph), which refused a
# checkpointed RNG op in an inference graph: nothing requires grad, so there is no backward region
# and nothing to recompute.
import unittest

import torch
import torch._dynamo.config
import torch._dynamo.test_case
import torch._functorch.config
import torch.fx.traceback
from torch._dynamo.testing import CompileCounterWithBackend
from torch.utils.checkpoint import checkpoint


class CheckpointRngInferenceTests(torch._dynamo.test_case.TestCase):
    def _run(self, backend):
        def fn(x):
            return checkpoint(torch.nn.functional.dropout, x, 0.5, True, use_reentrant=False)

        x = torch.ones(1000)  # requires_grad=False: AOTAutograd compiles an inference graph
        counter = CompileCounterWithBackend(backend)
        self.assertTrue(torch._functorch.config.remat_using_tags_for_fwd_loss_bwd_graph)
        out = torch.compile(fn, backend=counter, fullgraph=True)(x)
        self.assertEqual(counter.frame_count, 1)
        # dropout ran once, as in eager: each element is dropped (0) or scaled by 1 / (1 - p)
        self.assertTrue(((out == 0) | (out == 2)).all())
        self.assertTrue(0 < int((out == 0).sum()) < 1000)

    # The pass is the feature under test (torch 2.11 has it, 2.5 does not): where there is none, nothing to check.
    @unittest.skipUnless(hasattr(torch._functorch.config, "remat_using_tags_for_fwd_loss_bwd_graph"),
                         "no forward-loss-backward remat pass in this torch")
    def test_checkpointed_rng_op_inference_graph_aot_eager(self):
        self._run("aot_eager")

    @unittest.skipUnless(hasattr(torch._functorch.config, "remat_using_tags_for_fwd_loss_bwd_graph"),
                         "no forward-loss-backward remat pass in this torch")
    def test_checkpointed_rng_op_inference_graph_inductor(self):
        self._run("inductor")

    # Before 2.12 the nodes of a traced torch.autograd.grad are not marked as backward (autograd_backward),
    # so the pass finds no backward region, rematerializes nothing, and the graph keeps the forward's mask.
    @unittest.skipUnless(hasattr(torch.fx.traceback, "_set_autograd_backward"),
                         "the nodes of a traced torch.autograd.grad are not marked as backward in this torch")
    def test_checkpointed_rng_op_forward_loss_backward_graph_still_raises(self):
        # A forward-loss-backward graph (Dynamo traces torch.autograd.grad) whose backward recomputes the
        # checkpointed random op: the pass cannot replay its randomness there, and must still refuse it.
        def step(x, w):
            y = checkpoint(lambda x: torch.nn.functional.dropout(x @ w, 0.5, True), x, use_reentrant=False)
            (grad,) = torch.autograd.grad(y.sum(), w)
            return grad

        x, w = torch.randn(4, 4), torch.randn(4, 4, requires_grad=True)
        with torch._dynamo.config.patch(trace_autograd_ops=True):
            with self.assertRaisesRegex(torch._dynamo.exc.BackendCompilerFailed, "does not support RNG ops"):
                torch.compile(step, backend="aot_eager", fullgraph=True)(x, w)

    def test_checkpointed_rng_op_training_graph_still_compiles(self):
        def fn(x):
            return checkpoint(torch.nn.functional.dropout, x, 0.5, True, use_reentrant=False)

        x = torch.ones(1000, requires_grad=True)
        out = torch.compile(fn, backend="aot_eager", fullgraph=True)(x)
        out.sum().backward()
        # the recompute replays the forward's mask: the gradient is zero exactly where it dropped
        self.assertEqual(x.grad, (out != 0).float() * 2)


if __name__ == "__main__":
    from torch._dynamo.test_case import run_tests

    run_tests()
