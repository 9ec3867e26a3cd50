# Reduced from nested_compile/nested_compile_region[cpu-inductor-graphbreaks] by torch-compile-matrix: fails on cpu_torch29, passes on cpu_torch215.
import importlib
import torch

def need(dotted):
    module, unique_name_0, name = dotted.rpartition('.')
    return getattr(importlib.import_module(module), name)

def run_with_grads(fn, inputs):
    inputs = [x.detach().clone().requires_grad_() for x in inputs]
    outputs = torch.utils._pytree.tree_flatten(fn(*inputs))[0]
    sum(outputs).backward()
    return (outputs, [t.grad for t in inputs])

class Case:

    def check(self, fn, *inputs, compiled):
        expected = run_with_grads(fn, inputs)
        self.compared = (expected, self.compiled_run(compiled, inputs, 0))
        for kind, wanted, got in zip((0, 'gradient'), *self.compared):
            for i, (e, a) in enumerate(zip(wanted, got)):
                torch.testing.assert_close(a, e, msg=lambda m, k=kind: f'{k} {i}: {m}')

    def compiled_run(self, compiled, inputs, attempt):
        return run_with_grads(compiled, inputs)

def x_on():
    return torch.randn(1)

def region_block(x):
    return torch.sin(x)

def region_outer_of(block):
    return lambda x: block(block(x)) + x
case = Case()
region = need('torch.compiler.nested_compile_region')
compiled = torch.compile(region_outer_of(region(region_block)))
case.check(region_outer_of(region_block), x_on(), compiled=compiled)
