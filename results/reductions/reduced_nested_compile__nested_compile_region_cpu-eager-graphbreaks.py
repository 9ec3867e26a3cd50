# pytorch/pytorch#178520: a nested_compile_region compiled with backend="eager" fails in backward.
import torch

@torch.compiler.nested_compile_region
def block(x):
    return torch.sin(x)

x = torch.randn(4, requires_grad=True)
torch.compile(block, backend="eager")(x).sum().backward()
print(x.grad)
