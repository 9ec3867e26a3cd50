"""The project's sources that a session's outcomes depend on, and a digest of each that changes only
when its code does: the reuse keys (harness.plugin.reuse) and the committed table's staleness
(harness.report.staleness) are both built from here.

What a family depends on is read from the import graph (ast: every import, those inside functions too):
the sources its case file, cases/conftest.py and the harness's pytest plugin import, directly or through
others, and the modules a session runs by name (SESSION_ENTRY_POINTS). A module the driver alone uses
(nox's steps, the venvs' build) or the report's is in no family's key, and a program one family imports
is in that family's alone.

A Python source is digested as its code: comments, docstrings and blank lines taken out, by their
positions in the text (tokenize, ast), so the digest is one text's hash whatever the Python that reads
it (the rows run 3.10 and 3.11, a GPU image 3.12, whose ast dumps differ). A comment or a docstring
edited marks no row stale; any other change does, and names the file.
"""

from __future__ import annotations

import ast
import dataclasses
import hashlib
import io
import json
import pathlib
import sys
import tokenize

from harness.core import caseid, paths

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10
    import tomli as tomllib

# The harness folders that run in a session (the layering keeps them from importing the others): a
# change to any other module (the report, repro, bisect) re-runs nothing.
SESSION_FOLDERS = ("core", "plugin")
# What every family's cases run under, besides their own file: the plugin (`-p harness.plugin`), the
# cases' conftest, and the module a session runs by name for its environment record.
SESSION_ENTRY_POINTS = ("harness/__init__.py", "harness/plugin/__init__.py", "cases/conftest.py",
                        "harness/plugin/environment.py")


def _docstring_lines(tree: ast.AST) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) \
                    and isinstance(first.value.value, str):
                lines.update(range(first.lineno, (first.end_lineno or first.lineno) + 1))
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


def _module_paths(root: pathlib.Path) -> dict[str, pathlib.Path]:
    """The project's importable modules by dotted name: the harness package and the cases' modules (as
    the cases import them: `programs.recompile`, `shared_declarations`; and as `cases.programs...`)."""
    found = {}
    for path in sorted((root / "harness").rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    for path in sorted((root / "cases").rglob("*.py")):
        parts = list(path.relative_to(root / "cases").with_suffix("").parts)
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        if name:
            found[name] = found[f"cases.{name}"] = path
    return found


def _imported(path: pathlib.Path, known: dict[str, pathlib.Path]) -> set[pathlib.Path]:
    """The project's modules that `path` imports (a name inside a module counts as the module)."""
    try:
        tree = ast.parse(path.read_bytes())
    except (SyntaxError, ValueError):  # collected as an error record; it imports nothing here
        return set()
    package = path.parent
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: resolved against the file's folder
                anchor = package
                for _ in range(node.level - 1):
                    anchor = anchor.parent
                prefix = ".".join(anchor.relative_to(known_root(known)).parts)
                base = ".".join(filter(None, [prefix, base]))
            names = [f"{base}.{alias.name}" for alias in node.names] + [base]
        else:
            continue
        for name in names:
            while name and name not in known:
                name = name.rpartition(".")[0]
            if name:
                found.add(known[name])
    return found


def known_root(known: dict[str, pathlib.Path]) -> pathlib.Path:
    return known["harness"].parent.parent


def import_closure(starts, root: pathlib.Path = paths.ROOT) -> set[pathlib.Path]:
    """Every project source reached from `starts` (paths) by imports, `starts` included."""
    known = _module_paths(root)
    seen, todo = set(), [pathlib.Path(p) for p in starts]
    while todo:
        path = todo.pop()
        if path in seen or not path.is_file():
            continue
        seen.add(path)
        todo.extend(_imported(path, known) - seen)
    return seen


def family_sources(root: pathlib.Path = paths.ROOT) -> dict[str, list[str]]:
    """Each family's sources (paths from the checkout's root, '/'-separated), from the import graph: what
    its case file and the session's entry points reach, and pytest's configuration."""
    entry = [root / p for p in SESSION_ENTRY_POINTS]
    shared = import_closure(entry, root)
    found = {}
    for family, path in family_files(root).items():
        reached = shared | import_closure([path], root)
        found[family] = sorted({p.relative_to(root).as_posix() for p in reached} | set(pytest_configuration(root)))
    return found


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


@dataclasses.dataclass(frozen=True)
class SourceChange:
    kind: str  # "changed", "added" (not in the run's sources), "removed" (in the run's only)
    path: str

    @property
    def line(self) -> str:
        return f"{self.kind} {self.path}"


def changed_sources(recorded: dict, now: dict) -> list[SourceChange]:
    """What differs between the sources a run recorded and those at hand."""
    return ([SourceChange("changed", p) for p in sorted(set(recorded) & set(now)) if recorded[p] != now[p]]
            + [SourceChange("added", p) for p in sorted(set(now) - set(recorded))]
            + [SourceChange("removed", p) for p in sorted(set(recorded) - set(now))])


def source_changes(recorded: dict, now: dict) -> list[str]:
    """changed_sources, each as `changed PATH`, `added PATH` or `removed PATH`."""
    return [change.line for change in changed_sources(recorded, now)]
