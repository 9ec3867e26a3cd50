"""Rewrites that turn what a script looks up or generates at run time into the code a reader sees, for
`reduce` (one candidate per place, kept only where the script stays interesting):

- materialise_need: `X = need("a.b.C")` (the export's lookup that skips where torch lacks C) becomes
  `X = torch.b.C` where the module is under a package the script imports whole, else
  `from a.b import C` (`as X` where the names differ); the `need` helper then goes when unused;
- materialise_exec(observed): a module-level `exec(S, ns)` (or `exec(compile(S, ...), ns)`) becomes
  the statements of the source text S it ran, as `observed` (the candidate run in the failing venv with
  `exec` and `compile` recording their text) saw it, one text at that line; `ns["name"]` becomes `name`;
- decorate: `f = wrap(f)` of a module-level function `f` becomes `@wrap` on its definition;
- hoist_imports: a module-level import below other statements (what materialise_need or an inlined
  function left there) joins the imports at the top.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator

from harness.tools.reduce.inline import _names
from harness.tools.reduce.passes import SKIP, _bodies, _each


def _need_path(node: ast.AST) -> str | None:
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "need"
            and len(node.args) == 1 and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)
            and "." in node.args[0].value):
        return node.args[0].value
    return None


def _imported_whole(tree: ast.Module) -> set[str]:
    return {a.name for s in tree.body if isinstance(s, ast.Import) for a in s.names if a.asname is None}


def _attribute_of(dotted: str) -> ast.expr:
    first, *rest = dotted.split(".")
    node: ast.expr = ast.Name(first, ast.Load())
    for name in rest:
        node = ast.Attribute(node, name, ast.Load())
    return node


def _after_imports(tree: ast.Module) -> int:
    index = 0
    while index < len(tree.body) and isinstance(tree.body[index], (ast.Import, ast.ImportFrom)):
        index += 1
    return index


def materialise_need(source: str) -> Iterator[str]:
    def rewrite(tree, k):
        places = [(body, i, s, dotted) for body in _bodies(tree) for i, s in enumerate(body)
                  if isinstance(s, ast.Assign) and len(s.targets) == 1 and isinstance(s.targets[0], ast.Name)
                  and (dotted := _need_path(s.value))]
        if k >= len(places):
            return False
        body, index, statement, dotted = places[k]
        name = statement.targets[0].id
        module, _, attribute = dotted.rpartition(".")
        if module.split(".")[0] in _imported_whole(tree):
            body[index] = ast.Assign(targets=statement.targets, value=_attribute_of(dotted))
        else:
            del body[index]
            target = tree.body if body is tree.body else body
            target.insert(_after_imports(tree) if body is tree.body else index, ast.ImportFrom(
                module=module, names=[ast.alias(attribute, None if name == attribute else name)], level=0))
        _drop_unused_need(tree)
        return True
    return _each(source, rewrite)


def _drop_unused_need(tree: ast.Module) -> None:
    if not _names(tree, "need"):
        tree.body = [s for s in tree.body if not (isinstance(s, ast.FunctionDef) and s.name == "need")]


def _exec_text(statement: ast.stmt, observed: dict[int, set[str]]) -> tuple[str, ast.expr | None] | None:
    """(the one source text a module-level `exec(...)` statement ran, its namespace argument)."""
    if not (isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call)
            and isinstance(statement.value.func, ast.Name) and statement.value.func.id == "exec"
            and statement.value.args):
        return None
    texts = observed.get(statement.lineno, set())
    if len(texts) != 1:
        return None
    namespace = statement.value.args[1] if len(statement.value.args) > 1 else None
    return next(iter(texts)), namespace


def materialise_exec(observed: Callable[[str], dict[int, set[str]]]) -> Callable[[str], Iterator[str]]:
    """The pass, given how to observe what a candidate's `exec` calls ran: {line: the texts}."""
    def materialise(source: str) -> Iterator[str]:
        if "exec(" not in source:
            return iter(())
        texts = observed(source)

        def rewrite(tree, k):
            places = [(i, found) for i, s in enumerate(tree.body) for found in [_exec_text(s, texts)] if found]
            if k >= len(places):
                return False
            index, (text, namespace) = places[k]
            try:
                statements = ast.parse(text).body
            except SyntaxError:
                return SKIP
            tree.body[index:index + 1] = statements
            if isinstance(namespace, ast.Name):
                _unwrap_namespace(tree, namespace.id)
            return True
        return _each(source, rewrite)
    return materialise


def _unwrap_namespace(tree: ast.Module, namespace: str) -> None:
    """`namespace["name"]` becomes `name`: what the exec'd text defined now lives at module level."""
    class Unwrap(ast.NodeTransformer):
        def visit_Subscript(self, node):
            self.generic_visit(node)
            if (isinstance(node.value, ast.Name) and node.value.id == namespace and isinstance(node.slice, ast.Constant)
                    and isinstance(node.slice.value, str) and node.slice.value.isidentifier()):
                return ast.Name(node.slice.value, node.ctx)
            return node
    Unwrap().visit(tree)


def _module_assignments(tree: ast.Module) -> Iterator[tuple[int, ast.Assign, str]]:
    for i, s in enumerate(tree.body):
        if isinstance(s, ast.Assign) and len(s.targets) == 1 and isinstance(s.targets[0], ast.Name):
            yield i, s, s.targets[0].id


def decorate(source: str) -> Iterator[str]:
    def rewrite(tree, k):
        functions = {s.name: s for s in tree.body if isinstance(s, ast.FunctionDef)}
        places = [(s, functions[name]) for _, s, name in _module_assignments(tree)
                  if name in functions and isinstance(s.value, ast.Call) and len(s.value.args) == 1
                  and not s.value.keywords and isinstance(s.value.args[0], ast.Name) and s.value.args[0].id == name
                  and tree.body.index(functions[name]) < tree.body.index(s)]
        if k >= len(places):
            return False
        statement, function = places[k]
        tree.body.remove(statement)
        function.decorator_list.insert(0, statement.value.func)
        return True
    return _each(source, rewrite)


def hoist_imports(source: str) -> Iterator[str]:
    def rewrite(tree, k):
        top = _after_imports(tree)
        places = [s for s in tree.body[top:] if isinstance(s, (ast.Import, ast.ImportFrom))]
        if k >= len(places):
            return False
        tree.body.remove(places[k])
        tree.body.insert(top, places[k])
        return True
    return _each(source, rewrite)


PASSES = (materialise_need, decorate, hoist_imports)
