"""The harness's folders show its runtimes, and every import points down: harness/core (each concept's
single home) imports nothing else of the harness; harness/plugin (in a session's venv), harness/report
and harness/tools (offline) import only core and their own folder; the command line
(harness/__main__.py and harness/cli) imports any of them. And no import cycle, of two modules or more.

Read from the sources with ast (every import, those inside functions too), so that a new import that
breaks a rule fails here; the checker itself is tried on a planted package first."""

from __future__ import annotations

import ast
import pathlib

from harness.core.paths import ROOT

RUNTIMES = ("plugin", "report", "tools")  # each may import core and itself, nothing else
COMMAND_LINE = ("__main__", "cli")  # over every folder: may import any


def module_name(path: pathlib.Path, root: pathlib.Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules(root: pathlib.Path, package: str) -> dict[str, pathlib.Path]:
    return {module_name(path, root): path for path in sorted((root / package).rglob("*.py"))}


def imports(path: pathlib.Path, name: str, known: dict[str, pathlib.Path], package: str) -> set[str]:
    """The package's modules that `path` (the module `name`) imports: `from P import x` is the
    module P.x where there is one, else P itself; relative imports resolved."""
    is_package = path.name == "__init__.py"
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = name.split(".")[:len(name.split(".")) - node.level + (1 if is_package else 0)]
                base = ".".join([*anchor, *([base] if base else [])])
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
        else:
            continue
        for target in targets:
            while target and target not in known:  # `import harness.core.paths` of a name inside it
                target = target.rpartition(".")[0]
            if target and target.split(".")[0] == package and target != name:
                found.add(target)
    return found


def import_graph(root: pathlib.Path, package: str = "harness") -> dict[str, set[str]]:
    known = modules(root, package)
    return {name: imports(path, name, known, package) for name, path in known.items()}


def folder(module: str) -> str:
    """`core`, `plugin`, `report`, `tools`, `cli`, `__main__`, or `` for the package's own __init__."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def upward(graph: dict[str, set[str]]) -> list[str]:
    """Every import that does not point down (or within its own runtime's folder)."""
    found = []
    for module, targets in graph.items():
        source = folder(module)
        for target in sorted(targets):
            allowed = (source in COMMAND_LINE or (source in ("core", *RUNTIMES) and folder(target) in ("core", source)))
            if not allowed:
                found.append(f"{module} -> {target}")
    return found


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected parts of more than one module (Tarjan), each a set of modules that
    import one another, directly or around a circle."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph.get(node, ()):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            part = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                part.append(member)
                if member == node:
                    break
            if len(part) > 1:
                found.append(sorted(part))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def plant(root: pathlib.Path, files: dict[str, str]) -> pathlib.Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_the_checker_finds_an_upward_import_a_cross_runtime_import_and_a_circle(tmp_path):
    root = plant(tmp_path, {
        "harness/__init__.py": "", "harness/core/__init__.py": "", "harness/plugin/__init__.py": "",
        "harness/tools/__init__.py": "",
        "harness/core/paths.py": "def helper():\n"
                                 "    from harness.plugin import recorder  # upward, inside a function\n",
        "harness/plugin/recorder.py": "",
        "harness/plugin/runner.py": "from harness.core import paths\nfrom . import isolation\n",
        "harness/plugin/isolation.py": "import harness.plugin.runner\n",  # a circle of two
        "harness/tools/bisect.py": "from harness.plugin.runner import something\nfrom harness.core.paths import ROOT\n",
        "harness/tools/sweep.py": "from harness.cli import commands\n",  # a tool reaching up into the command line
        "harness/cli/__init__.py": "", "harness/cli/commands.py": "from harness.tools import bisect\n",
        "harness/__main__.py": "from harness.tools import bisect\nfrom harness.cli import commands\n",
    })
    graph = import_graph(root)
    assert graph["harness.plugin.runner"] == {"harness.core.paths", "harness.plugin.isolation"}
    assert upward(graph) == ["harness.core.paths -> harness.plugin.recorder",
                             "harness.tools.bisect -> harness.plugin.runner",
                             "harness.tools.sweep -> harness.cli.commands"]
    assert cycles(graph) == [["harness.plugin.isolation", "harness.plugin.runner"]]


def test_every_import_of_the_harness_points_down_and_none_goes_round():
    graph = import_graph(ROOT)
    assert {folder(m) for m in graph} == {"", "core", "plugin", "report", "tools", "cli", "__main__"}
    assert ("harness.tools.targets" in graph["harness.tools.bisect"]
            and "harness.core.records" in graph["harness.report.analysis"])
    assert upward(graph) == []
    assert cycles(graph) == []
    assert not graph["harness"] and all(folder(t) == "core"
                                        for m, ts in graph.items() if folder(m) == "core" for t in ts)
