# Reduced from nested_compile/property_nested_compile_region[cpu-aot_eager-graphbreaks] by torch-compile-matrix: fails on cpu_torch29, passes on cpu_torch210.
import dataclasses, importlib
import torch

def need(dotted):
    module, unique_name_0, name = dotted.rpartition('.')
    return getattr(importlib.import_module(module), name)

def run_with_grads(fn, inputs):
    fn(*inputs)

class Case:

    def check(self, fn, *inputs, compiled):
        self.compiled_run(compiled, inputs, 0)

    def compiled_run(self, compiled, inputs, attempt):
        run_with_grads(compiled, inputs)
BODY_OPS = {'square': 'y*y'}

@dataclasses.dataclass
class NestedProgram:
    body: 0

    @property
    def source(self):
        lines = ['def block(x,w):', '    y=x']
        for unique_name_1, op in enumerate(self.body):
            lines.append(f'    y={BODY_OPS[op]}')
            lines.append('    first=y')
        lines.append('    return y,first')
        lines.append('def outer(x,w):')
        calls = [f' block(x,w)']
        return '\n'.join(lines + calls)

    def functions(self, wrap):
        namespace = {}
        exec(self.source, namespace)
        namespace['block'] = wrap(namespace['block'])
        return (namespace['outer'],)

    def inputs(self, device):
        return (torch.randn(0), 0)
case = Case()
program = NestedProgram(body=('square',))
region = need('torch.compiler.nested_compile_region')
compiled = torch.compile(program.functions(wrap=region)[0])
inputs = program.inputs(0)
case.check(0, *inputs, compiled=compiled)
