"""Rewrites that inline a script's calls into plain code, for `reduce` (run like harness.tools.reduce.passes'
own: one candidate per place, kept only where the script stays interesting):

- inline_functions: a call of a module-level function named nowhere else becomes the function's body,
  its parameters bound to the arguments (a simple argument, or one read once, put in place of the
  parameter; else a `parameter = argument` line); a function ending in `return E` leaves E where the
  call was, its other statements before the statement the call is in;
- inline_methods: the same for `inst.m(...)` (and a property `inst.p`) on a module-level instance
  `inst = C(...)` of a module-level class: `self.attr` resolved from `__init__`'s assignments of
  constants and arguments (a dataclass's fields from the constructor call), `self` elsewhere `inst`.
  The method goes when nothing else names it, the instance and the class when nothing names them,
  so that `case.compile(fn)` becomes `torch.compile(fn, backend='eager')` and `Case` goes;
- call_forward: `model(x)` on such an instance of a torch.nn.Module subclass becomes `model.forward(x)`,
  for inline_methods to take.
"""

from __future__ import annotations

import ast
import copy
from collections.abc import Iterator, Sequence

from harness.tools.reduce.passes import SKIP, _bodies, _each

SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)
COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
REPEATING = SCOPES + COMPREHENSIONS + (ast.For, ast.While)


def _walk_scope(node: ast.AST, stop=SCOPES) -> Iterator[ast.AST]:
    """`node`'s descendants, not entering nested functions, lambdas or classes (what `stop` names)."""
    for child in ast.iter_child_nodes(node):
        yield child
        if not isinstance(child, stop):
            yield from _walk_scope(child, stop)


def _own_nodes(statements: Sequence[ast.AST], stop=SCOPES) -> list[ast.AST]:
    """The statements and their nodes, not entering functions, lambdas or classes (their own scopes)."""
    return [n for s in statements for n in [s, *(() if isinstance(s, stop) else _walk_scope(s, stop))]]


def _simple(node: ast.AST) -> bool:
    """A value that reads the same wherever it is put: a constant, a name, `a.b.c`, a tuple of those."""
    if isinstance(node, ast.Attribute):
        return _simple(node.value)
    if isinstance(node, ast.Tuple):
        return all(_simple(e) for e in node.elts)
    return isinstance(node, (ast.Constant, ast.Name))


def _body(function: ast.FunctionDef) -> list[ast.stmt] | None:
    """The function's statements less its docstring, or None where inlining cannot keep its meaning:
    a return before the last statement, a yield, global or nonlocal."""
    body = function.body[1:] if (function.body and isinstance(function.body[0], ast.Expr)
                                 and isinstance(function.body[0].value, ast.Constant)) else function.body
    inner = _own_nodes(body)
    if any(isinstance(n, (ast.Yield, ast.YieldFrom, ast.Await, ast.Global, ast.Nonlocal)) for n in inner):
        return None
    returns = [n for n in inner if isinstance(n, ast.Return)]
    if returns and (len(returns) > 1 or returns[0] is not body[-1]):
        return None
    return body


def _bind(function: ast.FunctionDef, call: ast.Call, skip_self: bool) -> dict[str, ast.expr] | None:
    """Each parameter's value at this call (given, or its default), or None where they do not fit."""
    given = [e for a in call.args for e in (a.value.elts if isinstance(a, ast.Starred)
                                             and isinstance(a.value, (ast.Tuple, ast.List)) else [a])]
    if any(isinstance(a, ast.Starred) for a in given) or any(k.arg is None for k in call.keywords):
        return None
    arguments = function.args
    positional = [a.arg for a in arguments.posonlyargs + arguments.args][1 if skip_self else 0:]
    # the last parameters have the defaults; kw_defaults holds one entry (or None) per keyword-only one
    defaults = dict(zip([a.arg for a in arguments.posonlyargs + arguments.args][::-1], arguments.defaults[::-1],
                        strict=False))
    defaults |= {a.arg: d for a, d in zip(arguments.kwonlyargs, arguments.kw_defaults, strict=True) if d is not None}
    values = dict(zip(positional, given, strict=False))  # more given than named: the *args; fewer: defaults
    extra = given[len(positional):]
    if extra and not arguments.vararg:
        return None
    if arguments.vararg:
        values[arguments.vararg.arg] = ast.Tuple(elts=list(extra), ctx=ast.Load())
    keywords = {k.arg: k.value for k in call.keywords if k.arg is not None}  # `**mapping`: returned None above
    named = positional + [a.arg for a in arguments.kwonlyargs]
    unknown = {k: v for k, v in keywords.items() if k not in named or k in values}
    if unknown and not arguments.kwarg:
        return None
    values |= {k: v for k, v in keywords.items() if k not in unknown}
    if arguments.kwarg:
        values[arguments.kwarg.arg] = ast.Dict(keys=[ast.Constant(k) for k in unknown], values=list(unknown.values()))
    for name in named:
        if name not in values:
            if name not in defaults:
                return None
            values[name] = defaults[name]
    return values


