"""Which cases use Lightning, seen from their source: a case uses Lightning when its test function,
or a function or class under cases/ that it reaches by name, imports `lightning` or
`pytorch_lightning` or asks `need()` for an API of theirs (`need("lightning.fabric.Fabric")`).

The Lightning-axis sessions (harness.core.matrix: a row's pins with the newest Lightning) run only those
cases (`--lightning-cases`): a case that never touches Lightning has the same outcome with either
release, so it runs once, in the row's own session. A parametrisation of a Lightning case that does not
touch Lightning (a control: a plain TorchFunctionMode beside `_EmptyInit`) says so with
`pytest.param(..., marks=pytest.mark.without_lightning)`, which the source cannot show.
"""

from __future__ import annotations

import ast
import functools
import inspect
import pathlib
import textwrap

from harness.core import paths

PACKAGES = ("lightning", "pytorch_lightning")


def _names_lightning(text: str) -> bool:
    return text.split(".", 1)[0] in PACKAGES


def _in_cases(obj) -> bool:
    try:
        return paths.CASES in pathlib.Path(inspect.getsourcefile(obj) or "").resolve().parents
    except TypeError:  # a builtin
        return False


@functools.lru_cache(maxsize=None)
def _direct(code) -> tuple[bool, tuple[str, ...]]:
    """(whether the source of a function or class names Lightning itself, the names it uses)."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(code)))
    except (OSError, TypeError, SyntaxError):
        return False, ()
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import) and any(_names_lightning(a.name) for a in node.names):
            return True, ()
        if isinstance(node, ast.ImportFrom) and _names_lightning(node.module or ""):
            return True, ()
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and _names_lightning(node.value) \
                and "." in node.value:  # need("lightning.fabric.Fabric")
            return True, ()
        if isinstance(node, ast.Name):
            names.add(node.id)
    return False, tuple(sorted(names))


def uses_lightning(function) -> bool:
    """Whether `function` (a case's test function) reaches Lightning, following the functions and
    classes under cases/ it names (its own module's and those it imports from cases/programs)."""
    seen, todo = set(), [inspect.unwrap(function)]
    while todo:
        obj = todo.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        direct, names = _direct(obj)
        if direct:
            return True
        module = inspect.getmodule(obj)
        scope = vars(module) if module else {}
        for name in names:
            value = scope.get(name)
            if inspect.ismodule(value) and _names_lightning(value.__name__):
                return True
            if (inspect.isfunction(value) or inspect.isclass(value)) and _in_cases(value):
                todo.append(value)
    return False


MARKER = "without_lightning"


def lightning_items(items) -> tuple[list, list]:
    """(the items whose case uses Lightning, the others)."""
    chosen: list = []
    others: list = []
    for item in items:
        function = getattr(item, "function", None)
        uses = function is not None and uses_lightning(function) and item.get_closest_marker(MARKER) is None
        (chosen if uses else others).append(item)
    return chosen, others
