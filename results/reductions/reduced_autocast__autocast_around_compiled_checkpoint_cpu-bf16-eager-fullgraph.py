# pytorch/pytorch#160773: with backend="eager", a compiled checkpoint is not recomputed in backward.
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.checkpoint import checkpoint

class CountMM(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.mm = getattr(self, "mm", 0) + (func.overloadpacket.__name__ == "mm")
        return func(*args, **(kwargs or {}))

def backward_mms(f):
    out = f(torch.randn(4, 8, requires_grad=True), torch.randn(8, 8))
    with CountMM() as count:
        out.sum().backward()
    return count.mm  # the gradient's mm, and the recomputed forward's

fn = lambda x, w: checkpoint(lambda x, w: torch.sigmoid(x @ w), x, w, use_reentrant=False)
eager, compiled = backward_mms(fn), backward_mms(torch.compile(fn, backend="eager"))
assert compiled == eager, f"backward ran {compiled} mm, eagerly {eager}: no recompute"
