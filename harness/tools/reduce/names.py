"""Rewrites that put what a name stands for where it is read, for `reduce` (one candidate per place,
kept only where the script stays interesting). In the module and in each function's own scope:

- inline_aliases: `a = b` (a name, `m.attr`, a constant) bound once: `b` wherever `a` is read, so that
  `fn = eager`, `eager = ckpt` leave `ckpt`, and `s = h; return s` leaves `return h`;
- inline_single_use: `a = <expression>` read once, later, not in a loop: the expression in its
  place (`torch.compile(f)(x)`, `return x @ w`; a module-level value read once in a module-level
  function is then made at each call; `obj.attr = <expression>` likewise where `attr` is read once),
  where that statement stays within LINE_LENGTH characters (a reader should not unpick a line of
  nested calls);
- functions_as_lambdas: `def f(x): return E` (or a lone `E`) named once, as a value (`checkpoint(f, x)`), becomes
  `lambda x: E` there;
- constant_attributes: `self.a` of a module-level class whose `__init__` sets it to a constant (or
  a parameter's constant default that no construction passes) becomes the constant;
- drop_unused_results: a function returning `(a, b)` whose every caller unpacks it and never reads
  one part returns the rest (`fwd, bwd = step(f)` with `fwd` unused: `bwd = step(f)`).
"""

from __future__ import annotations

import ast
import copy
from collections.abc import Iterator, Sequence

from harness.tools.reduce.inline import COMPREHENSIONS, SCOPES, _names, _own_nodes, _simple, _walk_scope
from harness.tools.reduce.passes import _each

LINE_LENGTH = 100
NESTED = SCOPES + COMPREHENSIONS
ONCE = NESTED + (ast.For, ast.While, ast.AsyncFor)  # what may run its contents other than once
Block = ast.Module | ast.FunctionDef | ast.AsyncFunctionDef  # a scope whose body is statements
Scope = Block | ast.Lambda


def _params(function: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> set[str]:
    a = function.args
    return {x.arg for x in a.posonlyargs + a.args + a.kwonlyargs + [a.vararg, a.kwarg] if x is not None}


def _binding(node: ast.AST, name: str) -> bool:
    return (isinstance(node, ast.Name) and node.id == name and not isinstance(node.ctx, ast.Load)
            or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name
            or isinstance(node, (ast.Import, ast.ImportFrom)) and any((a.asname or a.name.split(".")[0]) == name
                                                                       for a in node.names))


def _body_of(scope: Scope) -> Sequence[ast.AST]:
    return [scope.body] if isinstance(scope, ast.Lambda) else scope.body


def _bindings(scope: Scope, name: str) -> int:
    """How often `scope` itself (the module or a function) binds `name`, its parameters included."""
    own = sum(1 for n in _own_nodes(_body_of(scope), NESTED) if _binding(n, name))
    return own + (name in _params(scope) if isinstance(scope, (ast.FunctionDef, ast.Lambda)) else 0)


def _local_to(scope: Scope | ast.ClassDef | ast.ListComp | ast.SetComp | ast.DictComp | ast.GeneratorExp,
              name: str) -> bool:
    if isinstance(scope, COMPREHENSIONS):
        return any(n.id == name for g in scope.generators for n in ast.walk(g.target) if isinstance(n, ast.Name))
    if isinstance(scope, ast.ClassDef):
        return any(_binding(n, name) for n in _own_nodes(scope.body, NESTED))
    return _bindings(scope, name) > 0


def _reads(scope: Scope, name: str) -> list[ast.Name]:
    """The reads of `scope`'s own `name`: in it, and in nested scopes that do not bind a `name` of their own."""
    found = []

    def visit(node):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, NESTED) and _local_to(child, name):
                continue  # (its decorators and defaults read the outer name too: rare in a reduction)
            if isinstance(child, ast.Name) and child.id == name and isinstance(child.ctx, ast.Load):
                found.append(child)
            visit(child)
    for statement in _body_of(scope):
        if isinstance(statement, NESTED) and _local_to(statement, name):
            continue
        if isinstance(statement, ast.Name) and statement.id == name:
            found.append(statement)
        visit(statement)
    return found


