"""harness.tools.reduce_passes: each rewrite on a small source, with cheap predicates (no torch)."""

from harness.tools import reduce_passes


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
    source = "def test_it(case, device=0):\n    seen = [case, device]\n    total = sum(seen)\ncase = 5\ntest_it(case, device=2)\n"
    out = first(reduce_passes.inline_calls(source))
    assert out == "case = 5\ndevice = 2\nseen = [case, device]\ntotal = sum(seen)\n"
    assert runs(out)["total"] == runs(source.replace("    total", "    global total\n    total"))["total"] == 7


def test_a_function_that_returns_or_is_called_twice_is_not_inlined():
    assert list(reduce_passes.inline_calls("def f():\n    return 1\nf()\n")) == []
    assert list(reduce_passes.inline_calls("def f():\n    print(1)\nf()\nf()\n")) == []
    # a return inside a nested function is that function's own
    assert first(reduce_passes.inline_calls("def f():\n    def g():\n        return 1\n    print(g())\nf()\n"))


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
    out = reduce_passes.improve(source, still_fails_the_same_way)
    assert still_fails_the_same_way(out)
    assert "unused" not in out and "def test" not in out, out
    assert out == "case = 3\nx = case\nassert x == 2, 'the figure'\n"
