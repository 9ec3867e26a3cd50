"""results/reductions/: what a maintainer files is short, plain torch, and listed in its INDEX."""

import ast
import pathlib
import statistics

from tests.conftest import ROOT

REDUCTIONS = ROOT / "results" / "reductions"
MAX_LINES, MAX_MEDIAN = 20, 16
# What the harness's export leaves behind and a reduction must not: its case object, its API lookup,
# generated source run through exec, the names pysource-minimize invents.
HARNESS_NAMES = {"Case", "need", "exec", "eval", "OpLog", "run_with_grads"}


def scripts() -> list[pathlib.Path]:
    return sorted(REDUCTIONS.glob("*.py"))


def lines(path: pathlib.Path) -> int:
    return sum(1 for line in path.read_text().splitlines() if line.strip())


def harness_shapes(path: pathlib.Path) -> list[str]:
    tree = ast.parse(path.read_text())
    found = []
    for node in ast.walk(tree):
        name = (node.id if isinstance(node, ast.Name)
                else node.name if isinstance(node, (ast.ClassDef, ast.FunctionDef)) else None)
        if name in HARNESS_NAMES or (name or "").startswith("unique_name_"):
            found.append(f"{name} (line {node.lineno})")
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            modules = [alias.name for alias in node.names] + [getattr(node, "module", None) or ""]
            found += [f"import {m} (line {node.lineno})" for m in modules
                      if m.split(".")[0] in ("harness", "importlib", "pytest", "lightning")]
    return found


def test_every_reduction_is_short_and_their_median_shorter():
    sizes = {path.name: lines(path) for path in scripts()}
    assert sizes, "results/reductions/ holds no script"
    assert {name: n for name, n in sizes.items() if n > MAX_LINES} == {}
    assert statistics.median(sizes.values()) <= MAX_MEDIAN, sizes


def test_no_reduction_keeps_a_harness_shape():
    assert {path.name: found for path in scripts() if (found := harness_shapes(path))} == {}


def test_every_reduction_has_its_issue_text_and_an_index_row():
    index = (REDUCTIONS / "INDEX.md").read_text()
    for path in scripts():
        assert path.with_suffix(".md").exists(), f"{path.name}: no issue text beside it"
        # the issue shows the script as it is: a script edited after its sweep needs `sweep --issue` again
        assert path.read_text().strip() in path.with_suffix(".md").read_text(), \
            f"{path.name}: its issue text shows another version of it (python -m harness sweep SCRIPT --issue)"
        assert f"]({path.name})" in index, f"{path.name}: not listed in INDEX.md"


def test_the_shape_check_sees_what_an_export_leaves(tmp_path):
    planted = tmp_path / "planted.py"
    planted.write_text("import importlib\nimport torch\n\nclass Case:\n    pass\n\n"
                       "def need(name):\n    return name\n\nunique_name_0 = need('x')\nexec('y = 1')\n")
    assert harness_shapes(planted) == ["import importlib (line 1)", "Case (line 4)", "need (line 7)",
                                       "unique_name_0 (line 10)", "need (line 10)", "exec (line 11)"]
