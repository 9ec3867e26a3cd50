# Reduced from empty_init/init_call_in_compiled_fn[cpu-eager-graphbreaks-enabled] by torch-compile-matrix: fails on cpu_torch215, passes on cpu_torch21.
import importlib
import torch

def need(dotted):
    module, unique_name_0, name = dotted.rpartition('.')
    return getattr(importlib.import_module(module), name)

class Case:

    def compile(self, fn):
        return torch.compile(fn)

def figures(fn, make_mode):
    a = torch.zeros(1)
    with make_mode():
        fn(a, 0)
    return {'sentinels_initialised': int(a.ne(0).any())}

def init_both(a, b):
    torch.nn.init.constant_(a, 1.0)
case = Case()
enabled = True
_EmptyInit = need('lightning.fabric.utilities.init._EmptyInit')
fn = init_both
compiled = case.compile(init_both)
make_mode = lambda: _EmptyInit()
eager = figures(fn, make_mode)
runs = [figures(compiled, make_mode) for unique_name_2 in range(1)]
for compiled_figures in runs:
    assert compiled_figures == eager, f'enabled={enabled}: compiled {compiled_figures}'
