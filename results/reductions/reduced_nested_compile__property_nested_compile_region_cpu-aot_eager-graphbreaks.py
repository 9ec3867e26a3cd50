# A nested_compile_region returning one tensor twice (aliased outputs) fails to compile.
import torch

@torch.compiler.nested_compile_region
def block(x):
    y = x * x
    return y, y

def outer(x):
    return block(x)

print(torch.compile(outer, backend="aot_eager")(torch.randn(4)))
