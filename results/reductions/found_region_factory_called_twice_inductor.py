# A nested_compile_region with no tensor input (a factory) called twice fails to lower in inductor.
import torch

@torch.compiler.nested_compile_region
def ones():
    return torch.ones(5, 5)

def fn():
    return ones() + ones()

print("eager:", fn().sum())
# inductor: LoweringException: AssertionError: Expected device is not None
print("compiled:", torch.compile(fn, backend="inductor")().sum())
