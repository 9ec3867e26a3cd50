# A forward-AD dual tensor passed to a compiled function that a plain call compiled gets no tangent back.
# Dynamo reuses the plain call's inductor code, which computes the primal alone (afresh, 2.14+ graph-breaks).
import torch
import torch.autograd.forward_ad as fwAD

def f(x):
    return x.sin() * 2

x, t = torch.randn(4), torch.ones(4)
for backend in ("eager", "aot_eager", "inductor"):
    for plain_call_first in (False, True):
        torch._dynamo.reset()
        compiled = torch.compile(f, backend=backend)
        if plain_call_first:
            compiled(x)
        with fwAD.dual_level():
            tangent = fwAD.unpack_dual(compiled(fwAD.make_dual(x, t))).tangent
        assert tangent is not None, f"{backend}, plain call first: {plain_call_first}: no tangent"  # inductor, True
        torch.testing.assert_close(tangent, 2 * x.cos() * t)
        print(backend, "plain call first:", plain_call_first, "as eager")
