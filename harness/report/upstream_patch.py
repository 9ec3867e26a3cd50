"""A finding's proposed change as a maintainer would send it upstream: one patch holding the fix
(fixes/SCRIPT.diff) and its regression test (fixes/test_SCRIPT.py) added to the upstream test file where
its neighbours live, into the test class findings.toml names (`upstream_test`).

The patch is against pinned files: torch/ as the main row's torch release ships it (the wheel's own
Python files, which the fix is written against) and the test file as stored at the commit findings.toml
names. Those stored copies are upstream's code, not this project's, so no checkout holds them: give
`--upstream DIR` with copies laid out DIR/COMMIT/PATH to write the patches or check them against the
files. Without them, the committed patch is still held to what it is made of: its fix is the .diff as
it is, and it adds every test of the regression test file.
"""

from __future__ import annotations

import ast
import dataclasses
import difflib
import pathlib
import shutil
import subprocess
import sys
import tempfile
import textwrap

from harness.report.results import ReportError


@dataclasses.dataclass(frozen=True)
class UpstreamTest:
    """Where a finding's regression test goes upstream."""
    file: str  # the test file, as a path in pytorch/pytorch: test/dynamo/test_modes.py
    commit: str  # the commit the stored copy of that file is at
    # The test class of its neighbours: the new tests join it, module-level helpers go before it. Empty
    # where no class there fits (each runs only on devices the fix is not about): the regression test's
    # own class goes before the file's main block.
    into: str

    def stored(self, upstream: pathlib.Path) -> pathlib.Path:
        return upstream / self.commit / self.file


@dataclasses.dataclass(frozen=True)
class RegressionTest:
    """What a regression test file brings to the upstream file: its imports, its module-level helpers
    (functions, classes other than test classes, assignments) and its test class's methods."""
    imports: tuple[ast.stmt, ...]
    helpers: tuple[tuple[str, str], ...]  # (name, source with the comments above it)
    methods: tuple[tuple[str, str], ...]  # (name, source indented as in a class body)
    header: str = ""  # its test class's `class` line and docstring, for a class of its own upstream
    bases: tuple[str, ...] = ()  # its test class's bases, as written


def _first_line(lines: list[str], node: ast.stmt) -> int:
    """The index in `lines` of a statement's first line: its decorators, and the comments right above them."""
    first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))]) - 1
    while first > 0 and lines[first - 1].strip().startswith("#"):
        first -= 1
    return first


def _with_comments_above(lines: list[str], node: ast.stmt) -> str:
    return "".join(lines[_first_line(lines, node):node.end_lineno])


def _is_version_gate(decorator: ast.expr) -> bool:
    """A skip that only keeps the test off older torch releases (the project runs it on every row):
    upstream runs it on its own main branch alone, where it is no style to gate on a version."""
    text = ast.unparse(decorator)
    return text.startswith(("unittest.skipIf(", "unittest.skipUnless(")) and (
        "__version__" in text or "hasattr(torch." in text)


def _upstream_method(lines: list[str], node: ast.stmt) -> str:
    """A test method's source with the comments above it, without its version gates."""
    text = _with_comments_above(lines, node)
    first = (node.end_lineno or node.lineno) - text.count("\n") + 1  # the line number of its first line
    gated = {number for decorator in getattr(node, "decorator_list", []) if _is_version_gate(decorator)
             for number in range(decorator.lineno, (decorator.end_lineno or decorator.lineno) + 1)}
    numbered = list(enumerate(text.splitlines(keepends=True), start=first))
    for decorator in getattr(node, "decorator_list", []):
        if _is_version_gate(decorator):  # the comments right above a gate say why it gates: they go with it
            above = decorator.lineno - 1
            while above >= first and above not in gated and numbered[above - first][1].strip().startswith("#"):
                gated.add(above)
                above -= 1
    return "".join(line for number, line in numbered if number not in gated)


def _is_test_class(node: ast.stmt) -> bool:
    return isinstance(node, ast.ClassDef) and any(ast.unparse(base).endswith("TestCase") for base in node.bases)


def _names(node: ast.stmt) -> list[str]:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [node.name]
    if isinstance(node, ast.Assign):
        return [target.id for target in node.targets if isinstance(target, ast.Name)]
    return []


