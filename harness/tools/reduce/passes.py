"""Rewrites that shorten a reduced script where pysource-minimize cannot (it only deletes and
replaces nodes): each rewrite gives one candidate, which `reduce` keeps only if the interestingness
test still holds, so a rewrite that changes what the script shows is never kept.

- split_tuple_assignments: `a, b = (X, Y)` (the reducer's leftovers of two assignments; `self.a`
  and nested tuples too) becomes `a = X` and `b = Y`, so that an unused half can go;
- drop_unused_assignments: `name = value` whose name nothing reads, `value` a constant or a call-free
  expression;
- drop_unused_parameters: a parameter its function never reads, with the argument every call gives it
  (functions only called directly by name; not methods);
- fold_literals: `f(**{'k': v})`, `f(*(a, b))`, `(a, b)[0]`, `(lambda: e)()`, a loop or list comprehension
  over `range(1)` said plainly;
- plain_calls: `torch.utils._pytree.tree_flatten(e)[0]` as `[e]`, `sum([e])` as `e`;
- plain_numbers: an odd float the reducer left becomes 1.0 or 2.0.

Each pass yields the candidates it can make, one rewrite each; `improve` tries them in order and
keeps the first interesting one, until no candidate of any pass is. The rewrites that inline calls
(harness.tools.reduce.inline), materialise lookups and generated code (harness.tools.reduce.materialise)
and make literal tensors random ones (harness.tools.reduce.tensors) are passes of the same form.
"""

from __future__ import annotations

import ast
import copy
from collections.abc import Callable, Iterator
from typing import TypeGuard


def _loaded_names(tree: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Store)} | \
        {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}


def _bodies(tree: ast.AST) -> Iterator[list]:
    for node in ast.walk(tree):
        for field in ("body", "orelse", "finalbody"):
            body = getattr(node, field, None)
            if isinstance(body, list) and body and all(isinstance(s, ast.stmt) for s in body):
                yield body


def _source(tree: ast.AST) -> str:
    return ast.unparse(ast.fix_missing_locations(tree)) + "\n"


SKIP = "skip"  # what a rewrite returns for a k-th place it cannot rewrite after all


def _each(source: str, rewrite: Callable[[ast.Module, int], bool | str]) -> Iterator[str]:
    """The sources `rewrite(tree, k)` makes from fresh copies of `source`'s tree, k = 0, 1, ...,
    until it finds no k-th place to rewrite (False); SKIP: that place gives no candidate."""
    original = ast.parse(source)
    k = 0
    while True:
        tree = copy.deepcopy(original)
        done = rewrite(tree, k)
        if not done:
            return
        if done is not SKIP:
            yield _source(tree)
        k += 1


def split_tuple_assignments(source: str) -> Iterator[str]:
    def rewrite(tree, k):
        places = [(body, i) for body in _bodies(tree) for i, s in enumerate(body)
                  if isinstance(s, ast.Assign) and len(s.targets) == 1 and isinstance(s.targets[0], ast.Tuple)
                  and isinstance(s.value, ast.Tuple) and len(s.targets[0].elts) == len(s.value.elts)
                  and all(isinstance(t, (ast.Name, ast.Attribute, ast.Tuple)) for t in s.targets[0].elts)]
        if k >= len(places):
            return False
        body, i = places[k]
        node = body[i]
        body[i:i + 1] = [ast.Assign(targets=[t], value=v)
                         for t, v in zip(node.targets[0].elts, node.value.elts, strict=True)]  # places: same lengths
        return True
    return _each(source, rewrite)


def _call_free(node: ast.AST) -> bool:
    return not any(isinstance(n, (ast.Call, ast.Await, ast.Yield, ast.YieldFrom, ast.NamedExpr))
                   for n in ast.walk(node))


def drop_unused_assignments(source: str) -> Iterator[str]:
    def rewrite(tree, k):
        loaded = _loaded_names(tree)
        places = [(body, i) for body in _bodies(tree) for i, s in enumerate(body)
                  if isinstance(s, ast.Assign) and len(s.targets) == 1 and isinstance(s.targets[0], ast.Name)
                  and s.targets[0].id not in loaded and _call_free(s.value)]
        if k >= len(places):
            return False
        body, i = places[k]
        del body[i]
        if not body:
            body.append(ast.Pass())
        return True
    return _each(source, rewrite)


def _functions(tree: ast.Module) -> list[ast.FunctionDef]:
    return [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)]


def _calls_of(tree: ast.Module, name: str) -> list[ast.Call]:
    return [n for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == name]