class _Substitute(ast.NodeTransformer):
    """Parameters put in place, `self.attr` resolved, `self` made the instance's name; not inside a
    nested function whose own parameters reuse those names."""

    def __init__(self, values: dict[str, ast.expr], instance: str | None, attributes: dict[str, ast.expr]):
        self.values, self.instance, self.attributes = values, instance, attributes

    def _scope(self, node):
        arguments = node.args
        own = {a.arg for a in arguments.posonlyargs + arguments.args + arguments.kwonlyargs
               + [arguments.vararg, arguments.kwarg] if a is not None}
        if not own & (set(self.values) | {"self"}):
            return self.generic_visit(node)
        inner = _Substitute({k: v for k, v in self.values.items() if k not in own},
                            None if "self" in own else self.instance, self.attributes)
        return inner.generic_visit(node)

    visit_FunctionDef = visit_Lambda = _scope

    def visit_Name(self, node):
        if isinstance(node.ctx, ast.Load) and node.id in self.values:
            return copy.deepcopy(self.values[node.id])
        if self.instance and node.id == "self":
            return ast.Name(self.instance, node.ctx)
        return node

    def visit_Attribute(self, node):
        if (self.instance and isinstance(node.value, ast.Name) and node.value.id == "self"
                and isinstance(node.ctx, ast.Load) and node.attr in self.attributes):
            return copy.deepcopy(self.attributes[node.attr])
        return self.generic_visit(node)


def _inline_at(statements: list, index: int, call: ast.AST, function: ast.FunctionDef, values: dict,
               instance: str | None = None, attributes: dict | None = None) -> bool:
    """Replace `call` (in statements[index]) by `function`'s body; False where that cannot keep its meaning."""
    body = _body(function)
    if body is None:
        return False
    statement = statements[index]
    body = copy.deepcopy(body)
    assigned = {n.id for n in _own_nodes(body) if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)}
    reads = [n for n in _own_nodes(body, ()) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)]
    repeated = {id(n) for r in _own_nodes(body, ()) if isinstance(r, REPEATING) for n in ast.walk(r) if n is not r}
    put, bindings = {}, []
    for name, value in values.items():
        uses = [n for n in reads if n.id == name]
        once = len(uses) == 1 and id(uses[0]) not in repeated
        if name not in assigned and (_simple(value) or once or not uses):
            put[name] = value
        elif not (isinstance(value, ast.Name) and value.id == name):
            bindings.append(ast.Assign(targets=[ast.Name(name, ast.Store())], value=value))
    substitute = _Substitute(put, instance, attributes or {})
    body = [substitute.visit(s) for s in body]
    last = body[-1] if body and isinstance(body[-1], ast.Return) else None
    if last is not None:
        body.pop()
    result = last.value if last and last.value else ast.Constant(None)
    tail: list[ast.stmt]
    if isinstance(statement, ast.Expr) and statement.value is call:
        tail = [] if _simple(result) else [ast.Expr(result)]
    elif last is None:
        return False  # its value is used, and it returns none
    else:
        tail = [_replace(statement, call, result)]
    statements[index:index + 1] = bindings + body + tail
    return True


def _replace(statement: ast.stmt, old: ast.AST, new: ast.AST) -> ast.stmt:
    """`statement` with its node `old` (a node inside it, never itself) replaced by `new`."""
    class Swap(ast.NodeTransformer):
        def visit(self, node):
            return new if node is old else self.generic_visit(node)
    return Swap().visit(statement)


