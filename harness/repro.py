"""One case as a short standalone script for an upstream issue: `python -m harness repro CASE_ID`.

The script is the case itself: its test function called with its parameters written as literals,
the helpers of its module it uses, and the comparison the matrix runs (`Case` of harness/casekit.py,
carried as it is). Its last line is `OUTCOME: ...` as the matrix would classify the run, and its exit
status that outcome's (harness.outcomes). It needs only torch, and Lightning where the case uses it.

`repro` finds the case by collecting the cases in the session's venv (this module is loaded there
as a pytest plugin), writes the script, runs it there with pytest and the harness unimportable, and
prints an issue: a title, what goes wrong, the torch versions where it passes and fails (from the
results files at hand), the script, its output, what was expected, collect_env folded away.
`repro --all --session S` does it for every case of a session and compares each script's outcome
with what the session's results file records.
"""

from __future__ import annotations

import ast
import concurrent.futures
import dataclasses
import difflib
import json
import os
import pathlib
import re
import statistics
import subprocess
import sys
import tempfile

from harness import outcomes, records, sessions

ROOT = sessions.ROOT
CASES_DIR = ROOT / "cases"
CASEKIT = ROOT / "harness" / "casekit.py"
DUMP_ENV = "HARNESS_REPRO_DUMP"  # set: this module, loaded as a pytest plugin, dumps the collection
CASE_ENV = "HARNESS_REPRO_CASES"  # the case ids to describe, one per line; "*": every case
MAX_LINES = 120
OUTCOME_LINE = re.compile(r"^OUTCOME: (\w+)", re.M)
# Environment that must not leak from a nox session or a surrounding pytest into the runs.
DROP_ENV = ("HARNESS_SESSION", "HARNESS_RESULTS_DIR", "PYTEST_ADDOPTS", "PYTEST_PLUGINS")
BLOCKED = ("pytest", "_pytest", "harness")


class ReproError(Exception):
    """The case cannot be exported or run."""


class UnknownCase(ReproError):
    """No collected case has this id; the message lists the closest ones."""

    def __init__(self, case_id: str, ids: list[str]):
        close = difflib.get_close_matches(case_id, ids, n=5, cutoff=0.6)
        close += [c for c in difflib.get_close_matches(case_id, ids, n=5, cutoff=0.0) if c not in close]
        super().__init__("\n".join([f"unknown case {case_id!r}", "closest case ids:", *[f"  {c}" for c in close[:5]]]))


# --- collecting (this module as a pytest plugin, inside the session's venv) ---------------------

def _literal(value) -> str | None:
    """Source text that rebuilds `value` (a torch dtype, or a Python literal), else None."""
    import torch

    if isinstance(value, torch.dtype):
        return repr(value)  # 'torch.bfloat16'
    try:
        text = repr(value)
        rebuilt = ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None
    return text if rebuilt == value and type(rebuilt) is type(value) else None


def _skips(item) -> list[dict]:
    """The item's skip marks: a string condition is kept to be evaluated where the script runs; a
    condition pytest evaluated here is kept only when it holds (a CUDA case gets its own guard)."""
    found = []
    for mark in item.iter_markers("skip"):
        found.append({"condition": "True", "reason": mark.kwargs.get("reason") or (mark.args or ["skip"])[0]})
    for mark in item.iter_markers("skipif"):
        for condition in mark.args or [mark.kwargs.get("condition", True)]:
            reason = mark.kwargs.get("reason", "")
            if isinstance(condition, str):
                found.append({"condition": condition, "reason": reason})
            elif condition and "CUDA" not in reason:
                found.append({"condition": "True", "reason": reason})
    return found


def _describe(item) -> dict:
    import inspect

    import torch

    from harness.caseid import case_identity

    identity = case_identity(item)
    callspec = getattr(item, "callspec", None)
    return {
        **identity, "path": str(item.path), "name": item.name,
        "function": getattr(item, "originalname", None) or item.name.split("[")[0],
        "argnames": list(inspect.signature(item.function).parameters),
        "params": {n: _literal(v) for n, v in (callspec.params.items() if callspec else ())},
        "expected": [dataclasses.asdict(e) for e in outcomes.expected_failures(item)],
        "skips": _skips(item), "doc": inspect.getdoc(item.function) or "",
        "torch": torch.__version__,
    }


