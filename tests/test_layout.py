"""docs/layout.md is true: every path its table names exists, and every module of the harness and every
benchmark is named there (by its path, or by its file name in the row of the folder it lies in)."""

import re

from harness.core.paths import ROOT

LAYOUT = (ROOT / "docs" / "layout.md").read_text()
ROWS = [line for line in LAYOUT.splitlines() if line.startswith("| `")]


def named_paths() -> list[str]:
    return [p for row in ROWS for p in re.findall(r"`([^`]+)`", row.split(" | ")[0])]


def test_every_path_the_layout_names_exists():
    missing = [p for p in named_paths() if "*" not in p and not (ROOT / p.rstrip("/")).exists()]
    assert not missing, f"docs/layout.md names what is not there: {missing}"


def test_every_module_and_benchmark_is_in_the_layout():
    named = set(named_paths())
    files = [p for p in sorted((ROOT / "harness").rglob("*.py")) if p.name != "__init__.py"]
    files += sorted((ROOT / "benchmarks").glob("*.py"))
    unnamed = []
    for path in files:
        relative = path.relative_to(ROOT).as_posix()
        folder = path.parent.relative_to(ROOT).as_posix() + "/"
        in_folder_row = any(row.split(" | ")[0].count(f"`{folder}`") and path.name in row for row in ROWS)
        if relative not in named and not in_folder_row:
            unnamed.append(relative)
    assert not unnamed, f"modules docs/layout.md does not name: {unnamed}"
