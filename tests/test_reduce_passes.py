"""harness.tools.reduce.passes: each rewrite on a small source, with cheap predicates (no torch)."""

from harness.tools.reduce import inline as reduce_inline
from harness.tools.reduce import materialise as reduce_materialise
from harness.tools.reduce import names as reduce_names
from harness.tools.reduce import passes as reduce_passes
from harness.tools.reduce import tensors as reduce_tensors


def first(candidates):
    return next(iter(candidates), None)


def runs(source: str) -> dict:
    """The module globals after running `source`: a rewrite must not change what it computes."""
    scope: dict = {}
    exec(compile(source, "<candidate>", "exec"), scope)
    return {k: v for k, v in scope.items() if not k.startswith("__") and not callable(v)}


def test_a_tuple_assignment_is_split():
    out = first(reduce_passes.split_tuple_assignments("a, b = (1, 2)\nprint(a)\n"))
    assert out == "a = 1\nb = 2\nprint(a)\n"
    out = first(reduce_passes.split_tuple_assignments("self.a, b = (1, 2)\n"))
    assert out == "self.a = 1\nb = 2\n"
    out = first(reduce_passes.split_tuple_assignments("(a, b), c = (f(), 2)\n"))
    assert out == "a, b = f()\nc = 2\n"


def test_an_assignment_nothing_reads_goes_but_not_one_with_a_call():
    assert list(reduce_passes.drop_unused_assignments("a = 1\nb = f()\nprint(2)\n")) == ["b = f()\nprint(2)\n"]


def test_an_unused_parameter_goes_with_its_arguments():
    source = "def f(x, w, k=3):\n    return x + k\nf(1, 2)\nf(1, w=2, k=4)\n"
    out = first(reduce_passes.drop_unused_parameters(source))
    assert out == "def f(x, k=3):\n    return x + k\nf(1)\nf(1, k=4)\n"
    assert runs(out) == runs(source)


def test_a_function_passed_around_or_a_method_keeps_its_parameters():
    source = ("def f(x, w):\n    return x\ng = f\n"
              "class M:\n    def __torch_dispatch__(self, func, types, args, kwargs):\n        return func(*args)\n")
    assert list(reduce_passes.drop_unused_parameters(source)) == []


def test_a_function_called_once_at_module_level_is_inlined():
    source = ("def test_it(case, device=0):\n    seen = [case, device]\n    total = sum(seen)\n"
              "case = 5\ntest_it(case, device=2)\n")
    out = first(reduce_inline.inline_functions(source))
    assert out == "case = 5\nseen = [case, 2]\ntotal = sum(seen)\n"
    assert runs(out)["total"] == runs(source.replace("    total", "    global total\n    total"))["total"] == 7


def test_a_function_called_twice_is_not_inlined():
    assert list(reduce_inline.inline_functions("def f():\n    print(1)\nf()\nf()\n")) == []
    # a return inside a nested function is that function's own
    assert first(reduce_inline.inline_functions("def f():\n    def g():\n        return 1\n    print(g())\nf()\n"))


def test_an_odd_float_becomes_a_plain_number():
    assert list(reduce_passes.plain_numbers("f(7.006492321624087e-46, 1.0)\n")) == ["f(1.0, 1.0)\n", "f(2.0, 1.0)\n"]


def test_improve_keeps_only_interesting_rewrites():
    source = "def check(x, unused):\n    assert x == 2, 'the figure'\ndef test(case):\n    check(case, 0)\ntest(2)\n"

    def still_fails_the_same_way(candidate):
        try:
            exec(compile(candidate, "<candidate>", "exec"), {})
        except AssertionError as exc:
            return str(exc) == "the figure"
        return False

    assert not still_fails_the_same_way(source)  # it passes: 2 == 2
    source = source.replace("test(2)", "test(3)")
    out = reduce_passes.improve(source, still_fails_the_same_way, reduce_inline.PASSES + reduce_passes.PASSES)
    assert still_fails_the_same_way(out)
    assert "unused" not in out and "def test" not in out, out
    assert out == "assert 3 == 2, 'the figure'\n"


# --- the rewrites that remove the harness's shapes (harness.tools.reduce.inline, reduce_materialise) -----------

class Torch:
    """A stand-in for torch where a rewrite's meaning is all a test checks: compile returns what it was given."""

    @staticmethod
    def compile(fn=None, **options):
        return ("compiled", fn.__name__, tuple(sorted(options.items())))