def drop_unused_parameters(source: str) -> Iterator[str]:
    def places(tree):
        found = []
        methods = {id(n) for c in ast.walk(tree) if isinstance(c, ast.ClassDef) for n in c.body}
        for function in _functions(tree):
            if id(function) in methods:
                continue  # called through attributes, or by the framework (`__torch_dispatch__`)
            referenced_otherwise = sum(1 for n in ast.walk(tree) if isinstance(n, ast.Name) and n.id == function.name
                                       and not isinstance(n.ctx, ast.Store))
            calls = _calls_of(tree, function.name)
            if not calls or referenced_otherwise != len(calls) or function.args.vararg or function.args.kwarg:
                continue  # never called here, or passed around: its callers are not all in sight
            used = {n.id for n in ast.walk(function) if isinstance(n, ast.Name)} - {function.name}
            positional = function.args.posonlyargs + function.args.args
            for index, parameter in enumerate(positional):
                if parameter.arg not in used and not (index == 0 and parameter.arg in ("self", "cls")):
                    found.append((function, "positional", index, parameter.arg))
            for index, parameter in enumerate(function.args.kwonlyargs):
                if parameter.arg not in used:
                    found.append((function, "keyword", index, parameter.arg))
        return found

    def rewrite(tree, k):
        found = places(tree)
        if k >= len(found):
            return False
        function, kind, index, name = found[k]
        arguments = function.args
        if kind == "positional":
            positional = arguments.posonlyargs + arguments.args
            first_default = len(positional) - len(arguments.defaults)
            if index >= first_default:
                del arguments.defaults[index - first_default]
            if index < len(arguments.posonlyargs):
                del arguments.posonlyargs[index]
            else:
                del arguments.args[index - len(arguments.posonlyargs)]
        else:
            del arguments.kwonlyargs[index], arguments.kw_defaults[index]
        for call in _calls_of(tree, function.name):
            if kind == "positional" and index < len(call.args):
                del call.args[index]
            call.keywords = [kw for kw in call.keywords if kw.arg != name]
        return True
    return _each(source, rewrite)


def fold_literals(source: str) -> Iterator[str]:
    """What the reducer's and the inliners' leftovers say at length: `f(**{'k': v})` becomes `f(k=v)`,
    `f(*(a, b))` becomes `f(a, b)`, `(a, b)[0]` becomes `a`, `(lambda: e)()` becomes `e`, a loop over
    `range(1)` or over `[e]` becomes `i = 0` (`i = e`) and its body, `[e for i in range(1)]` becomes `[e]`
    (i unused)."""
    def rewrite(tree, k):
        places: list[ast.AST | tuple[list[ast.stmt], int, ast.For]] = [n for n in ast.walk(tree) if _foldable(n)]
        places += [(body, i, s) for body in _bodies(tree) for i, s in enumerate(body) if _one_round(s)]
        if k >= len(places):
            return False
        place = places[k]
        if isinstance(place, tuple):
            body, i, loop = place
            # _one_round: the loop is over range(1) (a call) or over a one-element list or tuple
            value = loop.iter.elts[0] if isinstance(loop.iter, (ast.List, ast.Tuple)) else ast.Constant(0)
            body[i:i + 1] = [ast.Assign(targets=[loop.target], value=value)] + loop.body
        elif isinstance(place, ast.Call) and isinstance(place.func, ast.Lambda):
            _become(place, place.func.body)
        elif isinstance(place, ast.Call) and _starred_literal(place):
            place.args = [e for a in place.args for e in _spread(a)]
        elif isinstance(place, ast.Call):
            position, keywords = next((i, said) for i, said in enumerate(map(_splat_keywords, place.keywords))
                                      if said is not None)
            place.keywords[position:position + 1] = keywords
        elif (isinstance(place, ast.Subscript) and isinstance(place.value, ast.Tuple)
              and isinstance(place.slice, ast.Constant) and isinstance(place.slice.value, int)):
            _become(place, place.value.elts[place.slice.value])
        elif isinstance(place, ast.ListComp):
            place.generators = []
            _become(place, ast.List(elts=[place.elt], ctx=ast.Load()))
        else:
            return SKIP  # _foldable admits no other node
        return True
    return _each(source, rewrite)


def plain_calls(source: str) -> Iterator[str]:
    """What the harness's run_with_grads leaves: `torch.utils._pytree.tree_flatten(e)[0]` becomes `[e]`
    (the outputs of a function that returns one tensor), `sum([e])` becomes `e`."""
    def rewrite(tree, k):
        # (the node, what it becomes)
        places: list[tuple[ast.expr, ast.expr]] = [
            (n, ast.List(elts=[n.value.args[0]], ctx=ast.Load())) for n in ast.walk(tree)
            if isinstance(n, ast.Subscript) and isinstance(n.value, ast.Call)
            and ast.unparse(n.value.func).endswith("tree_flatten") and len(n.value.args) == 1
            and ast.unparse(n.slice) == "0"]
        places += [(n, n.args[0].elts[0]) for n in ast.walk(tree)
                   if isinstance(n, ast.Call) and ast.unparse(n.func) == "sum"
                   and len(n.args) == 1 and not n.keywords and isinstance(n.args[0], ast.List)
                   and len(n.args[0].elts) == 1]
        if k >= len(places):
            return False
        node, replacement = places[k]
        _become(node, replacement)
        return True
    return _each(source, rewrite)


