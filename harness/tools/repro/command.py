"""One case as a short standalone script for an upstream issue: `python -m harness repro CASE_ID`.

The script is the case itself: its test function called with its parameters written as literals,
the helpers of its module it uses, and the comparison the matrix runs (`Case` of
harness/plugin/casekit.py, carried as it is). Its last line is `OUTCOME: ...` as the matrix would
classify the run, and its exit status that outcome's (harness.core.outcomes). It needs only torch,
and Lightning where the case uses it.

`repro` finds the case by collecting the cases in the session's venv (harness.tools.repro.collector),
writes the script, runs it there with pytest and the harness unimportable, and
prints an issue: a title, what goes wrong, the torch versions where it passes and fails (from the
results files at hand), the script, its output, what was expected, collect_env folded away.
`repro --all --session S` does it for every case of a session and compares each script's outcome
with what the session's results file records.
"""

from __future__ import annotations

import concurrent.futures
import pathlib
import statistics
import subprocess
import sys
import tempfile

from harness.core import matrix, paths, pytestrun, records, venvs
from harness.tools import scriptrun
from harness.tools.repro import op_example
from harness.tools.repro.collector import collect
from harness.tools.repro.errors import ReproError
from harness.tools.repro.issue import across_versions, issue_markdown
from harness.tools.repro.property_example import chosen_example
from harness.tools.repro.script import BLOCKED, build_script, line_limit, script_name

# --- running ---------------------------------------------------------------------------------------------

def run_script(python, script: pathlib.Path, timeout: float = 900) -> dict:
    """Run the script with `python` in isolated mode, from an empty directory, with pytest and the
    harness unimportable: proof that it needs neither. The outcome is the one its `OUTCOME:` line names."""
    run = scriptrun.run(python, script, timeout=timeout, blocked=BLOCKED)
    return {"returncode": run.code, "output": run.output, "outcome": scriptrun.printed_outcome(run.output)[0]}


def collect_env(python, timeout: float = 300) -> str:
    try:
        done = subprocess.run([str(python), "-m", "torch.utils.collect_env"], cwd=tempfile.gettempdir(),
                              env=pytestrun.clean_env(), capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"collect_env failed: {exc}"
    return (done.stdout.strip() or done.stderr.strip()) or f"collect_env printed nothing (exit {done.returncode})"


# --- the commands ------------------------------------------------------------------------------------------

def _session_python(args) -> tuple[pathlib.Path, str | None]:
    if args.python:
        return pathlib.Path(args.python), None
    session = args.session or default_session(args.envdir)
    python = venvs.ensure_venv(session, args.envdir)
    assert python is not None  # build=True: ensure_venv builds the venv or raises
    return python, session


def default_session(envdir=None) -> str:
    """The newest plain CPU session whose venv exists, else the newest plain CPU session."""
    plain = [s for s in matrix.load() if s.device == "cpu" and not s.nightly and not s.label]
    existing = [s for s in plain if venvs.venv_python(s.name, envdir).exists()]
    return (existing or plain)[-1].name


def command(args) -> int:
    """`python -m harness repro CASE_ID`: writes the script and the issue; 0 once the script ran
    and printed an outcome (or was written, with --no-run), 1 when it printed none."""
    if args.all:
        return check_every_case(args)
    python, session = _session_python(args)
    info = collect(python, [args.case])["cases"][args.case]
    if session:  # a property case replays the failing example the session's record lists
        _, record = records.find_case(paths.results_path(session), args.case)
        info["property_example"] = chosen_example(record, info["expected"])
    op_example.add_scripts(python, {args.case: info})
    out = pathlib.Path(args.out) if args.out else paths.results_subdir(paths.REPRO) / script_name(args.case)
    text = build_script(info)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    print(f"wrote {out} ({text.count(chr(10))} lines)", file=sys.stderr)
    if args.no_run:
        return 0
    print(f"running it with {python} ...", file=sys.stderr, flush=True)
    result = run_script(python, out)
    rows = across_versions(args.case, args.results)
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


def check_every_case(args) -> int:
    """Every case of a session as a script, run in its venv, against what its results file records:
    0 when every outcome matches and every script is within its line limit (script.line_limit)."""
    python, session = _session_python(args)
    session = session or args.session  # with --python, --session still names the results file compared with
    if session is None and not args.no_run:
        raise ReproError("repro --all --python needs --session: the results file its outcomes are compared with")
    found = {} if args.no_run or session is None else \
        {r["case"]: r for r in records.read(paths.results_path(session)) if r["kind"] == "case"}
    recorded = {case_id: r["outcome"] for case_id, r in found.items()}
    collected = collect(python, ["*"])
    for case_id, info in collected["cases"].items():
        info["property_example"] = chosen_example(found.get(case_id), info["expected"])
    op_example.add_scripts(python, collected["cases"])
    out = pathlib.Path(args.out or tempfile.mkdtemp(prefix=f"repro-{session}-"))
    out.mkdir(parents=True, exist_ok=True)
    lengths, limits, mismatches, unexported, scripts = {}, {}, [], [], {}
    for case_id in collected["cases"]:
        try:
            text = build_script(collected["cases"][case_id])
        except ReproError as exc:
            unexported.append(f"{case_id}: {exc}")
            continue
        scripts[case_id] = out / script_name(case_id)
        scripts[case_id].write_text(text)
        lengths[case_id] = text.count("\n")
        limits[case_id] = line_limit(collected["cases"][case_id])
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
    over = sorted((n, c) for c, n in lengths.items() if n > limits[c])
    print(f"{session}: {len(lengths)} scripts in {out}; lines median {statistics.median(lengths.values()):.0f}, "
          f"largest {max(lengths.values())}; over their limit: {len(over)}; outcome mismatches: {len(mismatches)}; "
          f"not exported: {len(unexported)}")
    for line in [f"{c}: {n} lines" for n, c in over] + mismatches + unexported:
        print(f"  {line}")
    return 0 if not (over or mismatches or unexported) else 1
