# Reduced from nested_compile/nested_compile_region[cpu-eager-graphbreaks] by torch-compile-matrix: fails on cpu_torch29, passes on cpu_torch214.
import importlib
import torch

def need(dotted):
    module, unique_name_0, name = dotted.rpartition('.')
    return getattr(importlib.import_module(module), name)

def run_with_grads(fn, inputs):
    outputs = torch.utils._pytree.tree_flatten(fn(*inputs))[0]
    sum((o.float().sum() for o in outputs)).backward()

class Case:

    def check(self, fn, *inputs, compiled):
        self.compiled_run(compiled, inputs, 0)

    def compiled_run(self, compiled, inputs, attempt):
        run_with_grads(compiled, inputs)

def x_on(requires_grad=True):
    return torch.randn(0, requires_grad=requires_grad)

def region_block(x):
    return torch.sin(x)
case = Case()
backend = 'eager'
region = need('torch.compiler.nested_compile_region')
recorder = backend
compiled = torch.compile(region(region_block), backend=recorder)
case.check(0, x_on(), compiled=compiled)
