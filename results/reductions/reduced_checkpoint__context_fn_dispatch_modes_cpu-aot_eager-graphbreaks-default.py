# A checkpoint context_fn's dispatch modes see no op when the compiled code runs (README finding 2).
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.checkpoint import checkpoint

seen = []

class Note(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        seen.append(func)
        return func(*args, **(kwargs or {}))

def context_fn():  # a module-level function: Dynamo refuses a lambda here
    return Note(), Note()

x = torch.randn(4, requires_grad=True)
compiled = torch.compile(lambda x: checkpoint(torch.sin, x, use_reentrant=False, context_fn=context_fn), backend="aot_eager")
compiled(x).sum().backward()  # the first call compiles: the modes see ops while AOTAutograd traces
seen.clear()
compiled(x).sum().backward()
assert seen, "the context_fn's modes saw no op at run time; eagerly they see the forward and the recompute"