def _scopes(tree: ast.Module) -> list[Block]:
    return [tree] + [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]


def _declared(tree: ast.Module, name: str) -> bool:
    return any(isinstance(n, (ast.Global, ast.Nonlocal)) and name in n.names for n in ast.walk(tree))


def _assignments(tree: ast.Module) -> Iterator[tuple[Block, int, ast.Assign, str]]:
    """(scope, index in its body, statement, name) of each `name = value` bound once in its scope."""
    for scope in _scopes(tree):
        for i, s in enumerate(scope.body):
            if (isinstance(s, ast.Assign) and len(s.targets) == 1 and isinstance(s.targets[0], ast.Name)
                    and _bindings(scope, s.targets[0].id) == 1 and not _declared(tree, s.targets[0].id)
                    and not (isinstance(scope, ast.FunctionDef) and s.targets[0].id in _params(scope))):
                yield scope, i, s, s.targets[0].id


def _substitute(tree: ast.Module, reads: list[ast.Name], value: ast.expr) -> None:
    class Put(ast.NodeTransformer):
        def visit(self, node):
            return copy.deepcopy(value) if any(node is r for r in reads) else self.generic_visit(node)
    Put().visit(tree)


def inline_aliases(source: str) -> Iterator[str]:
    def rewrite(tree, k):
        places = [(scope, s, name) for scope, _, s, name in _assignments(tree)
                  if _simple(s.value) and not isinstance(s.value, ast.Tuple)
                  and not (isinstance(s.value, ast.Name) and s.value.id == name)
                  # what the alias names is bound once too: it reads the same wherever it is put
                  and all(_bindings(scope, n.id) <= 1 for n in ast.walk(s.value) if isinstance(n, ast.Name))]
        if k >= len(places):
            return False
        scope, statement, name = places[k]
        reads = _reads(scope, name)
        scope.body.remove(statement)
        scope.body = scope.body or [ast.Pass()]
        _substitute(tree, reads, statement.value)
        return True
    return _each(source, rewrite)


def _width(statement: ast.stmt) -> int:
    """The length of the statement's first line (a loop's or `with`'s header)."""
    return len(ast.unparse(statement).splitlines()[0])


def _statement_holding(statement: ast.stmt, read: ast.expr) -> ast.stmt | None:
    """The innermost statement of `statement` that evaluates `read` once where it stands (a loop's
    header, `for x in <read>:`, counted as a line of its own), or None."""
    if isinstance(statement, (ast.For, ast.AsyncFor)) and any(n is read for n in ast.walk(statement.iter)):
        header = ast.For(target=statement.target, iter=statement.iter, body=[ast.Pass()], orelse=[])
        return ast.fix_missing_locations(ast.copy_location(header, statement))
    if isinstance(statement, ONCE):
        return None
    nodes = [statement, *_walk_scope(statement, ONCE)]
    if not any(n is read for n in nodes):
        return None
    inner = [n for n in nodes if isinstance(n, ast.stmt) and not isinstance(n, ONCE)
             and any(m is read for m in [n, *_walk_scope(n, ONCE)])]
    return inner[-1] if inner else None


def inline_single_use(source: str) -> Iterator[str]:
    def rewrite(tree, k):
        classes = {s.name for s in tree.body if isinstance(s, ast.ClassDef)}
        places = []
        for scope, i, s, name in _assignments(tree):
            if _simple(s.value) or (  # an instance: its methods may be inlined
                    isinstance(s.value, ast.Call) and isinstance(s.value.func, ast.Name)
                    and s.value.func.id in classes):
                continue
            reads = _reads(scope, name)
            if len(reads) != 1:
                continue
            later = scope.body[i + 1:]
            if scope is tree:  # or in a function of the module's, once a call: the value is then made at each call
                later += [t for f in tree.body if isinstance(f, ast.FunctionDef) for t in f.body]
            holding = next(filter(None, (_statement_holding(t, reads[0]) for t in later)), None)
            if holding is not None and _width(holding) - len(name) + len(ast.unparse(s.value)) <= LINE_LENGTH:
                places.append((scope, s, reads))
        places += _attributes_read_once(tree)
        if k >= len(places):
            return False
        scope, statement, reads = places[k]
        scope.body.remove(statement)
        _substitute(tree, reads, statement.value)
        return True
    return _each(source, rewrite)