def computes(source: str) -> dict:
    """The module globals after running `source` with the stand-in torch, less functions and classes."""
    scope: dict = {"torch": Torch}
    exec(compile(source, "<candidate>", "exec"), scope)
    return {k: v for k, v in scope.items() if not k.startswith("__") and not callable(v) and k != "torch"}


CASE_CHAIN = """\
class Case:
    def __init__(self, backend='inductor', fullgraph=False):
        self.backend, self.fullgraph, self.metrics = backend, fullgraph, {}
    def compile(self, fn):
        return torch.compile(fn, **{'backend': self.backend, 'fullgraph': self.fullgraph})
    def check(self, fn, *inputs, compiled):
        self.compiled_run(compiled, inputs, 0)
    def compiled_run(self, compiled, inputs, attempt):
        seen.append((compiled, inputs))
def body(x):
    return x
seen = []
case = Case('eager')
compiled = case.compile(body)
case.check(body, 1, 2, compiled=compiled)
"""


def test_a_case_chain_is_inlined_until_the_class_goes():
    source = CASE_CHAIN
    for _ in range(3):  # compile, check, then the compiled_run check called
        source = first(reduce_inline.inline_methods(source))
        assert computes(source)["seen"] == computes(CASE_CHAIN)["seen"]
    assert "Case" not in source and "case" not in source and "self" not in source, source
    assert "compiled = torch.compile(body, **{'backend': 'eager', 'fullgraph': False})" in source
    assert "seen.append((compiled, (1, 2)))" in source  # *inputs: the tuple the call gave
    assert list(reduce_inline.inline_methods(source)) == []
    folded = first(reduce_passes.fold_literals(source))
    assert "torch.compile(body, backend='eager', fullgraph=False)" in folded
    assert computes(folded)["seen"] == computes(CASE_CHAIN)["seen"]


def test_a_method_keeps_what_it_cannot_resolve():
    # `self.metrics` is a dict __init__ builds: not a constant, so it stays an attribute of the instance
    source = CASE_CHAIN.replace("seen.append((compiled, inputs))", "self.metrics['n'] = len(inputs)")
    source = source.replace("seen = []\n", "")
    for _ in range(3):
        source = first(reduce_inline.inline_methods(source))
    assert "case.metrics['n'] = len((1, 2))" in source and "class Case" in source


def test_a_property_of_a_dataclass_is_inlined_with_its_fields():
    source = ("import dataclasses\n@dataclasses.dataclass\nclass Program:\n    body: tuple\n    scale: int = 3\n"
              "    @property\n    def text(self):\n        lines = [op * self.scale for op in self.body]\n"
              "        return '+'.join(lines)\nprogram = Program(('x', 'y'))\nresult = program.text\n")
    out = first(reduce_inline.inline_methods(source))
    assert "lines = [op * 3 for op in ('x', 'y')]\nresult = '+'.join(lines)\n" in out
    assert "class Program" not in out and computes(out)["result"] == computes(source)["result"] == "xxx+yyy"


def test_methods_that_would_change_meaning_are_not_inlined():
    uses_super = "class C(dict):\n    def get2(self):\n        return super().get(2)\nc = C()\nr = c.get2()\n"
    assert list(reduce_inline.inline_methods(uses_super)) == []
    returns_early = ("class C:\n    def m(self, x):\n        if x:\n            return 1\n        return 2\n"
                     "c = C()\nr = c.m(0)\n")
    assert list(reduce_inline.inline_methods(returns_early)) == []
    # a nested class's own `self` is its own
    nested = ("class C:\n    def make(self):\n        class Inner:\n"
              "            def who(self):\n                return self\n"
              "        return Inner\nc = C()\nr = c.make()\n")
    out = first(reduce_inline.inline_methods(nested))
    assert "return self" in out and "class C" not in out


def test_a_function_is_inlined_where_its_value_is_used():
    source = "def x_on(n, grad=True):\n    size = n * 2\n    return [size, grad]\ninputs = tuple(x_on(4))\n"
    out = first(reduce_inline.inline_functions(source))
    assert out == "size = 4 * 2\ninputs = tuple([size, True])\n"
    assert computes(out)["inputs"] == computes(source)["inputs"]
    twice = "def f():\n    return 1\na = f()\nb = f()\n"
    assert list(reduce_inline.inline_functions(twice)) == []
    recursive = "def f(n):\n    return f(n - 1) if n else 0\n"
    assert list(reduce_inline.inline_functions(recursive)) == []


