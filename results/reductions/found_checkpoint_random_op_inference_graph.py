# torch.compile refuses a checkpointed random op in an inference graph (no input needs a gradient).
import torch
from torch.utils.checkpoint import checkpoint

def fn(x):
    return checkpoint(torch.rand_like, x, use_reentrant=False)

x = torch.randn(4)  # nothing requires grad: there is no backward to recompute for
print("eager:", fn(x))
# aot_eager and inductor: RuntimeError: Activation checkpoint rematerialization in
# `forward-loss-backward` graph does not support RNG ops in recompute regions. ...
print("compiled:", torch.compile(fn, backend="aot_eager")(x))
