"""Tensors in a reduced script: what a reader should see, for `reduce`.

- zero_size: whether a script creates a tensor with a 0 in its size, read statically (a literal 0
  among the size arguments of torch.randn, zeros, full, randint, ..., of `.new_zeros`, `.reshape`,
  `.view`, `.expand`, `torch.arange(0)`, or an empty list in `torch.tensor`'s data). The reducer shrinks
  numbers towards 0 and an empty tensor hides most bugs' shape, so `reduce` keeps such a candidate
  only where the starting script had one (then the empty tensor may be the bug);
- random_tensors: a pass (run like harness.tools.reduce.passes') that replaces a literal tensor
  `torch.tensor([[...]], dtype=..., requires_grad=...)` by `torch.randn(shape, ...)`, or `torch.rand`
  for values in [0, 1), `torch.randint` for integers, where the script stays interesting.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from harness.tools.reduce.passes import _each

SIZED = {"randn", "rand", "zeros", "ones", "empty", "new_zeros", "new_ones", "new_empty", "reshape", "view",
         "expand", "resize_", "empty_strided"}
FULL = {"full", "new_full"}  # the size first, then the value
DATA = {"tensor", "as_tensor", "asarray"}
INTEGER_DTYPES = {"int8", "int16", "int32", "int64", "uint8", "long", "int", "short"}


def _name(call: ast.Call) -> str | None:
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None


def _is_zero(node: ast.AST) -> bool:
    if isinstance(node, (ast.Tuple, ast.List)):
        return any(_is_zero(e) for e in node.elts)
    return isinstance(node, ast.Constant) and type(node.value) is int and node.value == 0


def _has_empty_list(node: ast.AST) -> bool:
    return any(isinstance(n, (ast.List, ast.Tuple)) and not n.elts for n in ast.walk(node))


def _sizes(call: ast.Call, name: str) -> list[ast.expr]:
    """The arguments of `call` that give a size."""
    keyword = [k.value for k in call.keywords if k.arg in ("size", "shape")]
    if name in SIZED:
        return list(call.args) + keyword
    if name in FULL:
        return call.args[:1] + keyword
    if name == "randint":  # randint(high, size) or randint(low, high, size): the size is the sequence
        return [a for a in call.args if isinstance(a, (ast.Tuple, ast.List))] + keyword
    if name == "arange" and len(call.args) == 1:
        return list(call.args)
    return []


def zero_size(source: str) -> bool:
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return False
    for call in (n for n in ast.walk(tree) if isinstance(n, ast.Call)):
        name = _name(call)
        if name in DATA and call.args and _has_empty_list(call.args[0]):
            return True
        if name and any(_is_zero(a) for a in _sizes(call, name)):
            return True
    return False


def _number(node: ast.AST) -> float | int | None:
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        value = _number(node.operand)
        return None if value is None else -value
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return node.value
    return None


def _shape_and_values(node: ast.AST) -> tuple[list[int], list[float | int]] | None:
    """(shape, flat values) of a rectangular nested list of numbers, or None."""
    value = _number(node)
    if value is not None:
        return [], [value]
    if not isinstance(node, (ast.List, ast.Tuple)) or not node.elts:
        return None
    parts = [part for part in map(_shape_and_values, node.elts) if part is not None]
    if len(parts) != len(node.elts) or len({tuple(shape) for shape, _ in parts}) != 1:
        return None
    return [len(parts), *parts[0][0]], [v for _, values in parts for v in values]


def _replacements(call: ast.Call) -> list[ast.Call]:
    found = _shape_and_values(call.args[0]) if len(call.args) == 1 else None
    if found is None or not found[0]:
        return []  # not a literal, or a 0-d tensor (already short)
    shape, values = found
    dtype = next((ast.unparse(k.value).rsplit(".", 1)[-1] for k in call.keywords if k.arg == "dtype"), None)
    torch = call.func.value if isinstance(call.func, ast.Attribute) else ast.Name("torch", ast.Load())
    dims: list[ast.expr] = [ast.Constant(n) for n in shape]
    keywords = list(call.keywords)

    def make(function, args):
        return ast.Call(func=ast.Attribute(value=torch, attr=function, ctx=ast.Load()), args=args, keywords=keywords)
    if all(type(v) is int for v in values) and (dtype is None or dtype in INTEGER_DTYPES):
        low, high = min(values), max(values) + 1
        return [make("randint", [ast.Constant(low), ast.Constant(high), ast.Tuple(elts=dims, ctx=ast.Load())])]
    if dtype in INTEGER_DTYPES or dtype == "bool":
        return []
    return [make("randn", dims)] + ([make("rand", dims)] if all(0 <= v < 1 for v in values) else [])


def random_tensors(source: str) -> Iterator[str]:
    def rewrite(tree, k):
        places = [(call, new) for call in ast.walk(tree) if isinstance(call, ast.Call) and _name(call) == "tensor"
                  for new in _replacements(call)]
        if k >= len(places):
            return False
        call, new = places[k]
        call.func, call.args, call.keywords = new.func, new.args, new.keywords
        return True
    return _each(source, rewrite)


PASSES = (random_tensors,)