def test_an_argument_read_twice_is_bound_once():
    source = "calls = []\ndef make():\n    calls.append(1)\n    return 2\ndef f(x):\n    return x + x\nr = f(make())\n"
    out = first(reduce_inline.inline_functions(source))
    assert "x = make()\nr = x + x\n" in out
    assert (computes(out) == computes(source) == {"calls": [1], "r": 4, "x": 2} | {"r": 4}
            or computes(out)["calls"] == [1])


def test_need_becomes_an_import():
    need = ("import importlib\nimport torch\ndef need(dotted):\n    module, _, name = dotted.rpartition('.')\n"
            "    return getattr(importlib.import_module(module), name)\n")
    source = need + "region = need('torch.compiler.nested_compile_region')\nX = need('lightning.fabric.X')\nregion(X)\n"
    out = first(reduce_materialise.materialise_need(source))
    assert "region = torch.compiler.nested_compile_region\n" in out and "def need" in out  # one at a time
    out = first(reduce_materialise.materialise_need(out))
    assert "from lightning.fabric import X\n" in out.split("region =")[0]  # with the imports at the top
    assert "def need" not in out and "need(" not in out
    renamed = need + "Init = need('lightning.fabric.utilities.init._EmptyInit')\nInit()\n"
    assert "from lightning.fabric.utilities.init import _EmptyInit as Init\n" in first(
        reduce_materialise.materialise_need(renamed))


def test_exec_of_generated_text_becomes_the_code_it_ran():
    source = ("lines = ['def block(x):', '    return x * 2']\nnamespace = {}\n"
              "exec('\\n'.join(lines), namespace)\nnamespace['block'] = wrap(namespace['block'])\n"
              "r = namespace['block'](3)\n")
    observed = {3: {"def block(x):\n    return x * 2"}}
    out = first(reduce_materialise.materialise_exec(lambda _: observed)(source))
    assert "def block(x):\n    return x * 2\nblock = wrap(block)\nr = block(3)\n" in out
    scope = {"wrap": lambda f: f}
    exec(out, scope)
    assert scope["r"] == 6
    # two different texts ran at that line: nothing to materialise
    assert list(reduce_materialise.materialise_exec(lambda _: {3: {"a = 1", "a = 2"}})(source)) == []


def test_aliases_and_single_uses_are_put_in_place():
    source = "def ckpt(x):\n    return x\neager = ckpt\nfn = eager\nr = fn(2)\n"
    out = first(reduce_names.inline_aliases(first(reduce_names.inline_aliases(source))))
    assert out == "def ckpt(x):\n    return x\nr = ckpt(2)\n"
    shadowed = "x = 1\ndef f(x):\n    return x\nr = f(2) + x\n"  # a parameter of that name is the function's own
    assert list(reduce_names.inline_aliases(shadowed)) == ["def f(x):\n    return x\nr = f(2) + 1\n"]
    declared = "x = 1\ndef f():\n    global x\n    x = 2\nf()\nprint(x)\n"  # bound twice: left alone
    assert list(reduce_names.inline_aliases(declared)) == []
    single = "compiled = make(f)\ny = 2\nout = compiled(y)\n"
    assert first(reduce_names.inline_single_use(single)) == "y = 2\nout = make(f)(y)\n"
    attribute = "Case.compared = (a, b)\nfor x in zip(k, *Case.compared):\n    g(x)\n"
    assert first(reduce_names.inline_single_use(attribute)) == "for x in zip(k, *(a, b)):\n    g(x)\n"
    header = "runs = [make(f)]\nfor r in runs:\n    g(r)\n"  # a loop's header is read once
    assert first(reduce_names.inline_single_use(header)) == "for r in [make(f)]:\n    g(r)\n"
    looped = "compiled = make(f)\nfor y in range(3):\n    compiled(y)\n"  # read in a loop: left alone
    assert list(reduce_names.inline_single_use(looped)) == []
    long = f"compiled = make({'a' * 90})\nout = compiled(y)\n"  # past LINE_LENGTH: left alone
    assert list(reduce_names.inline_single_use(long)) == []


