# pytorch/pytorch#193960: nested_compile_region + inductor, a wrong gradient of block(block(x)) + x.
import torch

@torch.compiler.nested_compile_region
def block(x):
    return torch.sin(x)

def outer(x):
    return block(block(x)) + x

x = torch.randn(8, requires_grad=True)
(eager,) = torch.autograd.grad(outer(x).sum(), x)
(compiled,) = torch.autograd.grad(torch.compile(outer, backend="inductor")(x).sum(), x)
torch.testing.assert_close(compiled, eager)
