# nested_compile_region + inductor: a wrong input gradient when a region's output feeds a second call.
import torch

@torch.compiler.nested_compile_region
def block(x):
    return torch.sin(x)

def outer(x):
    r0 = block(x)
    return r0 * block(r0 * x)

x = torch.randn(8, requires_grad=True)
(eager,) = torch.autograd.grad(outer(x).sum(), x)
(compiled,) = torch.autograd.grad(torch.compile(outer, backend="inductor")(x).sum(), x)
print("max |eager - compiled| of dx:", (eager - compiled).abs().max().item())
torch.testing.assert_close(compiled, eager)