def pytest_collection_finish(session):
    target = os.environ.get(DUMP_ENV)
    if not target:
        return
    from harness.caseid import case_identity

    wanted = set(filter(None, os.environ.get(CASE_ENV, "").split("\n")))
    ids, cases = [], {}
    for item in session.items:
        case_id = case_identity(item)["case"]
        ids.append(case_id)
        if ("*" in wanted or case_id in wanted) and case_id not in cases:
            cases[case_id] = _describe(item)
    pathlib.Path(target).write_text(json.dumps({"ids": ids, "cases": cases}, indent=1))


def clean_env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in DROP_ENV}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    return {**env, **extra}


def collect(python, case_ids: list[str], timeout: float = 900) -> dict:
    """Collect the cases with `python` (an interpreter with torch and pytest): every case id
    ("ids") and the description of each of `case_ids` ("cases"; ["*"]: all)."""
    with tempfile.TemporaryDirectory(prefix="harness-repro-") as tmp:
        dump = pathlib.Path(tmp) / "collected.json"
        command = [str(python), "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                   "-p", "no:harness.plugin", "-p", "harness.repro", str(CASES_DIR)]
        try:
            done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                                  env=clean_env(**{DUMP_ENV: str(dump), CASE_ENV: "\n".join(case_ids)}))
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise ReproError(f"collecting the cases with {python} failed: {exc}") from exc
        if not dump.exists():
            output = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
            raise ReproError(f"collecting the cases with {python} failed (exit {done.returncode}):\n{output}")
        collected = json.loads(dump.read_text())
    missing = [c for c in case_ids if c != "*" and c not in collected["cases"]]
    if missing:
        raise UnknownCase(missing[0], collected["ids"])
    return collected


# --- the script ---------------------------------------------------------------------------------------

@dataclasses.dataclass
class Statement:
    """A top-level statement of a source file: its text, and the names it defines and uses."""

    text: str
    defines: set
    uses: set
    node: ast.AST

    @property
    def is_import(self) -> bool:
        return isinstance(self.node, (ast.Import, ast.ImportFrom))


