# torch.compile(backend="eager"): a checkpointed dropout's recompute draws a fresh mask (wrong gradient).
import torch
from torch.utils.checkpoint import checkpoint

def fn(x):
    return checkpoint(torch.nn.functional.dropout, x, 0.5, True, use_reentrant=False)

x = torch.randn(1000, requires_grad=True)
y = torch.compile(fn, backend="eager")(x)
y.sum().backward()
# d sum(dropout(x)) / dx is the forward's mask * 2: zero exactly where y is zero. From 2.12 the
# backward's recompute does not restore the RNG state (preserve_rng_state=False), so the masks differ.
differ = ((y != 0) != (x.grad != 0)).sum().item()
assert differ == 0, f"the gradient does not follow the forward's dropout mask in {differ} of 1000 places"
