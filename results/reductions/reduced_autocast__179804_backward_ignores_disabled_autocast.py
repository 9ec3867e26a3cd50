# pytorch/pytorch#179804: compiled, an autocast(enabled=False) matmul's backward runs in bfloat16.
import torch
from torch.utils._python_dispatch import TorchDispatchMode

class MMDtypes(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.seen = getattr(self, "seen", []) + ([str(out.dtype)] if func.overloadpacket.__name__ == "mm" else [])
        return out

def fn(y, w):
    with torch.autocast("cpu", enabled=False):
        return y.float() @ w.float()

def backward_mm_dtypes(f):
    with torch.autocast("cpu", dtype=torch.bfloat16):  # entered around the (compiled) call
        out = f(torch.randn(4, 8, dtype=torch.bfloat16, requires_grad=True), torch.randn(8, 8, dtype=torch.bfloat16, requires_grad=True))
    with MMDtypes() as log:
        out.sum().backward()
    return log.seen

eager, compiled = backward_mm_dtypes(fn), backward_mm_dtypes(torch.compile(fn, backend="aot_eager"))
assert compiled == eager, f"backward matmuls: compiled {compiled}, eager {eager}"
