# Compiled, vector_norm(x, ord=0) of a non-leaf tensor does not require grad; eagerly it does.
import torch

def fn(x):
    return torch.linalg.vector_norm(x, ord=0)

x = torch.randn(5, requires_grad=True).clone()  # not a leaf
eager, compiled = fn(x), torch.compile(fn, backend="aot_eager")(x)
print("requires_grad: eager", eager.requires_grad, "compiled", compiled.requires_grad)
eager.backward()  # runs; the input gets no gradient (None): ord=0 has none
compiled.backward()  # RuntimeError: element 0 of tensors does not require grad ...