def _calls_in(statement: ast.stmt) -> Iterator[ast.AST]:
    """The calls and attribute reads a statement evaluates where it stands, once: a simple statement's,
    a `with` or `if` statement's header's (not in a lambda or comprehension)."""
    roots: list[ast.AST]
    if isinstance(statement, (ast.Expr, ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Return)):
        roots = [statement]
    elif isinstance(statement, ast.With):
        roots = [item.context_expr for item in statement.items]
    elif isinstance(statement, ast.If):
        roots = [statement.test]
    else:
        return
    for root in roots:
        for node in [root, *_walk_scope(root, (ast.Lambda,) + COMPREHENSIONS)]:
            if isinstance(node, (ast.Call, ast.Attribute)):
                yield node


def _names(tree: ast.AST, name: str) -> list[ast.Name]:
    return [n for n in ast.walk(tree) if isinstance(n, ast.Name) and n.id == name]


def inline_functions(source: str) -> Iterator[str]:
    def places(tree):
        defined = {s.name: s for s in tree.body if isinstance(s, ast.FunctionDef) and not s.decorator_list}
        return [(statements, i, node, defined[node.func.id]) for statements in _bodies(tree)
                for i, s in enumerate(statements) for node in _calls_in(s)
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in defined
                and len(_names(tree, node.func.id)) == 1
                and not any(n is node for n in ast.walk(defined[node.func.id]))]  # not a call in itself

    def rewrite(tree, k):
        found = places(tree)
        if k >= len(found):
            return False
        statements, index, call, function = found[k]
        values = _bind(function, call, skip_self=False)
        if values is None or not _inline_at(statements, index, call, function, values):
            return SKIP
        tree.body.remove(function)
        return True
    return _each(source, rewrite)


def _instances(tree: ast.Module) -> dict[str, tuple[ast.ClassDef, ast.Call]]:
    """Module-level names bound once, to an instance of a module-level class: {name: (its class, the
    call that builds it)}."""
    classes = {s.name: s for s in tree.body if isinstance(s, ast.ClassDef)}
    found = {}
    for s in tree.body:
        if (isinstance(s, ast.Assign) and len(s.targets) == 1 and isinstance(s.targets[0], ast.Name)
                and isinstance(s.value, ast.Call) and isinstance(s.value.func, ast.Name)
                and s.value.func.id in classes):
            name = s.targets[0].id
            if sum(1 for n in _names(tree, name) if not isinstance(n.ctx, ast.Load)) == 1:
                found[name] = (classes[s.value.func.id], s.value)
    return found


def _is_dataclass(cls: ast.ClassDef) -> bool:
    return any("dataclass" in ast.unparse(d) for d in cls.decorator_list)


def _attributes(tree: ast.Module, cls: ast.ClassDef, construction: ast.Call) -> dict[str, ast.expr]:
    """`self.attr` values an instance built by `construction` keeps: a dataclass's fields, or what
    `__init__` assigns from constants and its parameters; simple values, or any argument of an
    attribute read once (its evaluation then moves there); only attributes no other method assigns."""
    read = [n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Load)]

    def usable(name, value, argument=True):
        return _simple(value) or (argument and read.count(name) == 1)
    methods = {m.name: m for m in cls.body if isinstance(m, ast.FunctionDef)}
    stored = {n.attr for m in methods.values() for n in ast.walk(m) if isinstance(n, ast.Attribute)
              and isinstance(n.ctx, ast.Store) and m.name != "__init__"}
    found = {}
    if _is_dataclass(cls):
        fields = [(s.target.id, s.value) for s in cls.body
                  if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)]  # (name, default or None)
        function = ast.FunctionDef(name="__init__", args=ast.arguments(
            posonlyargs=[], args=[ast.arg("self")] + [ast.arg(name) for name, _ in fields],
            defaults=[default for _, default in fields if default is not None], kwonlyargs=[], kw_defaults=[]),
            body=[], decorator_list=[])
        values = _bind(function, construction, skip_self=True) or {}
        found = {k: v for k, v in values.items() if usable(k, v)}
    elif "__init__" in methods:
        values = _bind(methods["__init__"], construction, skip_self=True) or {}
        for s in methods["__init__"].body:
            if isinstance(s, ast.Assign) and len(s.targets) == 1:
                # an unpacking of another length (a ValueError when it runs) keeps the pairs it has
                pairs = (zip(s.targets[0].elts, s.value.elts, strict=False) if isinstance(s.targets[0], ast.Tuple)
                         and isinstance(s.value, ast.Tuple) else [(s.targets[0], s.value)])
                for target, value in pairs:
                    if not (isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name)
                            and target.value.id == "self"):
                        continue
                    argument = isinstance(value, ast.Name)
                    # a parameter: the argument; a local of __init__: unknown
                    kept = values.get(value.id) if isinstance(value, ast.Name) else value
                    if kept is not None and usable(target.attr, kept, argument):
                        found[target.attr] = kept
    return {k: v for k, v in found.items() if k not in stored}


