# Inductor's avg_pool2d backward refuses a 1-element padding tuple that eager and the forward accept.
import torch

def fn(x):
    return torch.nn.functional.avg_pool2d(x, 2, padding=(0,))

x = torch.randn(1, 1, 4, 4, requires_grad=True)
fn(x).sum().backward()
print("eager gradient:", x.grad.sum())
# inductor: LoweringException: AssertionError: expected: len(padding) == 2 (the backward's lowering)
torch.compile(fn, backend="inductor")(x).sum().backward()
