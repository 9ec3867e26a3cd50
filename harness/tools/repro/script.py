"""The standalone script of one case (harness.tools.repro): the case's test function called with its
parameters as literals, the helpers it uses (of its module, and of the modules under cases/ it imports
them from), and harness/plugin/casekit.py's comparison, each cut down to what the case needs; its last
line prints `OUTCOME: ...` as the matrix would. A property case replays one example
(harness.tools.repro.property_example)."""

from __future__ import annotations

import ast
import dataclasses
import functools
import pathlib
import re
import sys
from collections.abc import Iterable
from typing import cast

from harness.core import paths
from harness.tools.repro.errors import ReproError
from harness.tools.repro.op_example import build_op_script
from harness.tools.repro.property_example import explore_call, with_example
from harness.tools.repro.property_example import header as property_header
from harness.tools.repro.verdict import Verdict

MAX_LINES = 120
MAX_LINES_PROPERTY = 180  # a property case carries its program's generator and check; `reduce` shortens it
BLOCKED = ("pytest", "_pytest", "harness", "hypothesis")


# --- the script ---------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)  # shared by the cache of _statements
class Statement:
    """A top-level statement of a source file: its text, and the names it defines and uses."""

    text: str
    defines: set[str]
    uses: set[str]
    node: ast.AST

    @property
    def is_import(self) -> bool:
        return isinstance(self.node, (ast.Import, ast.ImportFrom))


def _names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


@functools.lru_cache(maxsize=64)
def _parsed(source: str) -> ast.Module:
    return ast.parse(source)


def _pytest_names(tree: ast.Module) -> set[str]:
    """`pytest` and the module's names bound to pytest objects (`te_bug = pytest.mark...`), its own
    or imported from a cases/ support module (a shared declaration)."""
    names, changed = {"pytest"}, True
    for node in tree.body:
        support = _support_module(node)
        if isinstance(node, ast.ImportFrom) and support is not None:
            bound = _pytest_names(_parsed(support.read_text()))
            names |= {a.asname or a.name for a in node.names if a.name in bound}
    while changed:
        changed = False
        for node in tree.body:
            if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None and _names(node.value) & names:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                new = {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)} - names
                names |= new
                changed |= bool(new)
    return names


def statements(source: str, docstrings: bool = True) -> list[Statement]:
    """The top-level statements of `source`, each with the comment lines right above it, less
    the decorators that only speak to pytest (parameters and marks: the script calls the function
    with literals), and less docstrings if asked."""
    return list(_statements(source, docstrings))