def _names(node) -> set:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _pytest_names(tree) -> set:
    """`pytest` and the module's names bound to pytest objects (`te_bug = pytest.mark...`)."""
    names, changed = {"pytest"}, True
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
    tree = ast.parse(source)
    lines = source.splitlines()
    pytest_names = _pytest_names(tree)
    found = []
    for position, node in enumerate(tree.body):
        if position == 0 and isinstance(node, ast.Expr) and isinstance(getattr(node, "value", None), ast.Constant):
            continue  # the module docstring
        decorators = getattr(node, "decorator_list", [])
        start = min([node.lineno] + [d.lineno for d in decorators]) - 1
        while start > 0 and lines[start - 1].lstrip().startswith("#") and not lines[start - 1].lstrip().startswith("# ---"):
            start -= 1
        dropped = [d for d in decorators if _names(d) & pytest_names]
        skip = {number for d in dropped for number in range(d.lineno - 1, d.end_lineno)}
        if not docstrings:
            for inner in ast.walk(node):
                body = getattr(inner, "body", None)
                if isinstance(inner, (ast.FunctionDef, ast.ClassDef)) and len(body) > 1 \
                        and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant):
                    skip.update(range(body[0].lineno - 1, body[0].end_lineno))
                    if not lines[body[0].end_lineno].strip():  # and the blank line after it
                        skip.add(body[0].end_lineno)
        text = "\n".join(line for number, line in enumerate(lines[start:node.end_lineno], start) if number not in skip)
        uses = set().union(*(_names(child) for child in ast.iter_child_nodes(node) if child not in dropped))
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            defines = {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defines = {node.name}
        else:
            defines = {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
        found.append(Statement(text, defines, uses - defines, node))
    return found


def as_block(statement: Statement) -> Statement:
    """The statement without its blank lines: a carried helper reads as one block, the script stays short."""
    return dataclasses.replace(statement, text="\n".join(line for line in statement.text.splitlines() if line.strip()))


def needed(found: list[Statement], roots: set) -> list[Statement]:
    """The statements that define `roots` and what those use, transitively, in source order."""
    wanted, kept = set(roots), set()
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
    node = statement.node
    return (node.module or "") if isinstance(node, ast.ImportFrom) else node.names[0].name


SKIP = '''
class Skip(Exception):
    """The case cannot run on this torch or Lightning."""
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

DECLARED = '''
def declared(error):
    """The outcome EXPECTED gives `error` or an error it was raised from, else None."""
    while error is not None:
        names = {n for c in type(error).__mro__ for n in (c.__name__, f"{c.__module__}.{c.__qualname__}")}
        for outcome, _, raises, pattern in EXPECTED:
            if names & set(raises) and re.search(pattern or "", str(error)):
                return outcome
        error = error.__cause__ or error.__context__
'''


def _attributes(nodes) -> set:
    return {n.attr for node in nodes for n in ast.walk(node) if isinstance(n, ast.Attribute)}


def without_unused_methods(source: str, attributes: set) -> str:
    """`source` less the methods of its plain classes (no base class: the harness's `Case`, a
    case's recorder) that nothing calls: neither the case (`attributes`) nor a method kept. Dunder
    methods stay; classes with a base keep everything (torch calls `forward`, `__torch_function__`)."""
    classes = [n for n in ast.parse(source).body if isinstance(n, ast.ClassDef) and not n.bases]
    methods = [m for c in classes for m in c.body if isinstance(m, ast.FunctionDef)]
    kept, used = set(), set(attributes)
    while True:
        now = {m for m in methods if m.name.startswith("__") or m.name in used}
        if now == kept:
            break
        kept, used = now, used | _attributes(now)
    dropped = {number for m in methods if m not in kept
               for number in range(min([m.lineno] + [d.lineno for d in m.decorator_list]) - 1, m.end_lineno)}
    return "\n".join(line for number, line in enumerate(source.splitlines()) if number not in dropped) + "\n"


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
    """The standalone script of a collected case (see the module docstring)."""
    source = pathlib.Path(info["path"]).read_text()
    function = info["function"]
    case_nodes = [s.node for s in needed(statements(source), {function} | set(info["argnames"]))]
    source = without_unused_methods(source, _attributes(case_nodes))
    own = {s.node.name: s for s in statements(source) if isinstance(s.node, ast.FunctionDef)}  # with docstrings
    found = [own.get(getattr(s.node, "name", None), s) if getattr(s.node, "name", None) == function else s
             for s in statements(source, docstrings=False) if not (s.is_import and _imported_module(s).split(".")[0] in BLOCKED)]
    fixtures = {s.node.name for s in found if isinstance(s.node, ast.FunctionDef) and s.node.name in info["argnames"]
                and s.node.name != function}
    case_code = needed(found, {function} | fixtures)
    uses = {name for s in case_code for name in s.uses}
    if uses & {"pytest", "_pytest"}:
        raise ReproError(f"cannot export {info['case']}: its code calls pytest (only decorators may)")
    kit = statements(without_unused_methods(CASEKIT.read_text(), _attributes(s.node for s in case_code)),
                     docstrings=False)
    kit_code = [as_block(s) for s in needed([s for s in kit if not s.is_import],
                                            {"Case"} | (uses & {"OpLog", "TOLERANCES"}))]
    case_code = [s if getattr(s.node, "name", None) == function else as_block(s) for s in case_code]
    names = {name for s in case_code + kit_code for name in s.uses}
    expected = [(e["kind"], e["ref"], tuple(e["raises"]), e["match"]) for e in info["expected"]]
    # `fixed` when a declared upstream bug of this torch no longer reproduces (harness.outcomes)
    passed = "fixed" if any(outcomes.Expected(**e).reported_for(info["torch"]) for e in info["expected"]
                            if e["kind"] == "known") else "pass"
    params = info["params"]
    guards = [f"if {s['condition']}:\n            raise Skip({s['reason']!r})" for s in info["skips"]]
    if "'cuda'" in params.values():
        guards.append("if not torch.cuda.is_available():\n            raise Skip('no CUDA device')")
    skips = bool(guards) or "need" in uses
    stdlib = {"sys", "traceback"} | ({"re"} if expected else set()) | ({"importlib"} if "need" in uses else set()) \
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
              "Case.check compares outputs, dtypes and gradients; the case's asserts check what the feature does.")
    parts = [header + '"""', f"import {', '.join(sorted(stdlib))}\n" +
             "\n".join(sorted(imports, key=lambda i: (i.startswith("from "), i)))]
    if expected:  # the failures the matrix declares for this case
        listed = "".join(f"\n    {e!r}," for e in expected) + "\n" if len(expected) > 1 else repr(expected[0])
        parts.append(f"EXPECTED = [{listed}]  # (outcome, reference, exception names, message pattern)")
    if skips:
        parts.append(SKIP.strip() + ("\n" + NEED.strip() if "need" in uses else ""))
    parts.append("\n".join(s.text for s in kit_code))  # the comparison, carried as one block
    helpers = [s.text for s in case_code if not s.is_import and getattr(s.node, "name", None) != function]
    parts += ["\n".join(helpers)] + [s.text for s in case_code if getattr(s.node, "name", None) == function]
    if expected:
        parts.append(DECLARED.strip())
    call = f"{function}({', '.join(_arguments(info, fixtures))})"
    reachable = {passed, "fail"} | ({"skip"} if skips else set()) | {e[0] for e in expected}
    exit_codes = {name: o.exit_code for name, o in outcomes.OUTCOMES.items() if name in reachable}
    main = [
        'if __name__ == "__main__":',
        "    torch.manual_seed(0)  # as the matrix starts every case",
        f"    case, outcome = Case({backend!r}, fullgraph={fullgraph!r}), {passed!r}",
        "    try:",
        *[f"        {g}" for g in guards],
        f"        {call}",
        *(["    except Skip as reason:", "        outcome = f'skip: {reason}'"] if skips else []),
        "    except Exception as error:",
        "        traceback.print_exc(file=sys.stdout)",
        f"        outcome = {'declared(error) or ' if expected else ''}'fail'",
        "    print('figures:', case.metrics, f'\\nOUTCOME: {outcome} (torch {torch.__version__})')",
        f"    sys.exit({exit_codes!r}[outcome.split(':')[0]])",
    ]
    text = "\n\n".join(p.strip("\n") for p in parts) + "\n\n" + "\n".join(main) + "\n"  # one blank line: short
    compile(text, script_name(info["case"]), "exec")  # a SyntaxError here is a harness bug
    return text


# --- running ---------------------------------------------------------------------------------------------

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
    return {"returncode": returncode, "output": output, "outcome": found[-1] if found else None}


def collect_env(python, timeout: float = 300) -> str:
    try:
        done = subprocess.run([str(python), "-m", "torch.utils.collect_env"], cwd=tempfile.gettempdir(),
                              env=clean_env(), capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"collect_env failed: {exc}"
    return (done.stdout.strip() or done.stderr.strip()) or f"collect_env printed nothing (exit {done.returncode})"


# --- the issue ----------------------------------------------------------------------------------------------

def across_versions(case_id: str, directories) -> list[dict]:
    """What every results file at hand records for the case: torch, session, outcome, message;
    oldest torch first."""
    from packaging.version import InvalidVersion, Version

    rows = []
    for directory in directories:
        for path in sorted(pathlib.Path(directory).glob("*.jsonl")):
            environment, record = records.find_case(path, case_id)
            if environment and record:
                rows.append({"torch": environment.get("torch") or "?", "session": environment.get("session") or path.stem,
                             "outcome": record["outcome"], "message": record.get("message") or ""})

    def key(row):
        try:
            return Version(row["torch"].split("+")[0]), row["session"]
        except InvalidVersion:
            return Version("0"), row["session"]

    return sorted(rows, key=key)


def boundaries(rows: list[dict]) -> list[tuple[dict, dict]]:
    """Adjacent torch versions (one session each: the plain CPU or CUDA row) whose outcomes differ."""
    line = [r for r in rows if re.fullmatch(r"(cpu|cuda\d+)_torch\d+", r["session"])]
    return [(a, b) for a, b in zip(line, line[1:]) if a["outcome"] != b["outcome"]]


def _fence(text: str, language: str = "") -> str:
    longest = max((len(m) for m in re.findall(r"`{3,}", text)), default=2)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{language}\n{text.rstrip()}\n{fence}"


def _shorten(output: str, head: int = 25, tail: int = 60) -> str:
    lines = output.rstrip().splitlines()
    if len(lines) <= head + tail:
        return "\n".join(lines)
    return "\n".join(lines[:head] + [f"[... {len(lines) - head - tail} lines ...]"] + lines[-tail:])


def _what_went_wrong(info: dict, result: dict) -> tuple[str, str]:
    """(title, paragraph) from the script's run."""
    from harness.report import upstream_link

    params = {k: ast.literal_eval(v) for k, v in info["params"].items() if v is not None and k in ("backend", "fullgraph")}
    compile_call = f"torch.compile(backend={params.get('backend', 'inductor')!r}" + \
        (", fullgraph=True)" if params.get("fullgraph") else ")")
    version = info["torch"]
    errors = [line for line in result["output"].splitlines() if re.match(r"^[\w.]+(Error|Exception|Unsupported)\b.*:", line)]
    error = errors[-1] if errors else ""
    outcome = result["outcome"] or "no outcome"
    subject = info["case"]
    refs = ", ".join(f"[{e['ref']}]({upstream_link(e['ref']) or e['ref']})" for e in info["expected"])
    doc = info["doc"].split("\n\n")[0].replace("\n", " ")
    if outcome in ("fail", "known", "limitation"):
        title = f"{compile_call}: `{subject}` fails on torch {version}" + (f": {error[:120]}" if error else "")
        paragraph = f"With torch {version}, the case runs eagerly and under `{compile_call}`; the compiled run fails: `{error}`."
        if outcome == "known":
            paragraph += f" This is the upstream bug {refs}."
        elif outcome == "limitation":
            paragraph += f" This is documented behaviour ({refs})."
    elif outcome == "skip":
        title = f"`{subject}` cannot run on torch {version}"
        paragraph = "The script skipped: " + next((line for line in result["output"].splitlines() if line.startswith("OUTCOME: skip")), "")
    else:
        title = f"{compile_call}: `{subject}` agrees with eager on torch {version}"
        paragraph = f"With torch {version}, eager and compiled runs agree and the feature does what it does eagerly."
        if outcome == "fixed":
            paragraph += f" The declared upstream bug ({refs}) no longer reproduces."
    return title, (f"{doc} " if doc else "") + paragraph


def issue_markdown(info: dict, text: str, path: pathlib.Path, result: dict, environment: str,
                   rows: list[dict], full: str | None = None) -> str:
    """The issue; `full`: the whole export, folded below `text` (a reduced script, harness/reduce.py)."""
    title, paragraph = _what_went_wrong(info, result)
    lines = [f"### {title}", "", paragraph, ""]
    if rows:
        lines += ["| torch | session | outcome | message |", "|---|---|---|---|"]
        lines += [f"| {r['torch']} | {r['session']} | {r['outcome']} | {r['message'][:100].replace('|', '/')} |"
                  for r in rows]
        lines += [""] + [f"Changes between torch {a['torch']} ({a['outcome']}) and {b['torch']} ({b['outcome']})."
                         for a, b in boundaries(rows)] + [""]
    needs = "torch and lightning" if "lightning" in text else "torch"
    status = "timed out" if result["returncode"] is None else f"exit status {result['returncode']}"
    lines += [f"**Reproduction** (`python {path.name}`, needs only {needs}):", "", _fence(text, "python"), ""]
    if full:
        lines += [f"<details><summary>The case as the matrix runs it ({full.count(chr(10))} lines)</summary>", "",
                  _fence(full, "python"), "", "</details>", ""]
    lines += [f"**Output** (torch {info['torch']}, {status}):", "", _fence(_shorten(result["output"])), "",
              "**Expected**: the compiled run gives the eager run's outputs, dtypes and gradients, and the "
              "feature does under torch.compile what it does eagerly (the script's asserts).", "",
              "<details><summary>collect_env</summary>", "", _fence(environment), "", "</details>", ""]
    return "\n".join(lines)


# --- the commands ------------------------------------------------------------------------------------------

def _session_python(args) -> tuple[pathlib.Path, str | None]:
    if args.python:
        return pathlib.Path(args.python), None
    session = args.session or default_session(args.envdir)
    return sessions.ensure_venv(session, args.envdir), session


def default_session(envdir=None) -> str:
    """The newest plain CPU session whose venv exists, else the newest plain CPU session."""
    from harness import matrix

    plain = [s for s in matrix.load() if s.device == "cpu" and not s.nightly and not s.label]
    existing = [s for s in plain if sessions.venv_python(s.name, envdir).exists()]
    return (existing or plain)[-1].name


def command(args) -> int:
    """`python -m harness repro CASE_ID`: writes the script and the issue; 0 once the script ran
    and printed an outcome (or was written, with --no-run), 1 when it printed none."""
    if args.all:
        return check_session(args)
    python, session = _session_python(args)
    info = collect(python, [args.case])["cases"][args.case]
    out = pathlib.Path(args.out) if args.out else records.results_dir(ROOT / "results") / "repro" / script_name(args.case)
    text = build_script(info)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    print(f"wrote {out} ({text.count(chr(10))} lines)", file=sys.stderr)
    if args.no_run:
        return 0
    print(f"running it with {python} ...", file=sys.stderr, flush=True)
    result = run_script(python, out)
    rows = across_versions(args.case, [records.results_dir(ROOT / "results"), *(args.results or [])])
    issue = issue_markdown(info, text, out, result, collect_env(python), rows)
    out.with_suffix(".md").write_text(issue)
    print(issue)
    print(f"wrote {out} and {out.with_suffix('.md')}", file=sys.stderr)
    if result["outcome"] is None:
        print("error: the script printed no OUTCOME line (crashed or timed out)", file=sys.stderr)
        return 1
    recorded = next((r["outcome"] for r in rows if r["session"] == session), None)
    if recorded and recorded != result["outcome"]:
        print(f"note: the matrix records {recorded} in {session}, the script gave {result['outcome']}", file=sys.stderr)
    return 0


def check_session(args) -> int:
    """Every case of a session as a script, run in its venv, against what its results file records:
    0 when every outcome matches and every script is at most MAX_LINES lines."""
    python, session = _session_python(args)
    results = records.results_dir(ROOT / "results") / f"{session}.jsonl"
    recorded = {} if args.no_run else {r["case"]: r["outcome"] for r in records.read(results) if r["kind"] == "case"}
    collected = collect(python, ["*"])
    out = pathlib.Path(args.out or tempfile.mkdtemp(prefix=f"repro-{session}-"))
    out.mkdir(parents=True, exist_ok=True)
    lengths, mismatches, unexported, scripts = {}, [], [], {}
    for case_id in collected["cases"]:
        try:
            text = build_script(collected["cases"][case_id])
        except ReproError as exc:
            unexported.append(f"{case_id}: {exc}")
            continue
        scripts[case_id] = out / script_name(case_id)
        scripts[case_id].write_text(text)
        lengths[case_id] = text.count("\n")
    # Scripts are separate processes: --jobs of them at a time, reported in the order of the cases.
    with concurrent.futures.ThreadPoolExecutor(max(args.jobs, 1)) as pool:
        runs = {case_id: pool.submit(run_script, python, path) for case_id, path in scripts.items()} \
            if not args.no_run else {}
        for number, case_id in enumerate(scripts, 1):
            got = runs[case_id].result()["outcome"] if runs else None
            want = recorded.get(case_id, "not run")
            if runs and got != want:
                mismatches.append(f"{case_id}: script {got}, matrix {want}")
            print(f"[{number}/{len(scripts)}] {lengths[case_id]:4d} lines  {got or '-':10s} {case_id}", flush=True)
    over = sorted((n, c) for c, n in lengths.items() if n > MAX_LINES)
    print(f"{session}: {len(lengths)} scripts in {out}; lines median {statistics.median(lengths.values()):.0f}, "
          f"largest {max(lengths.values())}; over {MAX_LINES}: {len(over)}; outcome mismatches: {len(mismatches)}; "
          f"not exported: {len(unexported)}")
    for line in [f"{c}: {n} lines" for n, c in over] + mismatches + unexported:
        print(f"  {line}")
    return 0 if not (over or mismatches or unexported) else 1
