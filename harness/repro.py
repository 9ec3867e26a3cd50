"""One case as one standalone script for an upstream issue: `python -m harness repro CASE_ID`.

The script is built from the harness's own sources, so it cannot drift from what the matrix runs:

1. The case is found by a collect-only pytest run in the session's environment (this module is
   loaded there as a plugin and dumps the matching item: parameters, their indices, markers).
2. The script is, in order: a header docstring; a small stand-in for the part of pytest that case
   code uses (`mark.*`, `param`, `skip`, `raises`, `fixture`); the part of harness/casekit.py the
   case needs (CaseRun.check and what it calls); the shared parameter lists of cases/conftest.py;
   the case module without its other test functions and the helpers only they use; the outcome
   rules of harness/plugin.py (copied as source text); and a `main` that runs the one test
   function with the collected parameters and prints `OUTCOME: ...` as its last line.
3. It runs in the session's venv with pytest and the harness made unimportable, and the result
   is printed as a Markdown block ready for an issue.

Exit status of the generated script (`SCRIPT_EXIT_CODES`): 0 pass or fixed (eager and compiled
agree), 1 fail, 3 known (the declared upstream bug reproduced), 4 error (the script could not set
the case up), 125 skip (this torch lacks an API; what `git bisect run` reads as "cannot test").
"""

from __future__ import annotations

import ast
import dataclasses
import difflib
import importlib.util
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap

from harness.report import upstream_link

ROOT = pathlib.Path(__file__).resolve().parent.parent
CASES_DIR = ROOT / "cases"
FALLBACK_SESSION = "cpu_torch213"
DUMP_ENV = "HARNESS_REPRO_DUMP"  # set: this module, loaded as a pytest plugin, dumps the collection
CASE_ENV = "HARNESS_REPRO_CASE"

SCRIPT_EXIT_CODES = {"pass": 0, "fixed": 0, "fail": 1, "known": 3, "error": 4, "skip": 125}
OUTCOME_LINE = re.compile(r"^OUTCOME: (\w+)(?: \((.*)\))?\s*$", re.M)
# What the pytest stand-in offers; a case using anything else cannot be exported.
SHIM_ATTRIBUTES = {"mark", "param", "skip", "fail", "raises", "fixture", "importorskip"}
# Outcome rules copied from harness/plugin.py into every script.
PLUGIN_RULES = ("_qualname", "_exception_chain", "_first_line", "_is_instance_named",
                "match_upstream_bug", "_upstream_refs")
# Environment that must not leak from a nox session or a surrounding pytest into the runs.
DROP_ENV = ("HARNESS_SESSION", "HARNESS_RESULTS_DIR", "PYTEST_ADDOPTS", "PYTEST_PLUGINS")


class ReproError(Exception):
    """The case cannot be exported or run (exit status 1)."""


class UnknownCase(ReproError):
    """No collected case has this id (exit status 2); `closest` holds the nearest ids."""

    def __init__(self, case_id: str, closest: list[str]):
        self.case_id, self.closest = case_id, closest
        lines = [f"unknown case {case_id!r}"]
        if closest:
            lines.append("closest case ids:")
            lines += [f"  {c}" for c in closest]
        super().__init__("\n".join(lines))


# --- the collect-only plugin (runs inside the session's environment) -------------------------

def pytest_configure(config):
    if os.environ.get(DUMP_ENV):
        config.addinivalue_line("markers", "upstream_bug(ref, raises, match=None): a known upstream bug")


def pytest_collection_finish(session):
    target = os.environ.get(DUMP_ENV)
    if not target:
        return
    from harness.plugin import case_identity

    wanted = set(filter(None, os.environ.get(CASE_ENV, "").split("\n")))
    ids, found = [], {}
    for item in session.items:
        identity = case_identity(item)
        ids.append(identity["case"])
        if identity["case"] in wanted and identity["case"] not in found:
            found[identity["case"]] = _describe_item(item, identity)
    pathlib.Path(target).write_text(json.dumps({"ids": ids, "cases": found, **_versions()}, indent=1))


def _versions() -> dict:
    import importlib.metadata
    import platform

    import torch

    found = {"torch": torch.__version__, "python": platform.python_version()}
    for name in ("lightning", "pytorch-lightning"):
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            found[name] = None
    return found


def _literal(value):
    """`repr(value)` where the script can rebuild the value from it, else None."""
    import torch

    if isinstance(value, torch.dtype):
        return repr(value)  # 'torch.bfloat16'
    try:
        text = repr(value)
        same = ast.literal_eval(text) == value and type(ast.literal_eval(text)) is type(value)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None
    return text if same else None


def _jsonable(value):
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, type):
        return value.__name__
    return repr(value)


def _same(a, b) -> bool:
    try:
        return a is b or (type(a) is type(b) and bool(a == b))
    except Exception:  # values without a plain equality
        return False


