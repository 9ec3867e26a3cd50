# Reduced from empty_init/copy_copy_in_compiled_fn_under_mode[cpu-eager-graphbreaks-empty_init_enabled] by torch-compile-matrix: fails on cpu_torch215, passes on cpu_torch212.
import copy, importlib
import torch

def need(dotted):
    module, unique_name_0, name = dotted.rpartition('.')
    return getattr(importlib.import_module(module), name)

def run_with_grads(fn, inputs):
    fn(*inputs)

class Case:

    def compile(self, fn):
        return torch.compile(fn)

    def check(self, fn, *inputs, compiled):
        self.compiled_run(compiled, inputs, 0)

    def compiled_run(self, compiled, inputs, attempt):
        run_with_grads(compiled, inputs)

class UnderMode(torch.nn.Module):

    def __init__(self, inner, make_mode):
        super().__init__()
        self.inner = inner
        self.make_mode = make_mode

    def forward(self, x):
        with self.make_mode():
            self.inner(x)

def x_on():
    return torch.randn(0)

def copy_then_cos(x):
    copy.copy(x)
case = Case()
_EmptyInit = need('lightning.fabric.utilities.init._EmptyInit')

def make_mode():
    return _EmptyInit()
compiled = UnderMode(case.compile(copy_then_cos), make_mode)
case.check(0, x_on(), compiled=compiled)