def regression_test(source: str) -> RegressionTest:
    lines = source.splitlines(keepends=True)
    imports, helpers, methods = [], [], []
    header, bases = "", ()  # type: tuple[str, tuple[str, ...]]
    for node in ast.parse(source).body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            imports.append(node)
        elif _is_test_class(node):
            assert isinstance(node, ast.ClassDef)
            body = node.body[1:] if ast.get_docstring(node) else node.body
            methods += [(getattr(stmt, "name", ""), _upstream_method(lines, stmt)) for stmt in body]
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)]) - 1
            header = "".join(lines[first:body[0].lineno - 1]) if body else ""
            bases = tuple(ast.unparse(base) for base in node.bases)
        elif isinstance(node, ast.If) or (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)):
            continue  # `if __name__ == "__main__":` and the module docstring stay behind
        else:
            helpers += [(name, _with_comments_above(lines, node)) for name in _names(node)[:1]]
    return RegressionTest(tuple(imports), tuple(helpers), tuple(methods), header, bases)


def _imported(nodes) -> set[tuple[str, str, str | None]]:
    found = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            found |= {("", alias.name, alias.asname) for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            found |= {(f"{'.' * node.level}{node.module or ''}", alias.name, alias.asname) for alias in node.names}
    return found


def _used(test: RegressionTest) -> set[str]:
    """The dotted names the helpers and tests read (`torch._dynamo.config.patch` gives each of its prefixes)."""
    used = set()
    for _, text in test.helpers + test.methods:
        for node in ast.walk(ast.parse(textwrap.dedent(text))):
            if isinstance(node, (ast.Attribute, ast.Name)):
                parts = ast.unparse(node).split(".")
                if parts[0].isidentifier():
                    used |= {".".join(parts[:n]) for n in range(1, len(parts) + 1)}
    return used


def _missing_imports(test: RegressionTest, module: ast.Module, into: str) -> list[str]:
    """The regression test's imports that its helpers and tests use and the upstream file lacks, one
    statement each (its test class's base, which the tests leave behind for their neighbours', is not)."""
    have = _imported(node for node in module.body if isinstance(node, (ast.Import, ast.ImportFrom)))
    used, lines = _used(test), []
    if not into:  # its class of its own keeps its bases
        used |= {".".join(base.split(".")[:n]) for base in test.bases for n in range(1, base.count(".") + 2)}
    for node in test.imports:
        for entry in sorted(_imported([node]) - have):
            where, name, asname = entry
            if (asname or name) not in used:
                continue
            alias = f"{name} as {asname}" if asname else name
            lines.append(f"from {where} import {alias}\n" if where else f"import {alias}\n")
    return lines


FIRST_PARTY = ("torch", "functorch", "torchgen")  # what pytorch/pytorch's import sorting puts last, its own


def _import_key(node_or_line: ast.Import | ast.ImportFrom | str) -> tuple[int, bool, str]:
    """Where an import sorts, as usort keeps PyTorch's files: the standard library's, then other packages',
    then torch's own; within each, `import` statements before `from` ones, then by module regardless of case."""
    node = ast.parse(node_or_line).body[0] if isinstance(node_or_line, str) else node_or_line
    if isinstance(node, ast.Import):
        module = node.names[0].name
    else:
        assert isinstance(node, ast.ImportFrom)
        module = f"{'.' * node.level}{node.module or ''}"
    top = module.split(".")[0]
    category = 0 if top in sys.stdlib_module_names else 2 if top in FIRST_PARTY or not top else 1
    return category, isinstance(node, ast.ImportFrom), module.lower()


def _from_statement(module: str, names: list[str]) -> str:
    """`from MODULE import NAMES` as PyTorch's formatter writes it: names sorted regardless of case, on one
    line where it fits in 88 characters, else one a line in parentheses."""
    names = sorted(set(names), key=lambda name: (name.lower(), name))
    line = f"from {module} import {', '.join(names)}\n"
    if len(line) <= 89:
        return line
    return f"from {module} import (\n" + "".join(f"    {name},\n" for name in names) + ")\n"


def _with_imports(lines: list[str], imports: list[ast.Import | ast.ImportFrom], added: list[str]) -> list[str]:
    """`lines` with `added`: a name from a module the file already imports from joins that statement;
    another import goes before the first of the file's top-level `imports` that sorts after it."""
    inserts: dict[int, list[str]] = {}
    merged: dict[int, ast.ImportFrom] = {}
    more: dict[int, list[str]] = {}
    last = max((node.end_lineno or node.lineno for node in imports), default=0)
    for line in added:
        new = ast.parse(line).body[0]
        same = next((node for node in imports if isinstance(new, ast.ImportFrom) and isinstance(node, ast.ImportFrom)
                     and (node.module, node.level) == (new.module, new.level)
                     and not any(alias.asname for alias in node.names + new.names)), None)
        if same is not None:
            assert isinstance(same, ast.ImportFrom) and isinstance(new, ast.ImportFrom)
            merged[same.lineno - 1] = same
            more.setdefault(same.lineno - 1, []).extend(alias.name for alias in new.names)
            continue
        after = next((node for node in imports if _import_key(node) > _import_key(line)), None)
        inserts.setdefault(after.lineno - 1 if after else last, []).append(line)
    out, index = [], 0
    while index <= len(lines):
        out += inserts.get(index, [])
        if index in merged:
            node = merged[index]
            out.append(_from_statement(f"{'.' * node.level}{node.module or ''}",
                                       [alias.name for alias in node.names] + more[index]))
            index = node.end_lineno or node.lineno
            continue
        out += lines[index:index + 1]
        index += 1
    return out


def with_regression_test(upstream_text: str, test_source: str, into: str) -> str:
    """The upstream test file with the regression test in it: missing imports after its last top-level
    import, helpers before the class `into`, and the test methods at that class's end."""
    test = regression_test(test_source)
    module = ast.parse(upstream_text)
    lines = upstream_text.splitlines(keepends=True)
    target: ast.ClassDef | ast.If | None
    if into:
        target = next((node for node in module.body if isinstance(node, ast.ClassDef) and node.name == into), None)
        if target is None:
            raise ReportError(f"the upstream test file has no class {into}")
    else:  # a class of its own, before the main block: its helpers go before it as before a neighbour's
        target = next((node for node in module.body if isinstance(node, ast.If)
                       and "__name__" in ast.unparse(node.test)), None)
        if target is None:
            raise ReportError("the upstream test file has no `if __name__ == \"__main__\":` to put a class before")
        if any(isinstance(node, ast.ClassDef) and node.name == test.header.split("(")[0].split()[-1]
               for node in module.body):
            raise ReportError(f"the upstream test file already has a class {test.header.split('(')[0].split()[-1]}")
    defined = {name: ast.unparse(node) for node in module.body for name in _names(node)}
    helpers = []
    for name, text in test.helpers:
        if name in defined:
            if defined[name] != ast.unparse(ast.parse(text).body[0]):
                raise ReportError(f"the upstream test file defines {name} otherwise than the regression test")
            continue  # the file has it already, the same
        helpers.append(text + "\n\n")
    clash = {name for name, _ in test.methods} & {getattr(stmt, "name", None) for stmt in target.body} if into else ()
    if clash:
        raise ReportError(f"{into} already has {', '.join(sorted(clash))}")
    imports = [node for node in module.body if isinstance(node, (ast.Import, ast.ImportFrom))
               and node.lineno < target.lineno]
    class_start = _first_line(lines, target)
    class_end = target.end_lineno or target.lineno
    methods = "".join("\n" + text for _, text in test.methods)
    # the class first: the imports' insertions move every line after them
    if into:
        lines = lines[:class_start] + helpers + lines[class_start:class_end] + [methods] + lines[class_end:]
    else:
        own = test.header + methods.removeprefix("\n") + "\n\n"
        lines = lines[:class_start] + helpers + [own] + lines[class_start:]
    return "".join(_with_imports(lines, imports, _missing_imports(test, module, into)))


def header(upstream_test: UpstreamTest, torch_version: str, torch_commit: str) -> str:
    return (f"Against pytorch/pytorch: torch/ as released in {torch_version} (git {torch_commit}),\n"
            f"{upstream_test.file} as at {upstream_test.commit}.\n\n")


def with_diff(text: str, diff: str, name: str) -> str:
    """`text`, the file `name`, with `diff` applied (`git apply`, no fuzz: every line of context as it is)."""
    with tempfile.TemporaryDirectory() as tree:
        root = pathlib.Path(tree)
        (root / name).parent.mkdir(parents=True)
        (root / name).write_text(text, encoding="utf-8")
        (root / "changes.diff").write_text(diff, encoding="utf-8")
        done = subprocess.run(["git", "apply", "changes.diff"], cwd=root, capture_output=True, text=True)
        if done.returncode != 0:
            raise ReportError(f"the neighbours' changes do not apply to {name}: {done.stderr.strip()}")
        return (root / name).read_text(encoding="utf-8")


def patch_text(fix_diff: str, test_source: str, upstream_test: UpstreamTest, upstream_text: str,
               torch_version: str, torch_commit: str, neighbours: str = "") -> str:
    """The one patch: a header naming what it is against, the fix, then the test in its upstream file,
    with what the fix changes in its neighbours' expectations (`neighbours`, a diff of that file), if any."""
    changed = with_regression_test(with_diff(upstream_text, neighbours, upstream_test.file) if neighbours
                                   else upstream_text, test_source, upstream_test.into)
    test_diff = "".join(difflib.unified_diff(upstream_text.splitlines(keepends=True), changed.splitlines(keepends=True),
                                             f"a/{upstream_test.file}", f"b/{upstream_test.file}"))
    return header(upstream_test, torch_version, torch_commit) + fix_diff + test_diff


def made_of(patch: str, fix_diff: str, test_source: str, neighbours: str = "") -> list[str]:
    """What the committed patch lacks of its parts: the fix as it is, a `def` of every regression test,
    and every line the neighbours' changes add."""
    problems = [] if fix_diff in patch else ["its fix is not fixes/SCRIPT.diff as it is"]
    added = {line[1:].strip() for line in patch.splitlines() if line.startswith("+")}
    if any(line[1:].strip() not in added for line in neighbours.splitlines()
           if line.startswith("+") and not line.startswith("+++")):
        problems.append("it lacks what fixes/SCRIPT.neighbours.diff changes")
    problems += [f"it does not add {name}" for name, _ in regression_test(test_source).methods
                 if name.startswith("test") and not any(line.startswith(f"def {name}(") for line in added)]
    return problems


def applies(patch: pathlib.Path, torch_dir: pathlib.Path, upstream_file: pathlib.Path, test_file: str) -> str | None:
    """Why `patch` does not apply to a tree of the files it touches (torch/ from `torch_dir`, the
    installed package, and `test_file` from its stored copy), by `git apply --check`; None when it does."""
    with tempfile.TemporaryDirectory() as tree:
        root = pathlib.Path(tree)
        for line in patch.read_text(encoding="utf-8").splitlines():
            if line.startswith("--- a/torch/"):
                name = line[len("--- a/"):]
                (root / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(torch_dir.parent / name, root / name)
        (root / test_file).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(upstream_file, root / test_file)
        done = subprocess.run(["git", "apply", "--check", str(patch.resolve())], cwd=root, capture_output=True,
                              text=True)
        return None if done.returncode == 0 else (done.stderr.strip() or f"git apply exited {done.returncode}")


@dataclasses.dataclass(frozen=True)
class ReleasedTorch:
    """An installed torch whose torch/ files are a release's own: where they lie, its version and commit."""
    package: pathlib.Path  # the torch folder
    version: str
    commit: str


def released_torch(python: str) -> ReleasedTorch:
    """The torch `python` would import, found without importing it (its version.py says which release)."""
    done = subprocess.run([python, "-c", "import importlib.util as u; print(u.find_spec('torch').origin)"],
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise ReportError(f"{python} has no torch to hold the patches' torch/ files to")
    package = pathlib.Path(done.stdout.strip()).parent
    said = {}
    for line in (package / "version.py").read_text(encoding="utf-8").splitlines():
        name, _, value = line.partition("=")
        if name.strip() in ("__version__", "git_version"):
            said[name.strip()] = value.split("#")[0].strip().strip("'\"")
    return ReleasedTorch(package, said.get("__version__", "?").split("+")[0], said.get("git_version", "?")[:7])


def check_patch(finding, upstream: pathlib.Path | None, torch: ReleasedTorch | None, write: bool) -> list[str]:
    """What is wrong with a finding's committed patch (fixes/SCRIPT.patch), or, with `write`, the patch
    written anew. Its parts are always checked; against the stored test file and the release's torch/ when
    `upstream` holds the file and `torch` is given: written the same, and applying (`git apply --check`)."""
    where, fix = finding.upstream_test, finding.fix_path
    if where is None or fix is None:
        return []
    test_source = finding.regression_test_path.read_text(encoding="utf-8")
    fix_diff = fix.read_text(encoding="utf-8")
    neighbours = finding.neighbours_path.read_text(encoding="utf-8") if finding.neighbours_path else ""
    stored = where.stored(upstream) if upstream else None
    if stored is not None and stored.is_file() and torch is not None:
        made = patch_text(fix_diff, test_source, where, stored.read_text(encoding="utf-8"), torch.version, torch.commit,
                          neighbours)
        if write:
            finding.patch_path.write_text(made, encoding="utf-8")
        elif not finding.patch_path.is_file() or finding.patch_path.read_text(encoding="utf-8") != made:
            return [f"{finding.patch_path.name} differs from the one made from its parts and "
                    f"{where.file}@{where.commit[:7]}"]
        why = applies(finding.patch_path, torch.package, stored, where.file)
        if why:
            return [f"{finding.patch_path.name} does not apply: {why}"]
    elif write:
        return [f"{finding.patch_path.name} not written: no stored copy of {where.file} at {where.commit[:7]} under "
                f"{upstream}" if upstream else f"{finding.patch_path.name} not written: no --upstream folder"]
    if not finding.patch_path.is_file():
        return [f"{finding.patch_path.name} is missing"]
    return [f"{finding.patch_path.name}: {problem}"
            for problem in made_of(finding.patch_path.read_text(encoding="utf-8"), fix_diff, test_source, neighbours)]