def _source_index(item, name: str, collected: dict) -> int | None:
    """The position of the item's value of `name` in the list it came from: the function's
    own parametrize mark, else PARAMETERS of a conftest (what cases/conftest.py parametrizes
    with). pytest's callspec.indices does not say: it renumbers direct parameters."""
    from _pytest.mark.structures import ParameterSet

    def position(names, entries):
        for index, entry in enumerate(entries):
            values = entry.values if isinstance(entry, ParameterSet) else (entry if len(names) > 1 else (entry,))
            if len(values) == len(names) and all(_same(v, collected[n]) for n, v in zip(names, values)
                                                 if n in collected):
                return index
        return None

    for marker in item.iter_markers("parametrize"):
        argnames = marker.args[0] if marker.args else marker.kwargs.get("argnames")
        entries = marker.args[1] if len(marker.args) > 1 else marker.kwargs.get("argvalues", ())
        names = [n.strip() for n in argnames.split(",")] if isinstance(argnames, str) else list(argnames)
        if name in names:
            return position(names, list(entries))
    for plugin in item.config.pluginmanager.get_plugins():
        shared = getattr(plugin, "PARAMETERS", None)
        if str(getattr(plugin, "__file__", "")).endswith("conftest.py") and isinstance(shared, dict) \
                and name in shared:
            return position([name], list(shared[name]))
    return None


def _describe_item(item, identity: dict) -> dict:
    import inspect

    callspec = getattr(item, "callspec", None)
    params = {}
    collected = dict(callspec.params) if callspec else {}
    for name, value in collected.items():
        params[name] = {"literal": _literal(value), "index": _source_index(item, name, collected),
                        "shown": repr(value)}
    bugs = []
    for marker in item.iter_markers("upstream_bug"):
        args = list(marker.args)
        bugs.append({
            "ref": args[0] if args else marker.kwargs.get("ref"),
            "raises": _jsonable(marker.kwargs.get("raises") or (args[1] if len(args) > 1 else None)),
            "match": marker.kwargs.get("match"),
        })
    return {
        "case": identity["case"], "family": identity["family"], "params_record": identity["params"],
        "nodeid": item.nodeid, "path": str(item.path), "name": item.name,
        "function": getattr(item, "originalname", None) or item.name.split("[")[0],
        "argnames": list(inspect.signature(item.function).parameters),
        "params": params, "upstream_bugs": bugs,
    }


# --- collecting (from the harness's process) ---------------------------------------------------

def clean_env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in DROP_ENV}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env.update(extra)
    return env


def tail(text: str, lines: int = 20) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def collect(python: str | os.PathLike, case_id: str, timeout: float = 600) -> dict:
    """Collect cases/ with `python` (an interpreter with torch and pytest) and describe `case_id`
    under "case"; UnknownCase with the closest ids when it is not there."""
    collected = collect_cases(python, [case_id], timeout)
    if case_id not in collected["cases"]:
        raise UnknownCase(case_id, closest_ids(case_id, collected["ids"]))
    return {**collected, "case": collected["cases"][case_id]}