@functools.lru_cache(maxsize=256)  # an export reads the same support modules several times, a sweep for every case
def _statements(source: str, docstrings: bool) -> tuple[Statement, ...]:
    tree = ast.parse(source)
    lines = source.splitlines()
    pytest_names = _pytest_names(tree)
    found = []
    for position, node in enumerate(tree.body):
        if position == 0 and isinstance(node, ast.Expr) and isinstance(getattr(node, "value", None), ast.Constant):
            continue  # the module docstring
        decorators = getattr(node, "decorator_list", [])
        start = min([node.lineno] + [d.lineno for d in decorators]) - 1
        while start > 0 and lines[start - 1].lstrip().startswith("#") \
                and not lines[start - 1].lstrip().startswith("# ---"):
            start -= 1
        dropped = [d for d in decorators if _names(d) & pytest_names]
        skip = {number for d in dropped for number in range(d.lineno - 1, d.end_lineno)}
        if not docstrings:
            for inner in ast.walk(node):
                body = inner.body if isinstance(inner, (ast.FunctionDef, ast.ClassDef)) else []
                if len(body) > 1 and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                    end = _last_line(body[0])
                    skip.update(range(body[0].lineno - 1, end))
                    if not lines[end].strip():  # and the blank line after it
                        skip.add(end)
        text = "\n".join(line for number, line in enumerate(lines[start:node.end_lineno], start) if number not in skip)
        uses = set().union(*(_names(child) for child in ast.iter_child_nodes(node) if child not in dropped))
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            defines = {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defines = {node.name}
        else:
            defines = {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
        found.append(Statement(text, defines, uses - defines, node))
    return tuple(found)


def _last_line(node: ast.stmt) -> int:
    """The node's last line: ast.parse sets it on every statement."""
    return cast(int, node.end_lineno)


def as_block(statement: Statement) -> Statement:
    """The statement without its blank lines: a carried helper reads as one block, the script stays short."""
    return dataclasses.replace(statement, text="\n".join(line for line in statement.text.splitlines() if line.strip()))


def needed(found: list[Statement], roots: set[str]) -> list[Statement]:
    """The statements that define `roots` and what those use, transitively, in source order."""
    wanted = set(roots)
    kept: set[int] = set()
    changed = True
    while changed:
        changed = False
        for index, statement in enumerate(found):
            if index not in kept and statement.defines & wanted:
                kept.add(index)
                wanted |= statement.uses
                changed = True
    return [s for i, s in enumerate(found) if i in kept]


def _imported_module(statement: Statement) -> str:
    """The module an import statement (`is_import`) imports from, or the first it imports."""
    node = statement.node
    return (node.module or "") if isinstance(node, ast.ImportFrom) else cast(ast.Import, node).names[0].name


ASSUME = '''
def assume(condition):
    """The property's assumption about this torch (hypothesis.assume): the example does not apply."""
    if not condition:
        raise Skip("the example's assumption does not hold here")
'''
SKIP = '''
class Skip(Exception): pass  # the case cannot run on this torch or Lightning
'''
NEED = '''
def need(dotted):
    """The object at `dotted`, or Skip naming what this installation lacks."""
    module, _, name = dotted.rpartition(".")
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        raise Skip(f"missing: {dotted}") from None
'''

def with_skips_raised(source: str) -> str:
    """`source` with each `pytest.skip(reason)` statement (a case finding at run time that it has nothing
    to show on this torch) as `raise Skip(reason)`: the script's own Skip, printed as the matrix's skip."""
    lines = source.splitlines(keepends=True)
    for node in ast.walk(_parsed(source)):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call) and not node.value.keywords \
                and len(node.value.args) == 1 and ast.unparse(node.value.func) == "pytest.skip":
            line, start = lines[node.lineno - 1], node.value.func.col_offset  # indentation first: ASCII
            lines[node.lineno - 1] = line[:start] + "raise Skip" + line[start + len("pytest.skip"):]
    return "".join(lines)


def _case_attributes_used(code: list[Statement]) -> set[str]:
    return {n.attr for s in code for n in ast.walk(s.node)
            if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "case"}


def _script_case_attributes(kit_source: str) -> set[str]:
    """What a script's `Case` (casekit's, carried as it is) offers a case: its methods and what they set."""
    case = next(n for n in _parsed(kit_source).body if isinstance(n, ast.ClassDef) and n.name == "Case")
    return {n.name for n in case.body if isinstance(n, ast.FunctionDef)} | {
        n.attr for n in ast.walk(case) if isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store)
        and isinstance(n.value, ast.Name) and n.value.id == "self"}


def _attributes(nodes: Iterable[ast.AST]) -> set[str]:
    return {n.attr for node in nodes for n in ast.walk(node) if isinstance(n, ast.Attribute)}


def without_unused_methods(source: str, attributes: set[str]) -> str:
    """`source` less the methods of its plain classes (no base class: the harness's `Case`, a
    case's recorder) that nothing calls: neither the case (`attributes`) nor a method kept. Dunder
    methods stay; classes with a base keep everything (torch calls `forward`, `__torch_function__`)."""
    classes = [n for n in ast.parse(source).body if isinstance(n, ast.ClassDef) and not n.bases]
    methods = [m for c in classes for m in c.body if isinstance(m, ast.FunctionDef)]
    kept: set[ast.FunctionDef] = set()
    used = set(attributes)
    while True:
        now = {m for m in methods if m.name.startswith("__") or m.name in used}
        if now == kept:
            break
        kept, used = now, used | _attributes(now)
    dropped = {number for m in methods if m not in kept
               for number in range(min([m.lineno] + [d.lineno for d in m.decorator_list]) - 1, _last_line(m))}
    return "\n".join(line for number, line in enumerate(source.splitlines()) if number not in dropped) + "\n"


