# pytorch/pytorch#196053: an init call inside compiled code is not skipped by a mode that skips it.
import torch
from torch.overrides import TorchFunctionMode

class SkipInit(TorchFunctionMode):  # what Lightning's _EmptyInit(enabled=True) does
    def __torch_function__(self, func, types, args=(), kwargs=None):
        if getattr(func, "__module__", None) == "torch.nn.init":
            return kwargs["tensor"] if kwargs and "tensor" in kwargs else args[0]
        return func(*args, **(kwargs or {}))

@torch.compile(backend="eager")
def init(a):
    torch.nn.init.constant_(a, 1.0)

a = torch.zeros(1)
with SkipInit():
    init(a)
assert a.eq(0).all(), f"the init call in compiled code ran under the mode: {a}"