def test_literals_are_said_plainly():
    assert first(reduce_passes.fold_literals("f(x, **{'backend': 'eager'})\n")) == "f(x, backend='eager')\n"
    assert first(reduce_passes.fold_literals("g = (a, b)[1]\n")) == "g = b\n"
    assert first(reduce_passes.fold_literals("f(x, *(a, b))\n")) == "f(x, a, b)\n"
    assert first(reduce_passes.fold_literals("for i in range(1):\n    f(i)\n")) == "i = 0\nf(i)\n"
    assert first(reduce_passes.fold_literals("r = [f(x) for _ in range(1)]\n")) == "r = [f(x)]\n"
    assert first(reduce_passes.fold_literals("with (lambda: Mode())():\n    f()\n")) == "with Mode():\n    f()\n"
    assert first(reduce_passes.fold_literals("for r in [f(1)]:\n    g(r)\n")) == "r = f(1)\ng(r)\n"
    assert list(reduce_passes.fold_literals("h = (lambda x: x)(1)\nfor r in [1, 2]:\n    g(r)\n")) == []
    # the `**{...}` whose keys are names is the one folded, whichever comes first
    assert first(reduce_passes.fold_literals("f(**{a: 1}, **{'k': 2})\n")) == "f(**{a: 1}, k=2)\n"
    assert list(reduce_passes.fold_literals("for i in range(1):\n    break\nr = [i for i in range(1)]\n")) == []


def test_a_literal_tensor_becomes_a_random_one_of_its_shape():
    source = "x = torch.tensor([[1.5, -2.0, 3.25], [0.5, 0.0, 1.0]], dtype=torch.float64, requires_grad=True)\n"
    assert list(reduce_tensors.random_tensors(source)) == [
        "x = torch.randn(2, 3, dtype=torch.float64, requires_grad=True)\n"]
    unit = list(reduce_tensors.random_tensors("x = torch.tensor([0.25, 0.5])\n"))
    assert unit == ["x = torch.randn(2)\n", "x = torch.rand(2)\n"]
    assert list(reduce_tensors.random_tensors("i = torch.tensor([[3, 7], [5, -1]])\n")) == [
        "i = torch.randint(-1, 8, (2, 2))\n"]
    for kept in ("torch.tensor(8.5, dtype=torch.float64)", "torch.tensor([[1.0], [2.0, 3.0]])",
                 "torch.tensor([True, False])", "torch.tensor(values)"):
        assert list(reduce_tensors.random_tensors(f"x = {kept}\n")) == [], kept


def test_improve_ends_where_two_rewrites_undo_each_other():
    def there(source):
        yield source.replace("a", "b")

    def back(source):
        yield source.replace("b", "a")
    tried = []
    assert reduce_passes.improve("x = a\n", lambda c: tried.append(c) or True, (there, back)) == "x = b\n"
    assert tried == ["x = b\n"]


def test_a_wrapped_function_is_decorated():
    source = "def block(x):\n    return x\ndef outer(x):\n    return block(x)\nblock = region(block)\nr = outer(2)\n"
    out = first(reduce_materialise.decorate(source))
    assert out == "@region\ndef block(x):\n    return x\n\ndef outer(x):\n    return block(x)\nr = outer(2)\n"
    wrapped = []
    scope = {"region": lambda f: wrapped.append(f.__name__) or f}
    exec(out, scope)
    assert wrapped == ["block"] and scope["r"] == 2
    assert list(reduce_materialise.decorate("block = region(block)\ndef block(x):\n    return x\n")) == []


def test_names_in_a_function_are_put_where_they_are_read():
    source = "def body(x, w):\n    h = x @ w\n    s = h\n    return s\n"
    aliased = first(reduce_names.inline_aliases(source))
    assert aliased == "def body(x, w):\n    h = x @ w\n    return h\n"
    assert first(reduce_names.inline_single_use(aliased)) == "def body(x, w):\n    return x @ w\n"
    # a value read in a `with` block is read once: it may move there; a parameter rebound is not an alias
    moved = "def step(f):\n    out = f(1)\n    with log():\n        out.backward()\n"
    assert first(reduce_names.inline_single_use(moved)) == "def step(f):\n    with log():\n        f(1).backward()\n"
    made_per_call = "x = make(8)\ndef step(f):\n    return f(x)\nr = step(g)\n"
    assert first(reduce_names.inline_single_use(made_per_call)) == "def step(f):\n    return f(make(8))\nr = step(g)\n"
    rebound = "def f(x):\n    y = x\n    x = 2\n    return y\n"
    assert list(reduce_names.inline_aliases(rebound)) == []


