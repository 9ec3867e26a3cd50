# A nested_compile_region returning a complex (conjugate view) output fails when called twice.
import torch

@torch.compiler.nested_compile_region
def region(x):
    return torch.fft.ihfft(x)

def fn(x):
    return region(x), region(x + 1)

x = torch.randn(8, requires_grad=True)
print("eager:", fn(x)[0])
# aot_eager, inductor: NotImplementedError: could not find kernel for HigherOrderOperator
# invoke_subgraph at dispatch key DispatchKey.Conjugate
print("compiled:", torch.compile(fn, backend="aot_eager")(x)[0])