def inline_methods(source: str) -> Iterator[str]:
    def places(tree):
        instances = _instances(tree)
        found = []
        for statements in _bodies(tree):
            for i, s in enumerate(statements):
                for node in _calls_in(s):
                    target = node.func if isinstance(node, ast.Call) else node
                    if not (isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name)
                            and target.value.id in instances):
                        continue
                    cls, construction = instances[target.value.id]
                    method = next((m for m in cls.body if isinstance(m, ast.FunctionDef) and m.name == target.attr),
                                  None)
                    if method is None or method.name.startswith("__") or any(
                            isinstance(n, ast.Name) and n.id == "super" for n in ast.walk(method)):
                        continue
                    is_property = any(ast.unparse(d) == "property" for d in method.decorator_list)
                    if (isinstance(node, ast.Call) and not method.decorator_list and node.func is target) or (
                            is_property and isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load)):
                        found.append((statements, i, node, target.value.id, cls, construction, method))
        return found

    def rewrite(tree, k):
        found = places(tree)
        if k >= len(found):
            return False
        statements, index, node, instance, cls, construction, method = found[k]
        call = node if isinstance(node, ast.Call) else ast.Call(func=node, args=[], keywords=[])
        values = _bind(method, call, skip_self=True)
        if values is None or not _inline_at(statements, index, node, method, values, instance,
                                            _attributes(tree, cls, construction)):
            return SKIP
        if not any(isinstance(n, ast.Attribute) and n.attr == method.name for n in ast.walk(tree)):
            cls.body.remove(method)
            cls.body = cls.body or [ast.Pass()]
        _drop_unnamed(tree, instance, cls)
        return True
    return _each(source, rewrite)


def call_forward(source: str) -> Iterator[str]:
    """`model(x)` on a module-level instance of a module-level torch.nn.Module subclass that defines
    `forward` becomes `model.forward(x)` (hooks aside, what the call runs), which inline_methods takes."""
    def rewrite(tree, k):
        instances = _instances(tree)
        places = [node for node in ast.walk(tree) if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                  and node.func.id in instances and _module_with_forward(instances[node.func.id][0])]
        if k >= len(places):
            return False
        call = places[k]
        call.func = ast.Attribute(value=call.func, attr="forward", ctx=ast.Load())
        return True
    return _each(source, rewrite)


def _module_with_forward(cls: ast.ClassDef) -> bool:
    return (any(ast.unparse(b).endswith("Module") for b in cls.bases)
            and any(isinstance(m, ast.FunctionDef) and m.name == "forward" for m in cls.body)
            and not any(isinstance(m, ast.FunctionDef) and m.name == "__call__" for m in cls.body))


def _drop_unnamed(tree: ast.Module, instance: str, cls: ast.ClassDef) -> None:
    """The instance's assignment where nothing reads it any more, then its class where nothing names it."""
    if not any(isinstance(n.ctx, ast.Load) for n in _names(tree, instance)):
        tree.body = [s for s in tree.body if not (isinstance(s, ast.Assign) and len(s.targets) == 1
                                                  and isinstance(s.targets[0], ast.Name)
                                                  and s.targets[0].id == instance)]
    if not _names(tree, cls.name):
        tree.body.remove(cls)


PASSES = (inline_methods, inline_functions, call_forward)
