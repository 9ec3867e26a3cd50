# A nested_compile_region has no kernel for a conjugate-view operand, even with backend="eager".
# invoke_subgraph registers none for DispatchKey.Conjugate, and higher-order ops get no fallback.
import torch

@torch.compiler.nested_compile_region
def region(z):
    return z * 2

def fn(z):
    return region(z.conj()) + region(z.conj())  # called twice: a region called once is inlined

z = torch.randn(4, dtype=torch.complex64)
print("eager:", fn(z))
# NotImplementedError: could not find kernel for HigherOrderOperator invoke_subgraph
# at dispatch key DispatchKey.Conjugate
print("compiled:", torch.compile(fn, backend="eager")(z))