def collect_cases(python: str | os.PathLike, case_ids: list[str], timeout: float = 600) -> dict:
    """One collect-only run: every case id ("ids"), the description of each of `case_ids`
    that exists ("cases"), and the versions of torch, Lightning and Python."""
    with tempfile.TemporaryDirectory(prefix="harness-repro-") as tmp:
        dump = pathlib.Path(tmp) / "collected.json"
        command = [str(python), "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                   "-p", "no:harness.plugin", "-p", "harness.repro", str(CASES_DIR)]
        env = clean_env(**{DUMP_ENV: str(dump), CASE_ENV: "\n".join(case_ids)})
        try:
            done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise ReproError(f"collecting the cases with {python} failed: {exc}") from exc
        if not dump.exists():
            raise ReproError(f"collecting the cases with {python} failed (exit {done.returncode}):\n"
                             f"{tail(done.stdout + done.stderr)}")
        return json.loads(dump.read_text())


def closest_ids(case_id: str, ids: list[str], n: int = 5) -> list[str]:
    close = difflib.get_close_matches(case_id, ids, n=n, cutoff=0.6)
    if len(close) < n:  # fill up with the nearest ones, however far
        close += [c for c in difflib.get_close_matches(case_id, ids, n=n, cutoff=0.0) if c not in close]
    return close[:n]


# --- building the script ------------------------------------------------------------------------

@dataclasses.dataclass
class _Stmt:
    """One top-level statement of a source file: its text and the names it defines and uses."""

    text: str
    defines: set
    uses: set
    kind: str  # "import", "def" (function, class, assignment) or "other" (always kept)
    node: ast.AST


def _statements(source: str, keep_comments: bool = True) -> list[_Stmt]:
    lines = source.splitlines()
    tree = ast.parse(source)
    out = []
    for position, node in enumerate(tree.body):
        if position == 0 and isinstance(node, ast.Expr) and isinstance(getattr(node, "value", None), ast.Constant) \
                and isinstance(node.value.value, str):
            continue  # the module docstring
        start = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])]) - 1
        while keep_comments and start > 0 and lines[start - 1].lstrip().startswith("#") \
                and not lines[start - 1].lstrip().startswith("# ---"):
            start -= 1  # the comment right above belongs to the statement
        text = "\n".join(lines[start:node.end_lineno])
        uses = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            defines = {(a.asname or a.name).split(".")[0] for a in node.names}
            out.append(_Stmt(text, defines, set(), "import", node))
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.append(_Stmt(text, {node.name}, uses - {node.name} | _decorator_names(node), "def", node))
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            defines = {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)
                       and isinstance(n.ctx, ast.Store)}
            kind = "def" if defines else "other"  # `torch.x.y = ...`: a side effect, always kept
            out.append(_Stmt(text, defines, uses - defines if not isinstance(node, ast.AugAssign) else uses,
                             kind, node))
        else:
            defines = {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
            out.append(_Stmt(text, defines, uses, "other", node))
    return out


def _decorator_names(node) -> set:
    return {n.id for d in getattr(node, "decorator_list", []) for n in ast.walk(d) if isinstance(n, ast.Name)}


def _prune(statements: list[_Stmt], roots: set) -> list[_Stmt]:
    """The statements that define `roots` and whatever those use, transitively (source order);
    statements that define nothing by name (an `if` at module level) are kept."""
    needed, kept = set(roots), set()
    for stmt in statements:
        if stmt.kind == "other":
            needed |= stmt.uses
    changed = True
    while changed:
        changed = False
        for index, stmt in enumerate(statements):
            if index not in kept and (stmt.kind == "other" or stmt.defines & needed):
                kept.add(index)
                needed |= stmt.uses
                changed = True
    return [s for i, s in enumerate(statements) if i in kept]


def _function_source(path: pathlib.Path, names) -> str:
    """The source text of the top-level functions `names` of `path`, in file order."""
    statements = _statements(path.read_text(), keep_comments=False)
    found = [s for s in statements if s.kind == "def" and s.defines & set(names)]
    missing = set(names) - {n for s in found for n in s.defines}
    if missing:
        raise ReproError(f"{path} no longer defines {', '.join(sorted(missing))}")
    return "\n\n\n".join(s.text for s in found)


def _is_fixture(node) -> bool:
    for decorator in getattr(node, "decorator_list", []):
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        if isinstance(target, ast.Attribute) and target.attr == "fixture":
            return True
    return False


def _case_module(info: dict) -> tuple[list[_Stmt], set]:
    """The case module's statements the one test function needs, and the names it imports
    from harness.casekit."""
    path = pathlib.Path(info["path"])
    statements = _statements(path.read_text())
    from_casekit, kept = set(), []
    for stmt in statements:
        node = stmt.node
        if isinstance(node, ast.Import) and any(a.name.split(".")[0] in ("pytest", "_pytest", "harness")
                                                for a in node.names):
            if any(a.name.split(".")[0] != "pytest" or a.asname not in (None, "pytest") for a in node.names):
                raise ReproError(f"cannot export {path.name}: it imports {stmt.text.strip()!r}")
            continue  # `import pytest`: the stand-in takes its place
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in ("pytest", "_pytest", "harness"):
            if node.module != "harness.casekit":
                raise ReproError(f"cannot export {path.name}: it imports {stmt.text.strip()!r}")
            from_casekit |= {a.name for a in node.names if a.asname in (None, a.name)}
            if any(a.asname not in (None, a.name) for a in node.names):
                raise ReproError(f"cannot export {path.name}: renamed import {stmt.text.strip()!r}")
            continue
        kept.append(stmt)
    function = info["function"]
    if not any(s.kind == "def" and function in s.defines for s in kept):
        raise ReproError(f"{path.name} has no top-level function {function}")
    # Other test functions go; the module-level fixtures the function asks for stay.
    fixtures = {s.node.name for s in kept if isinstance(s.node, ast.FunctionDef) and _is_fixture(s.node)}
    kept = [s for s in kept if not (s.kind == "def" and isinstance(s.node, (ast.FunctionDef, ast.AsyncFunctionDef))
                                    and s.node.name.startswith("test_") and s.node.name != function)]
    unknown = [a for a in info["argnames"]
               if a not in info["params"] and a not in ("case", "tmp_path") and a not in fixtures]
    if unknown:
        raise ReproError(f"cannot export {info['case']}: the script cannot provide {', '.join(unknown)}")
    roots = {function, "pytestmark"} | (set(info["argnames"]) & fixtures)
    kept = _prune(kept, roots)
    used = {n.attr for s in kept for n in ast.walk(s.node)
            if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "pytest"}
    if used - SHIM_ATTRIBUTES:
        raise ReproError(f"cannot export {info['case']}: it uses pytest.{', pytest.'.join(sorted(used - SHIM_ATTRIBUTES))}, "
                         f"which the script's pytest stand-in lacks")
    nested = [n for s in kept for n in ast.walk(s.node) if isinstance(n, (ast.Import, ast.ImportFrom))
              and any((getattr(n, "module", None) or a.name).split(".")[0] in ("pytest", "_pytest", "harness")
                      for a in n.names)]
    if nested:
        raise ReproError(f"cannot export {info['case']}: a function imports pytest or the harness itself")
    return kept, from_casekit


def _casekit(roots: set) -> list[_Stmt]:
    statements = [s for s in _statements((ROOT / "harness" / "casekit.py").read_text())
                  if not (isinstance(s.node, ast.ImportFrom) and s.node.module == "__future__")
                  and not (isinstance(s.node, ast.Import) and s.node.names[0].name == "pytest")]
    return _prune(statements, roots | {"CaseRun", "HarnessError"})


def _shared_parameters() -> list[_Stmt]:
    statements = [s for s in _statements((CASES_DIR / "conftest.py").read_text())
                  if not (isinstance(s.node, ast.Import) and s.node.names[0].name == "pytest")]
    return _prune(statements, {"PARAMETERS"})


def _merge_sections(sections: list[tuple[str, list[_Stmt]]]) -> list[tuple[str, list[_Stmt]]]:
    """Drop a later definition identical to an earlier one (NO_GPU in conftest and a case
    module); refuse two different definitions of one name (the later would win)."""
    seen: dict[str, str] = {}  # name -> ast.dump of its definition
    merged = []
    for title, statements in sections:
        kept = []
        for stmt in statements:
            if stmt.kind != "def":
                kept.append(stmt)
                continue
            clashes = [n for n in stmt.defines if n in seen]
            if clashes and all(seen[n] == ast.dump(stmt.node) for n in clashes):
                continue
            if clashes:
                raise ReproError(f"cannot export: {', '.join(sorted(clashes))} defined differently by the "
                                 f"harness and the case module (rename it in the case)")
            for name in stmt.defines:
                seen[name] = ast.dump(stmt.node)
            kept.append(stmt)
        merged.append((title, kept))
    return merged


def _docstring(text: str) -> str:
    return '"""' + text.replace("\\", "\\\\").replace('"""', '\\"\\"\\"') + '"""'


def script_name(case_id: str) -> str:
    return "repro_" + re.sub(r"[^0-9A-Za-z_.-]+", "_", case_id.replace("/", "__")).strip("_") + ".py"


def expected_text(info: dict) -> str:
    text = ("eager and compiled runs agree: same outputs, output dtypes and gradients "
            "(the script prints `OUTCOME: pass`)")
    bugs = info["upstream_bugs"]
    if bugs:
        declared = "; ".join(f"{b['ref']}: raises {b['raises']}" + (f" matching `{b['match']}`" if b["match"] else "")
                             for b in bugs)
        text += (f". Declared upstream bug: {declared}. Failing that way is `OUTCOME: known`; "
                 f"passing means the bug no longer reproduces (`OUTCOME: fixed`)")
    return text


SHIM = r'''
# --- a stand-in for the little of pytest the case code uses -------------------------------------

class _Skipped(Exception):
    """pytest.skip(): the case cannot run on this torch (the reason is the message)."""


class _Mark:
    """pytest.mark.NAME(*args, **kwargs): applied to a function, it is stored on it."""

    def __init__(self, name, args=(), kwargs=None):
        self.name, self.args, self.kwargs = name, tuple(args), dict(kwargs or {})

    def __call__(self, *args, **kwargs):
        if len(args) == 1 and not kwargs and (_inspect.isclass(args[0]) or (
                callable(args[0]) and getattr(args[0], "__name__", "") != "<lambda>")):
            args[0].pytestmark = _marks(args[0]) + [self]
            return args[0]
        return _Mark(self.name, self.args + args, {**self.kwargs, **kwargs})


class _MarkGenerator:
    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        return _Mark(name)


class _Param:
    def __init__(self, values, marks, id):
        self.values, self.id = values, id
        self.marks = list(marks) if isinstance(marks, (list, tuple)) else [marks]


def _marks(obj):
    marks = getattr(obj, "pytestmark", [])
    return list(marks) if isinstance(marks, (list, tuple)) else [marks]


def _skip(reason="", *, allow_module_level=False, msg=None):
    raise _Skipped(reason or msg or "")


_skip.Exception = _Skipped


def _fail(reason="", pytrace=True, msg=None):
    raise AssertionError(reason or msg)


def _importorskip(modname, minversion=None, reason=None):
    try:
        return _importlib.import_module(modname)
    except ImportError:
        raise _Skipped(reason or f"could not import {modname!r}") from None


class _RaisesInfo:
    value = type = None


class _Raises:
    def __init__(self, expected, match=None):
        self.expected, self.match, self.info = expected, match, _RaisesInfo()

    def __enter__(self):
        return self.info

    def __exit__(self, kind, value, tb):
        if kind is None:
            raise AssertionError(f"DID NOT RAISE {self.expected}")
        if not issubclass(kind, self.expected):
            return False
        if self.match is not None and not _re.search(self.match, str(value)):
            raise AssertionError(f"Regex {self.match!r} does not match {str(value)!r}")
        self.info.value, self.info.type = value, kind
        return True


def _raises(expected, *args, match=None, **kwargs):
    if not args:
        return _Raises(expected, match)
    with _Raises(expected, match) as info:
        args[0](*args[1:], **kwargs)
    return info


def _fixture(function=None, **kwargs):
    def mark(f):
        f._repro_fixture = True
        return f
    return mark(function) if callable(function) else mark


pytest = _types.SimpleNamespace(mark=_MarkGenerator(), param=lambda *values, marks=(), id=None: _Param(values, marks, id),
                                skip=_skip, fail=_fail, importorskip=_importorskip, raises=_raises, fixture=_fixture)
'''


MAIN = r'''
# --- running the case as the harness does -------------------------------------------------------

_BY_INDEX = object()  # a parameter without a literal form: taken from its parametrize list by index
CASE_ID = @CASE_ID@
TEST_FUNCTION = @FUNCTION@
# name -> (value as pytest collected it, its index in the parametrize list it came from)
PARAMS = @PARAMS@
EXIT_CODES = @EXIT_CODES@


class _Item:
    """What the outcome rules ask of a pytest item: its marks."""

    def __init__(self, marks):
        self.marks = list(marks)

    def iter_markers(self, name=None):
        return iter([m for m in self.marks if name is None or m.name == name])


def _parameter(function, name, value, index):
    """The value and marks of one parameter, from the function's own parametrize list or the
    shared PARAMETERS, as pytest picked it."""
    if index is None:
        return value, []
    for mark in _marks(function):
        if mark.name != "parametrize":
            continue
        argnames, values = mark.args[0], list(mark.args[1])
        names = [n.strip() for n in argnames.split(",")] if isinstance(argnames, str) else list(argnames)
        if name in names:
            break
    else:
        if name not in globals().get("PARAMETERS", {}):
            return value, []
        names, values = [name], PARAMETERS[name]
    entry, marks = values[index], []
    if isinstance(entry, _Param):
        marks, entry = entry.marks, entry.values
    elif len(names) == 1:
        entry = (entry,)
    found = entry[names.index(name)]
    if value is not _BY_INDEX and repr(found) != repr(value):
        return value, []  # the lists changed since the export: trust the collected value
    return found, marks


def _skip_reason(item):
    for mark in item.iter_markers("skip"):
        return mark.kwargs.get("reason") or (mark.args[0] if mark.args else "unconditional skip")
    for mark in item.iter_markers("skipif"):
        conditions = mark.args or ((mark.kwargs["condition"],) if "condition" in mark.kwargs else (True,))
        for condition in conditions:
            if eval(condition, globals()) if isinstance(condition, str) else condition:
                return mark.kwargs.get("reason") or f"condition: {condition}"
    return None


def _arguments(function, params, run, cleanups):
    kwargs = {}
    for name in _inspect.signature(function).parameters:
        if name in params:
            kwargs[name] = params[name]
        elif name == "case":
            kwargs[name] = run
        elif name == "tmp_path":
            kwargs[name] = _pathlib.Path(_tempfile.mkdtemp(prefix="repro-"))
        elif getattr(globals().get(name), "_repro_fixture", False):
            value = globals()[name](**_arguments(globals()[name], params, run, cleanups))
            if _inspect.isgenerator(value):
                cleanups.append(value)
                value = next(value)
            kwargs[name] = value
        else:
            raise HarnessError(f"the case asks for {name!r}, which this script cannot provide")
    return kwargs


def _run_case():
    import torch

    function = globals()[TEST_FUNCTION]
    marks = _marks(function)
    params = {}
    for name, (value, index) in PARAMS.items():
        params[name], param_marks = _parameter(function, name, value, index)
        marks += param_marks
    marks += _marks(_types.SimpleNamespace(pytestmark=globals().get("pytestmark", [])))
    item = _Item(marks)
    print(f"case {CASE_ID}: {TEST_FUNCTION}({', '.join(f'{k}={v!r}' for k, v in params.items())})")
    print(f"torch {torch.__version__}, Python {_platform.python_version()}")
    reason = _skip_reason(item)
    if reason is not None:
        return "skip", reason, None
    torch.manual_seed(0)  # the harness starts every case from this seed
    variant = TEST_FUNCTION[len("test_"):] if TEST_FUNCTION.startswith("test_") else TEST_FUNCTION
    run = CaseRun({**params, "variant": variant})
    cleanups = []
    try:
        try:
            kwargs = _arguments(function, params, run, cleanups)
        except _Skipped as exc:
            return "skip", str(exc), run
        except Exception as exc:
            _traceback.print_exc(file=_sys.stdout)
            return "error", f"{_qualname(type(exc))}: {_first_line(exc)}", run
        try:
            function(**kwargs)
        except _Skipped as exc:
            return "skip", str(exc), run
        except Exception as exc:
            _traceback.print_exc(file=_sys.stdout)
            message = f"{_qualname(type(exc))}: {_first_line(exc)}"
            if isinstance(exc, HarnessError):
                return "error", message, run
            ref = match_upstream_bug(item, exc)
            return ("known", f"{ref}: {message}", run) if ref else ("fail", message, run)
        refs = _upstream_refs(item)
        if refs:
            return "fixed", f"{', '.join(refs)} no longer reproduces: eager and compiled agree", run
        return "pass", "eager and compiled agree", run
    finally:
        for generator in cleanups:
            next(generator, None)


def main():
    outcome, detail, run = _run_case()
    if run is not None and run.metrics:
        print("metrics: " + ", ".join(f"{k}={v}" for k, v in run.metrics.items()))
    _sys.stdout.flush()
    print(f"OUTCOME: {outcome}" + (f" ({detail})" if detail else ""), flush=True)
    return EXIT_CODES[outcome]


if __name__ == "__main__":
    _sys.exit(main())
'''


def build_script(collected: dict, script_file: str = "repro.py") -> str:
    """The standalone script for the collected case (see the module docstring)."""
    info = collected["case"]
    case_statements, from_casekit = _case_module(info)
    case_uses = {n for s in case_statements for n in s.uses}
    casekit = _casekit(from_casekit | (case_uses & _defined(_statements((ROOT / "harness" / "casekit.py").read_text()))))
    shared = _shared_parameters()
    sections = _merge_sections([
        ("the part of harness/casekit.py this case uses: CaseRun.check runs eagerly and compiled and compares",
         casekit),
        ("the shared parameter lists of cases/conftest.py (device, backend, fullgraph)", shared),
        (f"the case: {pathlib.Path(info['path']).relative_to(ROOT)}::{info['function']} and what it uses",
         case_statements),
    ])
    needs_lightning = any("lightning" in s.text for _, statements in sections for s in statements)
    params = {}
    for name, p in info["params"].items():
        if p["literal"] is None and p["index"] is None:
            raise ReproError(f"cannot export {info['case']}: parameter {name}={p['shown']} has no literal form "
                             f"and was not found in a parametrize list")
        params[name] = (p["literal"] if p["literal"] is not None else "_BY_INDEX", p["index"])
    params_text = "{" + "".join(f"\n    {name!r}: ({value}, {index})," for name, (value, index) in params.items()) \
        + ("\n}" if params else "}")
    record = info["params_record"]
    requirements = f"torch (exported with torch {collected['torch']}"
    if needs_lightning:
        requirements += f"), lightning (exported with lightning {collected.get('lightning')}"
    requirements += ")"
    bugs = info["upstream_bugs"]
    header = "\n".join([
        f"Reproduction of torch.compile case `{info['case']}`.",
        "",
        f"Exported by torch-compile-matrix (`python -m harness repro`) from {info['nodeid']}.",
        f"Needs only {requirements}; no pytest.",
        "",
        f"The case runs its code eagerly and under torch.compile (backend {record.get('backend', 'inductor')!r}, "
        f"fullgraph={bool(record.get('fullgraph', False))})",
        "and compares outputs, output dtypes and gradients of inputs and parameters.",
        "",
    ])
    if bugs:
        header += "Declared upstream bug" + ("s" if len(bugs) > 1 else "") + ":\n" + "".join(
            f"    {b['ref']}: raises {b['raises']}" + (f" matching {b['match']!r}" if b["match"] else "") + "\n"
            for b in bugs) + "\n"
    header += textwrap.dedent(f"""\
        Run:  python {script_file}
        The last line is `OUTCOME: pass|fixed|fail|known|skip|error (detail)`, classified as the
        harness does. Exit status: 0 pass or fixed, 1 fail, 3 known (the declared upstream bug),
        4 error (could not set the case up), 125 skip (this torch lacks something the case needs).
        """)
    parts = [_docstring(header), "",
             "from __future__ import annotations  # the copied harness code annotates as Python 3.10+ does\n",
             "import importlib as _importlib\nimport inspect as _inspect\nimport pathlib as _pathlib\n"
             "import platform as _platform\nimport re\nimport re as _re\nimport sys as _sys\n"
             "import tempfile as _tempfile\nimport traceback as _traceback\nimport types as _types",
             SHIM.rstrip()]
    # Every module-level import of the copied code goes up here, once.
    imports, seen = [], set()
    for _, statements in sections:
        for stmt in statements:
            if stmt.kind == "import" and ast.dump(stmt.node) not in seen:
                seen.add(ast.dump(stmt.node))
                imports.append(stmt)
    sections = [(title, [s for s in statements if s.kind != "import"]) for title, statements in sections]
    parts.insert(-1, "\n" + _join(imports))
    for title, statements in sections:
        parts.append(f"\n\n# --- {title} " + "-" * max(3, 96 - len(title) - 7) + "\n")
        parts.append(_join(statements))
    rules = _function_source(ROOT / "harness" / "plugin.py", PLUGIN_RULES)
    parts.append("\n\n# --- the outcome rules of harness/plugin.py " + "-" * 53 + "\n")
    parts.append(rules)
    parts.append(MAIN.replace("@CASE_ID@", repr(info["case"])).replace("@FUNCTION@", repr(info["function"]))
                 .replace("@PARAMS@", params_text).replace("@EXIT_CODES@", repr(SCRIPT_EXIT_CODES)).rstrip())
    text = "\n".join(parts) + "\n"
    compile(text, script_file, "exec")  # a SyntaxError here is a harness bug
    return text


def _defined(statements) -> set:
    return {n for s in statements if s.kind == "def" for n in s.defines}


def _join(statements: list[_Stmt]) -> str:
    out, previous = [], None
    for stmt in statements:
        if previous is not None:
            tight = previous.kind == stmt.kind == "import" or (
                previous.kind == stmt.kind == "def" and isinstance(previous.node, ast.Assign)
                and isinstance(stmt.node, ast.Assign))
            out.append("\n" if tight else "\n\n\n")
        out.append(stmt.text)
        previous = stmt
    return "".join(out)


# --- environments ------------------------------------------------------------------------------

def default_envdir() -> pathlib.Path:
    return ROOT / ".nox"


def venv_python(envdir: pathlib.Path, session: str) -> pathlib.Path:
    return pathlib.Path(envdir) / session / "bin" / "python"


def default_session(envdir: pathlib.Path) -> str:
    """The newest pinned CPU session whose venv exists, else FALLBACK_SESSION."""
    from harness import matrix

    for spec in reversed(matrix.load()):
        if spec.device == "cpu" and not spec.nightly and venv_python(envdir, spec.name).exists():
            return spec.name
    return FALLBACK_SESSION


def nox_command() -> list[str]:
    if importlib.util.find_spec("nox") is not None:
        return [sys.executable, "-m", "nox"]
    found = shutil.which("nox")
    if found:
        return [found]
    raise ReproError("nox is not installed here: `python -m pip install nox uv`, or pass --python")


def ensure_env(session: str, envdir: pathlib.Path, build: bool = True) -> pathlib.Path | None:
    """The python of `session`'s venv under `envdir`, built with `nox -s SESSION --install-only`
    when missing (None instead when `build` is false)."""
    from harness import matrix

    spec = matrix.find(session)
    python = venv_python(envdir, spec.name)
    if python.exists():
        return python
    if not build:
        return None
    command = nox_command() + ["-f", str(ROOT / "noxfile.py"), "-s", spec.name, "--install-only",
                               "--envdir", str(envdir)]
    print(f"building the environment of {spec.name}: {' '.join(command)}", file=sys.stderr, flush=True)
    done = subprocess.run(command, cwd=ROOT, stdout=sys.stderr, stderr=sys.stderr)
    if done.returncode != 0 or not python.exists():
        raise ReproError(f"`nox -s {spec.name} --install-only` failed (exit {done.returncode})")
    return python


# --- running -----------------------------------------------------------------------------------

BLOCKED = ("pytest", "_pytest", "harness")


def run_script(python, script: pathlib.Path, timeout: float = 900) -> dict:
    """Run the script with `python` in isolated mode (-I), from an empty directory, with pytest
    and the harness unimportable: proof that it needs neither."""
    code = ("import runpy, sys\n"
            f"for name in {BLOCKED!r}:\n    sys.modules[name] = None\n"
            f"sys.argv = [{str(script)!r}]\n"
            f"runpy.run_path({str(script)!r}, run_name='__main__')\n")
    with tempfile.TemporaryDirectory(prefix="harness-repro-run-") as cwd:
        try:
            done = subprocess.run([str(python), "-I", "-c", code], cwd=cwd, env=clean_env(), timeout=timeout,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace")
            output, returncode = done.stdout, done.returncode
        except subprocess.TimeoutExpired as exc:
            output = exc.stdout if isinstance(exc.stdout, str) else (exc.stdout or b"").decode(errors="replace")
            output, returncode = output + f"\n[timed out after {timeout:.0f} s]", None
    found = OUTCOME_LINE.findall(output)
    outcome, detail = found[-1] if found else (None, None)
    return {"returncode": returncode, "output": output, "outcome": outcome, "detail": detail or None}


def collect_env(python, timeout: float = 300) -> str:
    try:
        done = subprocess.run([str(python), "-m", "torch.utils.collect_env"], cwd=tempfile.gettempdir(),
                              env=clean_env(), capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"collect_env failed: {exc}"
    return (done.stdout.strip() or done.stderr.strip()) or f"collect_env printed nothing (exit {done.returncode})"


def matrix_outcome(session: str | None, case_id: str) -> tuple[str, pathlib.Path] | None:
    """The case's outcome in results/<session>.jsonl, where that file exists."""
    from harness import records

    if not session:
        return None
    path = records.results_dir(ROOT / "results") / f"{session}.jsonl"
    _, record = records.find_case(path, case_id)
    outcome = record.get("outcome") if record else None
    return (outcome, path) if outcome else None


# --- the report ----------------------------------------------------------------------------------

def _fence(text: str, language: str = "") -> str:
    longest = max((len(m) for m in re.findall(r"`{3,}", text)), default=2)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{language}\n{text.rstrip()}\n{fence}"


def _shorten_output(output: str, head: int = 40, tail_lines: int = 120) -> str:
    lines = output.rstrip().splitlines()
    if len(lines) <= head + tail_lines:
        return "\n".join(lines)
    return "\n".join(lines[:head] + [f"[... {len(lines) - head - tail_lines} lines cut ...]"] + lines[-tail_lines:])


def title(info: dict, torch_version: str, result: dict | None) -> str:
    where = f"torch {torch_version}"
    case = info["case"]
    if not result or not result["outcome"]:
        return f"torch.compile: `{case}` ({where})" + (" crashed or printed no outcome" if result else "")
    outcome, detail = result["outcome"], result["detail"] or ""
    if outcome == "known":
        ref, _, message = detail.partition(": ")
        return f"torch.compile: `{case}` fails with {message} ({ref}, {where})"
    if outcome == "fail":
        return f"torch.compile: `{case}` fails on {where}: {detail}"
    if outcome == "skip":
        return f"torch.compile: `{case}` cannot run on {where}: {detail}"
    if outcome == "error":
        return f"torch.compile: `{case}`: the reproduction could not set up on {where}: {detail}"
    return f"torch.compile: `{case}`: eager and compiled agree on {where}" + (
        " (the declared upstream bug no longer reproduces)" if outcome == "fixed" else "")


def markdown(collected: dict, script_text: str, script_path: pathlib.Path, result: dict | None,
             environment: str | None, matrix_result=None) -> str:
    info = collected["case"]
    lines = [f"### {title(info, collected['torch'], result)}", ""]
    lines += ["**Environment**", ""]
    if environment:
        lines += ["<details><summary><code>python -m torch.utils.collect_env</code></summary>", "",
                  _fence(environment), "", "</details>", ""]
    else:
        versions = ", ".join(f"{k} {v}" for k, v in collected.items() if k in ("torch", "lightning", "python") and v)
        lines += [versions, ""]
    lines += [f"**Reproduction** (`python {script_path.name}`; needs only torch"
              + (" and lightning" if "lightning" in script_text else "") + ", no pytest)", "",
              _fence(script_text, "python"), ""]
    if result is not None:
        status = "timed out" if result["returncode"] is None else f"exit status {result['returncode']}"
        lines += [f"**Output** ({status})", "", _fence(_shorten_output(result["output"])), ""]
    lines += ["**Expected**", "", expected_text(info) + ".", ""]
    if matrix_result:
        outcome, path = matrix_result
        lines += [f"In the test matrix ({path.name}) this case is `{outcome}`.", ""]
    refs = [b["ref"] for b in info["upstream_bugs"]]
    if refs:
        lines += ["**Related upstream**", ""]
        for ref in dict.fromkeys(refs):
            link = upstream_link(ref)
            lines.append(f"- [{ref}]({link})" if link else f"- {ref}")
        lines.append("")
    return "\n".join(lines)


# --- the command ---------------------------------------------------------------------------------

def command(args) -> int:
    """`python -m harness repro`: exit 0 when the script was written (and, unless --no-run, ran
    and printed its OUTCOME line), 1 when it could not be exported or printed no outcome, 2 for
    an unknown case id or session."""
    envdir = pathlib.Path(args.envdir) if args.envdir else default_envdir()
    session = None
    if args.python:
        python = pathlib.Path(args.python)
    else:
        session = args.session or default_session(envdir)
        python = ensure_env(session, envdir)
    try:
        collected = collect(python, args.case)
    except UnknownCase as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except ReproError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    from harness import records

    out = pathlib.Path(args.out) if args.out else \
        records.results_dir(ROOT / "results") / "repro" / script_name(args.case)
    try:
        text = build_script(collected, out.name)
    except ReproError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    print(f"wrote {out}", file=sys.stderr)
    result = environment = None
    if not args.no_run:
        print(f"running it with {python} ...", file=sys.stderr, flush=True)
        from harness import matrix

        timeout = 900
        if session:
            timeout = matrix.find(session).case_timeout + 300
        result = run_script(python, out, timeout=timeout)
        environment = collect_env(python)
    found = matrix_outcome(session, args.case)
    report = markdown(collected, text, out, result, environment, found)
    out.with_suffix(".md").write_text(report)
    print(report)
    print(f"wrote {out} and {out.with_suffix('.md')}", file=sys.stderr)
    if result is None:
        return 0
    if result["outcome"] is None:
        print("error: the script printed no OUTCOME line (crashed or timed out)", file=sys.stderr)
        return 1
    if found and found[0] != result["outcome"]:
        print(f"note: {found[1].name} records {found[0]}, the script gave {result['outcome']}", file=sys.stderr)
    return 0
