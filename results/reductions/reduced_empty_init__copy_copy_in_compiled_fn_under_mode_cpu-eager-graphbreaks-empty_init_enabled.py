# copy.copy(tensor) in a compiled function under a TorchFunctionMode that does nothing (README finding 1).
import copy
import torch
from torch.overrides import TorchFunctionMode

class PassThrough(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))

@torch.compile(backend="eager")
def f(x):
    return torch.cos(copy.copy(torch.sin(x)))

with PassThrough():
    print(f(torch.randn(3)))  # AttributeError: 'NoneType' object has no attribute 'type'
