"""A property case over torch's op database (cases/programs/op_programs.py) as a standalone script.

Such a case runs, for each example, a plain-torch script the example writes (`program.script(backend)`):
its inputs as literal tensors, the op called through its public name, the feature around it, the
checks. Its reproduction is that very script, wrapped in the matrix's classification: no harness
code, no hypothesis, no op database. Writing it needs the session's own torch (the example's samples
come from that torch's op_db), so it is written in the session's venv, all cases of one command in
one process.
"""

from __future__ import annotations

import ast
import json
import pathlib
import subprocess
import textwrap

from harness.core import paths, pytestrun
from harness.tools.repro.errors import ReproError
from harness.tools.repro.property_example import example_expression
from harness.tools.repro.verdict import Verdict

CHECK = "check_op_program"  # what an op property's explore(...) check calls
MARK = "HARNESS-OP-SCRIPTS "

# Run in the session's venv: import each case's module, rebuild its example from its figures (or its
# first pinned example) with the case's parameters in scope, and print each script.
WRITER = r'''
import importlib.util, json, sys
jobs = json.loads(sys.stdin.read())
sys.path[:0] = [jobs["root"], jobs["cases_dir"]]
modules, scripts = {}, {}
for job in jobs["cases"]:
    if job["path"] not in modules:
        spec = importlib.util.spec_from_file_location(f"op_case_{len(modules)}", job["path"])
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        modules[job["path"]] = module
    namespace = dict(vars(modules[job["path"]]))
    namespace.update({name: eval(text, namespace) for name, text in job["params"].items() if text is not None})
    try:
        scripts[job["case"]] = eval(job["expression"], namespace).script(namespace["backend"])
    except Exception as error:
        scripts[job["case"]] = {"error": f"{type(error).__name__}: {error}"}
print("HARNESS-OP-SCRIPTS " + json.dumps(scripts))
'''


def is_op_property(info: dict) -> bool:
    """Whether the collected case is a property whose examples are op programs (its check calls
    check_op_program)."""
    tree = ast.parse(pathlib.Path(info["path"]).read_text())
    function = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == info["function"]), None)
    return function is not None and any(isinstance(n, ast.Name) and n.id == CHECK for n in ast.walk(function))


def add_scripts(python, infos: dict, timeout: float = 900) -> None:
    """Each op property case of `infos` (case id -> collected description, its `property_example`
    chosen) gets `op_script`: its example's script, written with `python` (the session's venv)."""
    jobs = []
    for case_id, info in infos.items():
        if is_op_property(info):
            expression = example_expression(pathlib.Path(info["path"]).read_text(), info["function"],
                                             info.get("property_example"))
            jobs.append({"case": case_id, "path": info["path"], "params": info["params"], "expression": expression})
    if not jobs:
        return
    payload = json.dumps({"root": str(paths.ROOT), "cases_dir": str(paths.CASES), "cases": jobs})
    try:
        done = subprocess.run([str(python), "-c", WRITER], input=payload, cwd=paths.ROOT, capture_output=True,
                              text=True, timeout=timeout, env=pytestrun.clean_env())
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ReproError(f"writing the op programs' scripts with {python} failed: {exc}") from exc
    line = next((line for line in reversed(done.stdout.splitlines()) if line.startswith(MARK)), None)
    if line is None:
        tail = "\n".join(done.stderr.strip().splitlines()[-10:])
        raise ReproError(f"writing the op programs' scripts with {python} failed (exit {done.returncode}):\n{tail}")
    for case_id, script in json.loads(line[len(MARK):]).items():
        if isinstance(script, dict):
            raise ReproError(f"cannot export {case_id}: its example's script could not be written: {script['error']}")
        infos[case_id]["op_script"] = script


def build_op_script(info: dict) -> str:
    """The example's script run at module level inside the matrix's classification: it prints
    `OUTCOME: ...` and exits with that outcome's code (a declared bug that no longer fails: fixed)."""
    verdict = Verdict.of(info)
    example = info.get("property_example") or {}
    header = (f'"""`{info["case"]}` (torch-compile-matrix, torch {info["torch"]}): one example of the property, as\n'
              "it ran in the matrix: the op's sample as literal tensors, the feature around the op, torch.compile\n"
              "with the case's backend, and the checks (compiled against eager, or, for a random op, against\n"
              "its own draws)."
              + (f"\nIts failure in the matrix: {example['error'][:200]}" if example.get("error") else "")
              + '\n"""')
    body = textwrap.indent(info["op_script"].strip("\n"), "    ")
    declared = [verdict.declarations(), ""] if verdict.expected else []
    lines = [header, "import re, sys, traceback", "", *declared, f"outcome = {verdict.clean!r}", "try:", body,
             "except Exception as error:", "    traceback.print_exc(file=sys.stdout)",
             f"    outcome = {verdict.on_error()}", *verdict.ending(can_skip=False)]
    text = "\n".join(lines) + "\n"
    compile(text, info["case"], "exec")  # a SyntaxError here is a harness bug
    return text