def _attributes_read_once(tree: ast.Module) -> list:
    """(the module, `obj.attr = value`, [its one read]) where `attr` is stored and read once in the
    whole script, the read later at module level (`case.compared = ...` then `*case.compared`)."""
    found = []
    for i, s in enumerate(tree.body):
        if not (isinstance(s, ast.Assign) and len(s.targets) == 1 and isinstance(s.targets[0], ast.Attribute)
                and isinstance(s.targets[0].value, ast.Name)):
            continue
        target = s.targets[0]
        uses = [n for n in ast.walk(tree) if isinstance(n, ast.Attribute) and n.attr == target.attr]
        reads = [n for n in uses if n is not target]
        if len(reads) == 1 and isinstance(reads[0].ctx, ast.Load) and ast.unparse(reads[0]) == ast.unparse(target):
            holding = next(filter(None, (_statement_holding(t, reads[0]) for t in tree.body[i + 1:])), None)
            if holding is not None and (_width(holding) - len(ast.unparse(s.targets[0]))
                                        + len(ast.unparse(s.value))) <= LINE_LENGTH:
                found.append((tree, s, reads))
    return found


def functions_as_lambdas(source: str) -> Iterator[str]:
    def rewrite(tree, k):
        places = []
        for scope in _scopes(tree):
            for f in scope.body:
                # `return E`, or a lone `E` (what the reducer leaves of `return E` when the value is
                # unused): the candidate is checked anyway, so a lambda returning E is fine
                if not (isinstance(f, ast.FunctionDef) and not f.decorator_list and len(f.body) == 1
                        and isinstance(f.body[0], (ast.Return, ast.Expr)) and f.body[0].value is not None
                        and _bindings(scope, f.name) == 1):
                    continue
                reads = _reads(scope, f.name)
                holding = _innermost_statement(tree, reads[0]) if len(reads) == 1 else None
                if holding and not _called(tree, reads[0]) and _width(holding) + len(ast.unparse(f.args)) \
                        + len(ast.unparse(f.body[0].value)) - len(f.name) + len("lambda : ") <= LINE_LENGTH:
                    places.append((scope, f, reads))
        if k >= len(places):
            return False
        scope, function, reads = places[k]
        scope.body.remove(function)
        _substitute(tree, reads, ast.Lambda(args=function.args, body=function.body[0].value))
        return True
    return _each(source, rewrite)


def _innermost_statement(tree: ast.Module, node: ast.AST) -> ast.stmt | None:
    """The statement `node` is part of (a line of the script, where a lambda would be written)."""
    holders = [s for s in ast.walk(tree) if isinstance(s, ast.stmt) and not isinstance(s, NESTED + ONCE + (
        ast.If, ast.With, ast.Try)) and any(n is node for n in ast.walk(s))]
    return holders[-1] if holders else None


def _called(tree: ast.Module, name: ast.Name) -> bool:
    return any(isinstance(n, ast.Call) and n.func is name for n in ast.walk(tree))


def _constant_attributes(tree: ast.Module, cls: ast.ClassDef) -> dict[str, tuple[ast.Constant, str | None]]:
    """{attribute: (its constant, the __init__ parameter it came from)} for `cls`."""
    init = next((m for m in cls.body if isinstance(m, ast.FunctionDef) and m.name == "__init__"), None)
    uses = _names(tree, cls.name)
    constructions = [c for c in ast.walk(tree) if isinstance(c, ast.Call) and isinstance(c.func, ast.Name)
                     and c.func.id == cls.name]
    if init is None or len(constructions) != len(uses):
        return {}  # no __init__, or the class is passed around: its constructions are not all in sight
    positional = [a.arg for a in init.args.args[1:]]
    defaults = dict(zip(positional[::-1], init.args.defaults[::-1], strict=False))  # the last ones have defaults
    passed = {p for c in constructions for p in positional[:len(c.args)]} | {k.arg for c in constructions
                                                                            for k in c.keywords}
    stored = [n.attr for m in cls.body if isinstance(m, ast.FunctionDef) for n in ast.walk(m)
              if isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store)]
    found: dict[str, tuple[ast.Constant, str | None]] = {}
    for s in init.body:
        if (isinstance(s, ast.Assign) and len(s.targets) == 1 and isinstance(s.targets[0], ast.Attribute)
                and ast.unparse(s.targets[0].value) == "self" and stored.count(s.targets[0].attr) == 1):
            value, parameter = s.value, None
            if isinstance(value, ast.Name) and value.id in defaults and value.id not in passed:
                parameter = value.id
                value = defaults[parameter]
            if isinstance(value, ast.Constant):
                found[s.targets[0].attr] = (value, parameter)
    return found


