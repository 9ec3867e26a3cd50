# Owner(s): ["module: dynamo"]
# Regression test, in the style of test/dynamo/test_activation_checkpointing.py, for
# tag_activation_checkpoint_impl (torch/_higher_order_ops/wrap.py), which set
# preserve_rng_state=False also where the op runs on real tensors: under backend="eager" the
# checkpoint's recompute then drew fresh random numbers, and the gradient did not follow the
# forward's dropout mask.
import unittest

import torch
import torch._dynamo.test_case
from torch._dynamo.testing import CompileCounterWithBackend
from torch.utils.checkpoint import checkpoint


def dropout_fn(x):
    return checkpoint(torch.nn.functional.dropout, x, 0.5, True, use_reentrant=False)


def dropout_fn_no_preserve(x):
    return checkpoint(
        torch.nn.functional.dropout, x, 0.5, True, use_reentrant=False, preserve_rng_state=False
    )


class CheckpointRngEagerBackendTests(torch._dynamo.test_case.TestCase):
    def _run(self, fn, backend):
        counter = CompileCounterWithBackend(backend)
        x = torch.randn(1000, requires_grad=True)
        torch.manual_seed(0)
        out = torch.compile(fn, backend=counter, fullgraph=True)(x)
        out.sum().backward()
        self.assertEqual(counter.frame_count, 1)
        return x, out

    def _check_follows_forward_mask(self, backend):
        x, out = self._run(dropout_fn, backend)
        # d sum(dropout(x)) / dx is the forward's mask / (1 - p): the recompute replays the forward
        self.assertTrue(0 < int((out == 0).sum()) < 1000)
        self.assertEqual(x.grad, (out != 0).to(x.dtype) * 2)

    def test_checkpointed_dropout_gradient_eager_backend(self):
        self._check_follows_forward_mask("eager")

    def test_checkpointed_dropout_gradient_aot_eager(self):
        self._check_follows_forward_mask("aot_eager")

    def test_checkpointed_dropout_gradient_inductor(self):
        self._check_follows_forward_mask("inductor")

    def _check_eager_backend_matches_eager(self, fn):
        # From the same seed, backend="eager" gives what eager gives: outputs and gradients.
        x_ref = torch.randn(1000, requires_grad=True)
        x = x_ref.detach().clone().requires_grad_()
        torch.manual_seed(0)
        expected = fn(x_ref)
        expected.sum().backward()
        torch.manual_seed(0)
        result = torch.compile(fn, backend="eager", fullgraph=True)(x)
        result.sum().backward()
        self.assertEqual(result, expected)
        self.assertEqual(x.grad, x_ref.grad)

    def test_checkpointed_dropout_eager_backend_matches_eager(self):
        self._check_eager_backend_matches_eager(dropout_fn)

    # Before 2.12 the eager backend ran a checkpointed function without checkpointing it (no recompute,
    # pytorch/pytorch#160773), so there was no recompute for the flag to act on.
    @unittest.skipIf(torch.__version__ < "2.12", "the eager backend ignored checkpointing before torch 2.12")
    def test_checkpointed_dropout_eager_backend_respects_preserve_rng_state_false(self):
        # An explicit preserve_rng_state=False is the user's to make: the eager backend behaves as
        # eager does with it (the recompute draws anew), from the same seed the same numbers.
        self._check_eager_backend_matches_eager(dropout_fn_no_preserve)


if __name__ == "__main__":
    from torch._dynamo.test_case import run_tests

    run_tests()
