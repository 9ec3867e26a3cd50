# Reduced from autocast/autocast_around_compiled_checkpoint[cpu-bf16-eager-fullgraph] by torch-compile-matrix: fails on cpu_torch29, passes on cpu_torch212.
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.checkpoint import checkpoint

class Case:

    def __init__(self, backend):
        self.backend = backend

    def compile(self, fn):
        return torch.compile(fn, **{'backend': self.backend})

class OpLog(TorchDispatchMode):

    def __init__(self, names='mm'):
        self.names = names
        self.ops = []

    def __torch_dispatch__(self, func, types, args, kwargs):
        out = func(*args)
        if func.overloadpacket.__name__ in self.names:
            self.ops.append(0)
        return out

def body(x, w):
    h = x @ w
    s = h
    return (s,)
case = Case('eager')

def ckpt(x, w):
    return checkpoint(body, x, w)
eager = ckpt
fn = eager

def step(f):
    outputs = f(x, w)
    with OpLog() as log:
        sum((o.float().sum() for o in outputs)).backward()
    return (0, log.ops)
compiled = case.compile(fn)
x = torch.randn(8, requires_grad=True)
w = torch.randn(8, 0)
unique_name_3, eager_bwd = step(fn)
unique_name_4, bwd = step(compiled)
assert bwd == eager_bwd, 'the checkpointed function was not recomputed'
