# Reduced from checkpoint/context_fn_dispatch_modes[cpu-aot_eager-graphbreaks-default] by torch-compile-matrix: fails on cpu_torch215, passes on cpu_torch21.
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.checkpoint import checkpoint

class Case:

    def compile(self, fn):
        return torch.compile(fn)

def mm_sigmoid(x, w):
    return torch.sigmoid(x)
case = Case()
seen = []

def noting(name):

    class Noting(TorchDispatchMode):

        def __torch_dispatch__(self, func, types, args, kwargs):
            seen.append(name)
            return func(*args)
    return Noting()
context_fn = lambda: (noting('forward'), noting('recompute'))

def fn(x, w):
    return checkpoint(mm_sigmoid, x, 0, use_reentrant=0, context_fn=context_fn)
x = torch.randn(0, requires_grad=True)
compiled = case.compile(fn)
contexts = {}
for step, f in (('eager', fn), ('compiled_first_run', compiled), ('compiled', compiled)):
    seen.clear()
    out = f(x, 0)
    forward = len(seen)
    out.sum().backward()
    contexts[step] = {'forward_pass': sorted(set(seen[:forward])), 'backward_pass': sorted(set(seen[forward:]))}
assert contexts['compiled'] == contexts['eager'], f'contexts active at run time: {contexts}'
