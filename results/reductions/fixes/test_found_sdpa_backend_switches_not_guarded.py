# Owner(s): ["module: dynamo"]
# Regression test, in the style of test/dynamo/test_recompiles.py, for the guard on SDPA's backend
# switches: scaled_dot_product_attention's kernel is chosen from them when AOTAutograd traces it, and
# the graph keeps that kernel's op, so a switch after the compile must recompile, and inductor's and
# AOTAutograd's caches must not serve the first kernel's program to the recompile.
import contextlib

import torch
import torch._dynamo.test_case
import torch._dynamo.testing
import torch.nn.functional as F


def attend(q, k, v):
    return F.scaled_dot_product_attention(q, k, v)


@contextlib.contextmanager
def fused_sdpa_backends_off():
    cuda = torch.backends.cuda
    before = (cuda.flash_sdp_enabled(), cuda.mem_efficient_sdp_enabled())
    cuda.enable_flash_sdp(False)
    cuda.enable_mem_efficient_sdp(False)
    try:
        yield
    finally:
        cuda.enable_flash_sdp(before[0])
        cuda.enable_mem_efficient_sdp(before[1])


class SDPABackendSwitchTests(torch._dynamo.test_case.TestCase):
    def test_recompiles_when_sdpa_backends_are_switched(self):
        cnt = torch._dynamo.testing.CompileCounterWithBackend("aot_eager")
        compiled = torch.compile(attend, backend=cnt)
        q, k, v = (torch.randn(2, 3, 16, 8) for _ in range(3))
        self.assertEqual(compiled(q, k, v), attend(q, k, v), atol=0, rtol=0)
        with fused_sdpa_backends_off():
            self.assertEqual(compiled(q, k, v), attend(q, k, v), atol=0, rtol=0)
        self.assertEqual(cnt.frame_count, 2)
        # the switches as they were: the first graph serves again
        self.assertEqual(compiled(q, k, v), attend(q, k, v), atol=0, rtol=0)
        self.assertEqual(cnt.frame_count, 2)

    def test_inductor_recompile_after_a_switch_is_not_served_the_first_kernel(self):
        # inductor's and AOTAutograd's caches are keyed on the graph Dynamo hands over, which is the
        # same before and after the switch: their keys must hold the switches too
        compiled = torch.compile(attend, backend="inductor")
        q, k, v = (torch.randn(2, 3, 16, 8) for _ in range(3))
        compiled(q, k, v)
        with fused_sdpa_backends_off():
            switched = compiled(q, k, v)
            torch._dynamo.reset()
            with torch._inductor.config.patch(force_disable_caches=True):
                fresh = torch.compile(attend, backend="inductor")(q, k, v)
        self.assertEqual(switched, fresh, atol=0, rtol=0)

    def test_unchanged_sdpa_backends_do_not_recompile(self):
        cnt = torch._dynamo.testing.CompileCounterWithBackend("aot_eager")
        compiled = torch.compile(attend, backend=cnt)
        q, k, v = (torch.randn(2, 3, 16, 8) for _ in range(3))
        with fused_sdpa_backends_off():
            for _ in range(3):
                self.assertEqual(compiled(q, k, v), attend(q, k, v), atol=0, rtol=0)
        self.assertEqual(cnt.frame_count, 1)


if __name__ == "__main__":
    from torch._dynamo.test_case import run_tests

    run_tests()
