"""A property case (harness.plugin.properties) as a standalone script: the one example it ran, not hypothesis.

The record of a property cell lists its failing examples (`metrics.property.failing_examples`: each
example's `figures`, the repr of the program drawn, and its `error` line). The script replays one of
them: the case's `explore(case, name, strategy, check, pinned=...)` call becomes `check` applied to
that example, so that the script needs neither hypothesis nor the strategy.
"""

from __future__ import annotations

import ast
import re
from typing import cast

from harness.tools.repro.errors import ReproError

EXPLORE = "explore"


def _matches(error_line: str, declared: dict) -> bool:
    kind, _, message = error_line.partition(": ")
    names = {name.rsplit(".", 1)[-1] for name in declared["raises"]}
    return kind in names and re.search(declared["match"] or "", message) is not None


def chosen_example(record: dict | None, expected: list[dict]) -> dict | None:
    """The failing example (figures, program, error) that shows the cell's outcome: for `fail`, one that no
    declaration matches; for a declared outcome, one that its reference's declaration matches.
    None when the record lists none (a pass, or no record): the script then runs the first pinned one."""
    if record is None:
        return None
    failing = ((record.get("metrics") or {}).get("property") or {}).get("failing_examples") or []
    if not failing:
        return None
    outcome, reference = record.get("outcome"), record.get("reference")
    for example in failing:
        matched = [d for d in expected if _matches(example["error"], d)]
        if (outcome == "fail" and not matched) or any(d["ref"] == reference for d in matched):
            return example
    return failing[0]


def explore_call(function: ast.FunctionDef) -> ast.Expr | None:
    """The statement of `function` that calls explore(...), if it is a property case: its value is that
    ast.Call."""
    for node in function.body:
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call) \
                and isinstance(node.value.func, ast.Name) and node.value.func.id == EXPLORE:
            return node
    return None


class _Substitute(ast.NodeTransformer):
    def __init__(self, name: str, value: ast.expr):
        self.name, self.value = name, value

    def visit_Name(self, node):
        return self.value if node.id == self.name else node


def header(example: dict | None) -> str:
    """What the script's docstring says of a recorded example: the error it raised and its program."""
    if not example:
        return ""
    program = "\n".join("    " + line for line in str(example.get("program", "")).splitlines())
    text = f"\nThe property's failing example in the matrix ({example['error'][:200]}), its program:\n\n{program}\n"
    return text.replace('"' * 3, "'" * 3)


def _example_node(call: ast.Call, function: str, example: dict | None) -> ast.expr:
    """The expression of the example to replay: a recorded one's figures, else the first pinned one."""
    if example is not None:
        return ast.parse(example["figures"], mode="eval").body
    pinned = next((k.value for k in call.keywords if k.arg == "pinned"), None)
    if pinned is None:
        raise ReproError(f"{function}: no recorded failing example and no pinned one to replay")
    return ast.Subscript(value=pinned, slice=ast.Constant(0), ctx=ast.Load())


def example_expression(source: str, function: str, example: dict | None) -> str:
    """The source of the example `function`'s property replays (see `_example_node`)."""
    tree = ast.parse(source)
    node = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == function)
    statement = explore_call(node)
    if statement is None:
        raise ReproError(f"{function} is not a property case")
    return ast.unparse(_example_node(cast(ast.Call, statement.value), function, example))


def with_example(source: str, function: str, example: dict | None) -> str:
    """`source` with `function`'s explore(...) call replaced by its check applied to `example` (a
    recorded one: its figures are an expression), or to the first pinned example when None."""
    tree = ast.parse(source)
    node = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == function)
    statement = explore_call(node)
    if statement is None:
        return source
    call = cast(ast.Call, statement.value)
    check = call.args[3] if len(call.args) > 3 else next(k.value for k in call.keywords if k.arg == "check")
    example_node = _example_node(call, function, example)
    if isinstance(check, ast.Lambda) and len(check.args.args) == 1:
        replay = _Substitute(check.args.args[0].arg, example_node).visit(check.body)
    else:
        replay = ast.Call(func=check, args=[example_node], keywords=[])
    lines = source.splitlines()
    indent = lines[statement.lineno - 1][:statement.col_offset]
    comment = f"{indent}# The example of the property the matrix ran" + (" (its failing one)" if example else "")
    replayed = ast.unparse(ast.fix_missing_locations(replay))
    lines[statement.lineno - 1:statement.end_lineno] = [comment, indent + replayed]
    return "\n".join(lines) + "\n"
