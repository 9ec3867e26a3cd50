"""The project's sources that a session's outcomes depend on, and a digest of each that changes only
when its code does: the reuse keys (harness.plugin.reuse) and the committed table's staleness
(harness.report.staleness) are both built from here.

A Python source is digested as its code: comments, docstrings and blank lines taken out, by their
positions in the text (tokenize, ast), so the digest is one text's hash whatever the Python that reads
it (the rows run 3.10 and 3.11, a GPU image 3.12, whose ast dumps differ). A comment or a docstring
edited marks no row stale; any other change does, and names the file.
"""

from __future__ import annotations

import ast
import hashlib
import io
import json
import pathlib
import tokenize

from harness.core import caseid, paths

# The harness folders that run in a session (the layering keeps them from importing the others): a
# change to any other module (the report, repro, bisect) re-runs nothing.
SESSION_FOLDERS = ("core", "plugin")


def _docstring_lines(tree: ast.AST) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) \
                    and isinstance(first.value.value, str):
                lines.update(range(first.lineno, first.end_lineno + 1))
    return lines


def code_text(source: str) -> str:
    """The source less its comments, docstrings (a docstring is taken out with its lines: nothing else
    stands on them) and blank lines, each line's trailing space stripped. A text that does not parse
    is kept whole."""
    try:
        tree = ast.parse(source)
        comments = [t for t in tokenize.generate_tokens(io.StringIO(source).readline) if t.type == tokenize.COMMENT]
    except (SyntaxError, tokenize.TokenError, ValueError):
        return source
    lines = source.splitlines()
    for comment in comments:  # a comment runs to its line's end
        row, col = comment.start
        lines[row - 1] = lines[row - 1][:col]
    skip = _docstring_lines(tree)
    return "\n".join(line.rstrip() for number, line in enumerate(lines, 1) if number not in skip and line.strip())


def digest(path: pathlib.Path) -> str:
    data = path.read_bytes()
    if path.suffix == ".py":
        data = code_text(data.decode("utf-8", errors="surrogateescape")).encode("utf-8", errors="surrogateescape")
    return hashlib.sha256(data).hexdigest()[:16]


def session_modules(root: pathlib.Path = paths.ROOT) -> list[pathlib.Path]:
    """The harness modules a session's run may load: the package's own __init__ and every module of
    the session's folders (what cases import, casekit and properties, among them)."""
    package = root / "harness"
    return [package / "__init__.py", *sorted(p for folder in SESSION_FOLDERS for p in (package / folder).rglob("*.py"))]


def family_files(root: pathlib.Path = paths.ROOT) -> dict[str, pathlib.Path]:
    return caseid.family_files(root / "cases")


def case_support_files(root: pathlib.Path = paths.ROOT) -> list[pathlib.Path]:
    """What every family may import besides the harness: cases/conftest.py and the modules under
    cases/ that are not case files (the property cases' programs, cases/programs/; shared declarations)."""
    return [p for p in sorted((root / "cases").rglob("*.py")) if not p.name.startswith(caseid.TEST_PREFIX)]


PYTEST_SETTINGS = "pyproject.toml [tool.pytest.ini_options]"
PYTEST_FILES = ("pytest.ini", ".pytest.ini", "tox.ini", "setup.cfg", "conftest.py")  # also read by pytest at the root


def pytest_configuration(root: pathlib.Path = paths.ROOT) -> dict[str, str]:
    """pytest's configuration of a session's run, which changes what a case does (`filterwarnings =
    ["error"]` fails a case that warns): pyproject.toml's pytest table, and the files pytest reads at the
    checkout's root where they exist."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib
    found = {}
    pyproject = root / "pyproject.toml"
    if pyproject.is_file():
        table = tomllib.loads(pyproject.read_text(encoding="utf-8")).get("tool", {}).get("pytest", {})
        text = json.dumps(table, sort_keys=True)
        found[PYTEST_SETTINGS] = hashlib.sha256(text.encode()).hexdigest()[:16]
    found.update({name: digest(root / name) for name in PYTEST_FILES if (root / name).is_file()})
    return found


def source_digests(root: pathlib.Path = paths.ROOT) -> dict[str, str]:
    """Every source the keys hold, by its path from the checkout's root ('/'-separated), and pytest's
    configuration: the same in every clone of one commit."""
    files = [*session_modules(root), *case_support_files(root), *family_files(root).values()]
    return {**{p.relative_to(root).as_posix(): digest(p) for p in files}, **pytest_configuration(root)}


def source_changes(recorded: dict, now: dict) -> list[str]:
    """What differs between the sources a run recorded and those at hand: `changed PATH`, `added
    PATH` (not in the run's), `removed PATH` (in the run's only)."""
    return ([f"changed {p}" for p in sorted(set(recorded) & set(now)) if recorded[p] != now[p]]
            + [f"added {p}" for p in sorted(set(now) - set(recorded))]
            + [f"removed {p}" for p in sorted(set(recorded) - set(now))])
