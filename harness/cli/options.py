"""Every command of `python -m harness` and its options, declared once (the model: nox's _options.py);
an option several commands share is one function here (add_results, add_device, ...)."""

from __future__ import annotations

import argparse
import pathlib

from harness.cli import OneLineParser, commands
from harness.core import paths

EXPLORE_EXAMPLES = 200  # explore's default, per property and cell: declared with its option (parser)


def add_results(command) -> None:
    """Where a command reads results files: one option, one meaning (the default read when the parser is built, so
    that $HARNESS_RESULTS_DIR of the run applies)."""
    command.add_argument("--results", nargs="+", metavar="DIR", type=pathlib.Path, default=[paths.results_dir()],
                         help="directories of results files to read instead of the results dir (the table)")


def add_device(command) -> None:
    command.add_argument("--device", default="cpu", choices=["cpu", "cuda"],
                         help="which sessions of each row (default cpu)")


def add_envdir(command) -> None:
    command.add_argument("--envdir", metavar="DIR", help="where the session venvs are (default .nox)")


def add_no_build(command) -> None:
    command.add_argument("--no-build", action="store_true", help="use only the environments that exist (build none)")


def add_script_timeout(command, when: str = "") -> None:
    command.add_argument("--timeout", type=float, default=600.0,
                         help=f"{when}seconds a run of a script may take (default 600); past it, `timeout`")


def add_axis(command, first: str, last: str) -> None:
    """--along and the range along it, the same for bisect and sweep."""
    command.add_argument("--along", choices=["torch", "lightning"], default="torch",
                         help="torch: across the matrix's torch rows (default); lightning: across Lightning releases "
                              "at the row --torch names")
    command.add_argument("--torch", metavar="VERSION", help="with --along lightning: the torch row to hold, e.g. 2.5")
    command.add_argument("--from", dest="first", metavar="VERSION", help=f"oldest torch, e.g. {first} (default: the "
                         "oldest row); along lightning the oldest Lightning (default: the row's own)")
    command.add_argument("--to", dest="last", metavar="VERSION", help=f"newest torch, e.g. {last} (default: the newest "
                         "row); along lightning the newest Lightning (default: the newest that supports the torch)")