def constant_attributes(source: str) -> Iterator[str]:
    def rewrite(tree, k):
        places = [(cls, attribute, found) for cls in tree.body if isinstance(cls, ast.ClassDef)
                  for attribute, found in _constant_attributes(tree, cls).items()]
        if k >= len(places):
            return False
        cls, attribute, (value, parameter) = places[k]
        init = next(m for m in cls.body if isinstance(m, ast.FunctionDef) and m.name == "__init__")
        init.body = [s for s in init.body if not (isinstance(s, ast.Assign) and isinstance(s.targets[0], ast.Attribute)
                                                  and s.targets[0].attr == attribute)] or [ast.Pass()]
        reads = [n for n in ast.walk(cls) if isinstance(n, ast.Attribute) and n.attr == attribute
                 and ast.unparse(n.value) == "self" and isinstance(n.ctx, ast.Load)]

        class Put(ast.NodeTransformer):
            def visit_Attribute(self, node):
                return copy.deepcopy(value) if any(node is r for r in reads) else self.generic_visit(node)
        Put().visit(cls)
        if parameter and not _reads(init, parameter):
            index = [a.arg for a in init.args.args].index(parameter)
            del init.args.defaults[index - (len(init.args.args) - len(init.args.defaults))]
            del init.args.args[index]
        return True
    return _each(source, rewrite)


def drop_unused_results(source: str) -> Iterator[str]:
    def rewrite(tree, k):
        places = []
        for f in tree.body:
            if not (isinstance(f, ast.FunctionDef) and f.body and isinstance(f.body[-1], ast.Return)
                    and isinstance(f.body[-1].value, ast.Tuple) and _bindings(tree, f.name) == 1
                    and sum(isinstance(n, ast.Return) for n in _own_nodes(f.body)) == 1):
                continue
            width = len(f.body[-1].value.elts)
            sites = [s for s in ast.walk(tree) if isinstance(s, ast.Assign) and isinstance(s.value, ast.Call)
                     and isinstance(s.value.func, ast.Name) and s.value.func.id == f.name]
            bound = [names for s in sites if (names := _tuple_names(s)) is not None and len(names) == width]
            if len(sites) != len(_reads(tree, f.name)) or len(bound) != len(sites):
                continue
            for position in range(width):
                if all(not _names_read(tree, names[position]) for names in bound):
                    places.append((f, sites, position))
        if k >= len(places):
            return False
        function, sites, position = places[k]
        returned = function.body[-1].value
        del returned.elts[position]
        if len(returned.elts) == 1:
            function.body[-1].value = returned.elts[0]
        for site in sites:
            del site.targets[0].elts[position]
            if len(site.targets[0].elts) == 1:
                site.targets[0] = site.targets[0].elts[0]
        return True
    return _each(source, rewrite)


def _tuple_names(assign: ast.Assign) -> list[str] | None:
    """The names `a, b = ...` binds, in order; None where its one target is not a tuple of plain names."""
    if not (len(assign.targets) == 1 and isinstance(assign.targets[0], ast.Tuple)):
        return None
    names = [t.id for t in assign.targets[0].elts if isinstance(t, ast.Name)]
    return names if len(names) == len(assign.targets[0].elts) else None


def _names_read(tree: ast.Module, name: str) -> bool:
    return any(isinstance(n.ctx, ast.Load) for n in _names(tree, name))


PASSES = (inline_aliases, inline_single_use, functions_as_lambdas, constant_attributes, drop_unused_results)