def test_a_function_named_once_as_a_value_becomes_a_lambda():
    source = "def body(x, w):\n    return x * w\ndef ckpt(x, w):\n    return apply(body, x, w)\nr = ckpt(2, 3)\n"
    out = first(reduce_names.functions_as_lambdas(source))
    assert out == "def ckpt(x, w):\n    return apply(lambda x, w: x * w, x, w)\nr = ckpt(2, 3)\n"
    apply = {"apply": lambda f, *args: f(*args)}
    scope_before, scope_after = dict(apply), dict(apply)
    exec(source, scope_before)
    exec(out, scope_after)
    assert scope_before["r"] == scope_after["r"] == 6
    called = "def body(x):\n    return x\nr = body(2)\n"  # a call: inline_functions' work, not a lambda's
    assert list(reduce_names.functions_as_lambdas(called)) == []


def test_an_attribute_init_sets_to_a_constant_becomes_the_constant():
    source = ("class Log:\n    def __init__(self, names='mm', scale=2):\n        self.names = names\n"
              "        self.scale = scale\n        self.ops = []\n    def note(self, op):\n"
              "        if op in self.names:\n            self.ops.append(op * self.scale)\n"
              "log = Log(scale=3)\nlog.note('mm')\nlog.note('add')\nops = log.ops\n")
    out = first(reduce_names.constant_attributes(source))
    assert "def __init__(self, scale=2):" in out and "if op in 'mm':" in out and "self.names" not in out
    assert runs(out)["ops"] == runs(source)["ops"] == ["mmmmmm"]
    # `scale` is passed: not a constant; `ops` is a list: not a constant
    assert len(list(reduce_names.constant_attributes(source))) == 1


def test_a_result_no_caller_reads_is_not_returned():
    source = "def step(f):\n    return (f(0), f(1))\nfwd, bwd = step(abs)\nefwd, ebwd = step(str)\nr = (bwd, ebwd)\n"
    out = first(reduce_names.drop_unused_results(source))
    assert out == "def step(f):\n    return f(1)\nbwd = step(abs)\nebwd = step(str)\nr = (bwd, ebwd)\n"
    assert runs(out)["r"] == runs(source)["r"]
    read = source.replace("r = (bwd, ebwd)", "r = (fwd, bwd, ebwd)")  # fwd read: efwd alone is not enough
    assert list(reduce_names.drop_unused_results(read)) == []


def test_a_module_call_is_its_forward_and_an_argument_read_once_moves_there():
    source = ("import copy\nclass Module:\n    pass\n"
              "class UnderMode(Module):\n    def __init__(self, inner, make_mode):\n"
              "        super().__init__()\n        self.inner = inner\n        self.make_mode = make_mode\n"
              "    def forward(self, x):\n        with self.make_mode():\n            seen.append(self.inner(x))\n"
              "def make_mode():\n    return Mode()\nseen = []\n"
              "model = UnderMode(wrap(copy.copy), make_mode)\nmodel([1])\n")
    out = first(reduce_inline.call_forward(source))
    assert out.endswith("model.forward([1])\n")
    out = first(reduce_inline.inline_methods(out))
    assert "with make_mode():\n    seen.append(wrap(copy.copy)([1]))\n" in out
    assert "UnderMode" not in out and "model" not in out
    out = first(reduce_inline.inline_functions(out))
    assert out.endswith("with Mode():\n    seen.append(wrap(copy.copy)([1]))\n"), out
    import contextlib
    scope = {"Mode": contextlib.nullcontext, "wrap": lambda f: f}
    exec(out, scope)
    assert scope["seen"] == [[1]]


def test_an_import_left_below_the_code_joins_those_at_the_top():
    source = "import torch\nx = 1\nfrom lightning.fabric import X\nX(x)\n"
    assert (first(reduce_materialise.hoist_imports(source))
            == "import torch\nfrom lightning.fabric import X\nx = 1\nX(x)\n")


def test_the_flattened_outputs_of_one_tensor_are_that_tensor():
    source = "sum(torch.utils._pytree.tree_flatten(f(x))[0]).backward()\n"
    out = first(reduce_passes.plain_calls(source))
    assert out == "sum([f(x)]).backward()\n"
    assert first(reduce_passes.plain_calls(out)) == "f(x).backward()\n"