def parser() -> argparse.ArgumentParser:
    main = OneLineParser(prog="python -m harness")
    subparsers = main.add_subparsers(dest="command", required=True)
    check = subparsers.add_parser("check-env", help="check the running environment against a session's pins")
    check.add_argument("session")
    check.add_argument("--no-gpu", action="store_true",
                       help="a CUDA session on a machine without a GPU: check the wheel's CUDA, not the device")
    check.set_defaults(func=commands.check_env)
    run = subparsers.add_parser("run", help="run a session's cases in this environment, installing nothing (a GPU "
                              "machine or a container without a registry): the pin check, records and JUnit of "
                              "`nox -s SESSION`")
    run.add_argument("session")
    run.add_argument("pytest_args", nargs=argparse.REMAINDER, metavar="...",
                     help="after the session: pytest arguments that narrow it, as after `nox -s SESSION --`")
    run.set_defaults(func=commands.run_session)
    stl = subparsers.add_parser("stale", help="which rows of the table were measured with other code or installs "
                              "than this checkout's, by family, and the command that measures them again")
    add_results(stl)
    stl.add_argument("--check", action="store_true", help="exit 1 when a row is stale")
    stl.set_defaults(func=commands.stale)
    fnd = subparsers.add_parser("findings", help="write each finding's issue text (results/reductions/*.md) with its "
                              "root cause, proposed fix and upstream search from findings.toml and fixes/")
    fnd.add_argument("--check", action="store_true", help="write nothing; exit 1 when an issue text differs")
    fnd.add_argument("--upstream", type=pathlib.Path, metavar="DIR", help="stored copies of upstream test files, "
                     "DIR/COMMIT/PATH: write each finding's upstream patch (fixes/SCRIPT.patch), or with --check "
                     "compare it and `git apply --check` it")
    fnd.add_argument("--python", metavar="PYTHON", help="with --upstream: an interpreter with the main row's torch, "
                     "whose torch/ files the patches are against (default: that session's venv under .nox)")
    fnd.set_defaults(func=commands.findings)
    reg = subparsers.add_parser("regressions", help="run each finding's regression tests in each row's venv and hold "
                              "them to what the table says of that row (exit 1 where one disagrees)")
    reg.add_argument("sessions", nargs="+", metavar="SESSION", help="rows of the table, e.g. cpu_torch215")
    reg.add_argument("--python", metavar="PYTHON", help="with one session: an interpreter with the row's torch "
                     "(default: the session's venv under .nox)")
    reg.add_argument("--finding", type=int, action="append", metavar="N", help="only finding N (repeatable)")
    add_results(reg)
    reg.set_defaults(func=commands.regressions)
    rep = subparsers.add_parser("report", help="merge results files into REPORT.md, report.html, report.json")
    rep.add_argument("dirs", nargs="*", metavar="DIR", help="directories of *.jsonl results (default: results)")
    rep.add_argument("--baseline", nargs="+", metavar="DIR", help="results of an earlier run to compare with")
    rep.add_argument("--previous", nargs="+", metavar="DIR",
                     help="results of the run before, compared for information only (never sets the exit status)")
    rep.add_argument("--nights", nargs="+", metavar="DIR",
                     help="results of earlier nights, outside git: measurements the cells that flip are learned from")
    rep.add_argument("--no-since-committed", dest="since_committed", action="store_false",
                     help="without --previous, the report compares with the table as last committed (git), for "
                          "information; this leaves that out")
    rep.add_argument("--previous-unavailable", metavar="REASON",
                     help="the run before could not be fetched: the report states why, and exits 1")
    rep.add_argument("--out", metavar="DIR", help="where the report goes (default: the first DIR)")
    rep.add_argument("--expect", nargs="+", metavar="SESSION", default=[],
                     help="sessions that should have produced results: exit 1 when one has no results file or is "
                          "incomplete (names may also be comma-separated; put DIRs before this option)")
    rep.add_argument("--no-fail-on-regression", dest="fail_on_regression", action="store_false",
                     help="exit 0 even when, against the baseline, a case regressed or a new case fails")
    rep.set_defaults(func=commands.report)
    rpr = subparsers.add_parser("repro", help="write one case as a short standalone script, run it, print an issue")
    rpr.add_argument("case", metavar="CASE_ID", nargs="?",
                     help="family/variant[params], e.g. checkpoint/plain_checkpoint[cpu-eager-fullgraph]")
    rpr.add_argument("--session", help="whose environment (.nox/SESSION) runs it (default: the newest CPU session "
                     "whose venv exists); built with nox if missing")
    rpr.add_argument("--out", metavar="PATH", help="the script (default results/repro/repro_<case>.py; the issue goes "
                     "beside it as .md); with --all, the directory of the scripts")
    rpr.add_argument("--no-run", action="store_true", help="write the script only")
    rpr.add_argument("--python", metavar="PATH",
                     help="collect and run with this interpreter instead of a session's venv")
    add_envdir(rpr)
    add_results(rpr)  # the table of versions
    rpr.add_argument("--jobs", type=int, default=1, metavar="N", help="with --all, scripts run at a time (default 1)")
    rpr.add_argument("--all", action="store_true", help="every case of --session, each script run and its outcome "
                     "compared with the session's results file; exit 1 on a mismatch or a script over 120 lines")
    rpr.set_defaults(func=commands.repro)
    bis = subparsers.add_parser("bisect", help="find the torch version where a case's outcome changes")
    bis.add_argument("case", metavar="CASE_ID", nargs="?")
    bis.add_argument("--script", metavar="SCRIPT", help="bisect a plain script instead of a case (classified as "
                     "sweep classifies it: exit 0 pass, 125 skip, anything else fail)")
    add_script_timeout(bis, when="with --script: ")
    add_axis(bis, "2.1", "2.15")
    add_device(bis)
    add_no_build(bis)
    bis.add_argument("--all", action="store_true", help="run every version in the range, not a bisection")
    add_envdir(bis)
    bis.add_argument("--env", action="append", default=[], metavar="VERSION=PYTHON",
                     help="bisect over these interpreters instead of the matrix's venvs (repeatable)")
    bis.set_defaults(func=commands.bisect)
    swp = subparsers.add_parser("sweep", help="run a script in the environment of every torch row in a range")
    swp.add_argument("script", metavar="SCRIPT")
    add_axis(swp, "2.12", "2.15")
    add_device(swp)
    add_no_build(swp)
    add_envdir(swp)
    add_script_timeout(swp)
    swp.add_argument("--memory-limit", metavar="SIZE", help="data memory of the script: N%% of this machine's or "
                     "a size (8G); 0 for none (default $HARNESS_MEMORY_LIMIT or 75%%, as sessions)")
    swp.add_argument("--env", action="append", default=[], metavar="VERSION=PYTHON",
                     help="run in these interpreters instead of the matrix's venvs (repeatable): a torch-only venv, "
                          "say")
    swp.add_argument("--out", metavar="PATH", help="the version table, Markdown (default results/sweep/SCRIPT.md)")
    swp.add_argument("--issue", action="store_true", help="also write the issue in PyTorch's bug template beside "
                     "the table (.issue.md): versions, output and collect_env of the newest failing one")
    swp.set_defaults(func=commands.sweep)
    red = subparsers.add_parser("reduce", help="the smallest plain-torch script that still shows a case's bug")
    red.add_argument("case", metavar="CASE_ID", nargs="?")
    red.add_argument("--script", metavar="SCRIPT", help="reduce this script instead of a case's export")
    red.add_argument("--session", required=True, help="the session (torch row) where it fails")
    red.add_argument("--passing", metavar="SESSION", help="a session where it must pass (default: for a case, a row "
                     "where the matrix records a pass or fixed, a built one first, else the nearest)")
    red.add_argument("--out", metavar="PATH", help="the reduced script (default results/reduce/reduced_<case>.py)")
    red.add_argument("--max-runs", type=int, default=800, help="candidate runs the reduction may make, then the "
                     "smallest so far (default 800): work, so a loaded machine gives the same script as a quiet one")
    red.add_argument("--time-limit", type=float, help="seconds of reduction besides (default: none); a script "
                     "stopped by it says so in its header")
    add_script_timeout(red)
    add_no_build(red)
    add_envdir(red)
    red.set_defaults(func=commands.reduce)
    xpl = subparsers.add_parser("explore", help="the property cases with many more examples in a session's venv, "
                              "shrinking what fails; records in results/explore/")
    xpl.add_argument("session", nargs="?", metavar="SESSION", help="a matrix session, e.g. cpu_torch215")
    xpl.add_argument("--examples", type=int, default=EXPLORE_EXAMPLES, metavar="N",
                     help=f"examples per property and cell (default {EXPLORE_EXAMPLES})")
    xpl.set_defaults(func=commands.explore, takes_pytest_args=True)  # the arguments it does not know go to pytest
    exp = subparsers.add_parser("explore-summary", help="what an explore run found: its failing signatures, new "
                              "ones first, with their shrunk examples")
    exp.add_argument("dirs", nargs="*", metavar="DIR", help="the run's results (default: the results dir's explore/); "
                     "several: the findings of them all, grouped")
    exp.add_argument("--session", default=None, help="only this session's results file")
    exp.set_defaults(func=commands.explore_summary)
    lit = subparsers.add_parser("lightning-newest", help="the newest Lightning that supports each torch row, from "
                              "the registry's metadata, against the table's `lightning_newest`")
    lit.add_argument("--write", action="store_true", help="record the resolved values in the table")
    lit.add_argument("--matrix", help=argparse.SUPPRESS)  # another table (the tests'); default the matrix's
    lit.set_defaults(func=commands.lightning_newest)
    amb = subparsers.add_parser("ambient", help="the global states each torch row lets a user set (its setters, "
                                "found in its own namespace, each value tried and restored), written to "
                                "results/ambient/ and printed across the rows")
    amb.add_argument("sessions", nargs="*", metavar="SESSION", help="the rows (default: each plain CPU row)")
    amb.add_argument("--python", help="the interpreter to survey, for one SESSION (default: its venv, which "
                     "`nox -s SESSION --install-only` builds)")
    amb.set_defaults(func=commands.ambient)
    gpu = subparsers.add_parser("gpu", add_help=False, help="a CUDA row on a GPU machine, step by step: wheels, "
                              "preflight, row, alone, cpu-cells (python -m harness gpu -h)")
    gpu.add_argument("step_args", nargs=argparse.REMAINDER)
    gpu.set_defaults(func=commands.gpu_step)
    return main