def _become(node: ast.AST, other: ast.AST) -> None:
    """Make `node` the node `other` (in place: its parent keeps pointing at it)."""
    node.__class__ = other.__class__
    node.__dict__.update({field: getattr(other, field) for field in other._fields})


def _range_one(node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and ast.unparse(node) in ("range(1)", "range(0, 1)")


def _starred_literal_argument(node: ast.AST) -> bool:
    return isinstance(node, ast.Starred) and isinstance(node.value, (ast.Tuple, ast.List))


def _starred_literal(call: ast.Call) -> bool:
    return any(_starred_literal_argument(a) for a in call.args)


def _spread(argument: ast.expr) -> list[ast.expr]:
    """The arguments a call argument says: `*(a, b)` says a and b; any other argument, itself."""
    if isinstance(argument, ast.Starred) and isinstance(argument.value, (ast.Tuple, ast.List)):
        return argument.value.elts
    return [argument]


def _splat_keywords(keyword: ast.keyword) -> list[ast.keyword] | None:
    """`**{'k': v}` as the keywords `k=v` it says; None where it is no dict literal with identifier keys."""
    if not (keyword.arg is None and isinstance(keyword.value, ast.Dict)):
        return None
    keywords = []
    for key, value in zip(keyword.value.keys, keyword.value.values, strict=True):
        if not (isinstance(key, ast.Constant) and isinstance(key.value, str) and key.value.isidentifier()):
            return None
        keywords.append(ast.keyword(arg=key.value, value=value))
    return keywords


def _foldable(node: ast.AST) -> bool:
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Lambda):
        arguments = node.func.args
        return not (node.args or node.keywords or arguments.args or arguments.posonlyargs or arguments.kwonlyargs
                    or arguments.vararg or arguments.kwarg)
    if isinstance(node, ast.Call):
        return _starred_literal(node) or any(_splat_keywords(kw) is not None for kw in node.keywords)
    if isinstance(node, ast.Subscript):
        return (isinstance(node.value, ast.Tuple) and isinstance(node.ctx, ast.Load)
                and isinstance(node.slice, ast.Constant) and type(node.slice.value) is int
                and -len(node.value.elts) <= node.slice.value < len(node.value.elts))
    if isinstance(node, ast.ListComp) and len(node.generators) == 1:
        generator = node.generators[0]
        return (_range_one(generator.iter) and not generator.ifs and isinstance(generator.target, ast.Name)
                and generator.target.id not in _loaded_names(node.elt))
    return False


def _one_round(statement: ast.stmt) -> TypeGuard[ast.For]:
    if not isinstance(statement, ast.For):
        return False
    once = _range_one(statement.iter) or (isinstance(statement.iter, (ast.List, ast.Tuple))
                                          and len(statement.iter.elts) == 1
                                          and not isinstance(statement.iter.elts[0], ast.Starred))
    return (once and not statement.orelse
            and not any(isinstance(n, (ast.Break, ast.Continue)) for n in ast.walk(statement)))


def plain_numbers(source: str) -> Iterator[str]:
    """A float the reducer shrank to an odd value (`7.006492321624087e-46`, a float32 denormal) becomes
    1.0 or 2.0, where the script still shows the bug: a reader then sees a number, not a puzzle."""
    def rewrite(tree, k):
        places = [(n, v) for n in ast.walk(tree)
                  if isinstance(n, ast.Constant) and type(n.value) is float and n.value not in (0.0, 1.0, 2.0)
                  for v in (1.0, 2.0)]
        if k >= len(places):
            return False
        node, value = places[k]
        node.value = value
        return True
    return _each(source, rewrite)


PASSES = (fold_literals, plain_calls, split_tuple_assignments, drop_unused_assignments, drop_unused_parameters)
# Last, once: pysource-minimize shrinks numbers again, so inside the loop the two would undo each other.
FINAL_PASSES = (plain_numbers,)


def improve(source: str, interesting: Callable[[str], bool], passes=PASSES) -> str:
    """`source` rewritten by `passes`, one interesting candidate at a time, until none is. A candidate
    seen before is not tried again, so that two rewrites that undo each other cannot loop."""
    seen = {source, _source(ast.parse(source))}
    changed = True
    while changed:
        changed = False
        for rewrite in passes:
            for candidate in rewrite(source):
                if candidate not in seen:
                    seen.add(candidate)
                    if interesting(candidate):
                        source, changed = candidate, True
                        break
            if changed:
                break  # from the first pass again: the cheaper rewrites first
    return source