def _support_module(node: ast.AST) -> pathlib.Path | None:
    """The module under cases/ (not a case file) an import node takes names from, if any."""
    if not isinstance(node, ast.ImportFrom) or node.level or not node.module:
        return None
    path = paths.CASES.joinpath(*node.module.split(".")).with_suffix(".py")
    return path if path.is_file() and not path.name.startswith("test_") else None


def support_sources(source: str) -> list[str]:
    """The sources of the cases/ modules `source` imports from (the property cases' programs, shared
    declarations), theirs first: their helpers are carried like the case module's own."""
    found: list[str] = []
    for statement in statements(source):
        path = _support_module(statement.node)
        if path is not None:
            text = path.read_text()
            found += [t for t in support_sources(text) + [text] if t not in found]
    return found


def line_limit(info: dict) -> int:
    """The most lines the export of a collected case should take (a property case carries more)."""
    tree = ast.parse(pathlib.Path(info["path"]).read_text())
    function = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == info["function"])
    return MAX_LINES_PROPERTY if explore_call(function) else MAX_LINES


def script_name(case_id: str) -> str:
    return "repro_" + re.sub(r"[^0-9A-Za-z_.-]+", "_", case_id.replace("/", "__")).strip("_") + ".py"


def _arguments(info: dict, fixtures: set) -> list[str]:
    arguments = []
    for name in info["argnames"]:
        if name == "case":
            arguments.append("case")
        elif name == "tmp_path":
            arguments.append("tmp_path=pathlib.Path(tempfile.mkdtemp())")
        elif name in fixtures:
            arguments.append(f"{name}={name}()")
        elif info["params"].get(name) is not None:
            arguments.append(f"{name}={info['params'][name]}")
        else:
            raise ReproError(f"cannot export {info['case']}: no literal form of its parameter {name!r}")
    return arguments


def build_script(info: dict) -> str:
    """The standalone script of a collected case (see the module docstring); a property case over
    the op database exports its example's own script (harness.tools.repro.op_example)."""
    if info.get("op_script"):
        return build_op_script(info)
    function = info["function"]
    source = with_skips_raised(with_example(pathlib.Path(info["path"]).read_text(), function,
                                                  info.get("property_example")))
    support = support_sources(source)
    everything = [s for text in support for s in statements(text)] + statements(source)
    case_nodes = [s.node for s in needed(everything, {function} | set(info["argnames"]))]
    attributes = _attributes(case_nodes)
    source = without_unused_methods(source, attributes)
    support = [without_unused_methods(text, attributes) for text in support]
    own = {s.node.name: s for s in statements(source) if isinstance(s.node, ast.FunctionDef)}  # with docstrings
    bare = [s for text in [*support, source] for s in statements(text, docstrings=False)]
    found = [own.get(function, s) if getattr(s.node, "name", None) == function else s for s in bare
             if not (s.is_import and (_imported_module(s).split(".")[0] in BLOCKED or _support_module(s.node)))]
    fixtures = {s.node.name for s in found if isinstance(s.node, ast.FunctionDef) and s.node.name in info["argnames"]
                and s.node.name != function}
    case_code = needed(found, {function} | fixtures)
    uses = {name for s in case_code for name in s.uses}
    if uses & {"pytest", "_pytest"}:
        raise ReproError(f"cannot export {info['case']}: its code calls pytest (only decorators and a "
                         "pytest.skip(reason) statement may)")
    kit_source = paths.CASEKIT.read_text()
    harness_only = _case_attributes_used(case_code) - _script_case_attributes(kit_source)
    if harness_only:
        raise ReproError(f"cannot export {info['case']}: it uses case.{sorted(harness_only)[0]}, the harness's "
                         "CaseRun's own, which a script's Case has not")
    kit = statements(without_unused_methods(kit_source, _attributes(s.node for s in case_code)), docstrings=False)
    kit_names = {name for s in kit if not s.is_import for name in s.defines} - {"need"}  # the script's own need
    kit_code = [as_block(s) for s in needed([s for s in kit if not s.is_import], {"Case"} | (uses & kit_names))]
    case_code = [s if getattr(s.node, "name", None) == function else as_block(s) for s in case_code]
    names = {name for s in case_code + kit_code for name in s.uses}
    verdict = Verdict.of(info)
    params = info["params"]
    guards = [f"if {s['condition']}:\n            raise Skip({s['reason']!r})" for s in info["skips"]]
    if "'cuda'" in params.values():
        guards.append("if not torch.cuda.is_available():\n            raise Skip('no CUDA device')")
    skips = bool(guards) or bool(uses & {"need", "assume", "Skip"})
    stdlib = {"sys", "traceback"} | ({"re"} if verdict.expected else set()) \
        | ({"importlib"} if "need" in uses else set()) \
        | ({"pathlib", "tempfile"} if "tmp_path" in info["argnames"] else set())
    imports = []
    for s in [s for s in found + kit if s.is_import]:
        module = _imported_module(s)
        if module == "__future__" or not s.defines & (names | {"torch"}):
            continue
        if isinstance(s.node, ast.Import) and module in sys.stdlib_module_names:
            stdlib.add(module)
        elif s.text not in imports:
            imports.append(s.text)
    backend = ast.literal_eval(params["backend"]) if params.get("backend") else "inductor"
    fullgraph = ast.literal_eval(params["fullgraph"]) if params.get("fullgraph") else False
    header = (f'"""`{info["case"]}`, eager against torch.compile (torch-compile-matrix, torch {info["torch"]}).\n'
              "Case.check compares outputs, dtypes and gradients; the case's asserts check what the feature does."
              + property_header(info.get("property_example")))
    parts = [header + '"""', f"import {', '.join(sorted(stdlib))}\n" +
             "\n".join(sorted(imports, key=lambda i: (i.startswith("from "), i)))]
    if verdict.expected:  # the failures the matrix declares for this case, and their matcher
        parts.append(verdict.declarations())
    if skips:
        parts.append(SKIP.strip() + ("\n" + NEED.strip() if "need" in uses else "")
                     + ("\n" + ASSUME.strip() if "assume" in uses else ""))
    parts.append("\n".join(s.text for s in kit_code))  # the comparison, carried as one block
    helpers = [s.text for s in case_code if not s.is_import and getattr(s.node, "name", None) != function]
    parts += ["\n".join(helpers)] + [s.text for s in case_code if getattr(s.node, "name", None) == function]
    call = f"{function}({', '.join(_arguments(info, fixtures))})"
    main = [
        'if __name__ == "__main__":',
        "    torch.manual_seed(0)  # as the matrix starts every case",
        f"    case, outcome = Case({backend!r}, fullgraph={fullgraph!r}), {verdict.clean!r}",
        "    try:",
        *[f"        {g}" for g in guards],
        f"        {call}",
        *(["    except Skip as reason:", "        outcome = f'skip: {reason}'"] if skips else []),
        "    except Exception as error:",
        "        traceback.print_exc(file=sys.stdout)",
        f"        outcome = {verdict.on_error()}",
        *[f"    {line}" for line in verdict.ending(can_skip=skips, figures="case.metrics")],
    ]
    text = "\n\n".join(p.strip("\n") for p in parts) + "\n\n" + "\n".join(main) + "\n"  # one blank line: short
    compile(text, script_name(info["case"]), "exec")  # a SyntaxError here is a harness bug
    return text
