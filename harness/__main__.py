"""python -m harness COMMAND: the harness's command line."""

from __future__ import annotations

import argparse
import os
import pathlib
import re
import sys
import tempfile

from harness.core import paths
from harness.core.errors import BadInput


class OneLineParser(argparse.ArgumentParser):
    """argparse's errors in one line (its usage is what -h prints), exit status 2."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} -h)\n")


def check_env(args) -> int:
    from harness.core import envcheck, matrix

    session = matrix.find(args.session)
    found = envcheck.check(session, gpu=not args.no_gpu)
    cuda = f" (CUDA {found['cuda']})" if found.get("cuda") else ""
    print(f"{session.name}: torch {found['torch']}{cuda}, lightning {found['lightning']} match the session's pins, "
          "and its tools are installed")
    return 0


def run_session(args) -> int:
    from harness.core import runsession

    return runsession.run_here(args.session, args.pytest_args)


def stale(args) -> int:
    """Which rows of the table a fresh clone's `nox` would measure again, by family: 0 whatever they are
    (staleness is reported, not a failure), 1 with --check when one is."""
    from harness.report import staleness

    for table in args.results:
        if not table.is_dir():
            raise BadInput(f"{table}: no such directory of results")
    stale_anywhere = False
    for table in args.results:
        found = staleness.stale_rows(table)
        print(staleness.explain(found, len(paths.results_files(table))))
        stale_anywhere = stale_anywhere or bool(found)
    return 1 if args.check and stale_anywhere else 0


def findings(args) -> int:
    """Each finding's issue text with its root cause, proposed fix and upstream search from the
    catalogue: 0 when all were up to date (or are now); with --check, 1 when one differs, writing none,
    when a finding's script, swept, and its cells on the committed table disagree unexplained, when its
    kind or history says otherwise of its versions than its sweep, or when it gives no history of the code
    it blames."""
    from harness.report import finding_issue, render
    from harness.report import findings as catalogue

    found = catalogue.load()
    patched = patches(found, args)  # first: an issue text shows its patch
    differed = finding_issue.write_issues(found, check=args.check)
    for path in differed:
        print(f"{'differs' if args.check else 'wrote'}: {path.relative_to(paths.ROOT)}")
    if not args.check:
        return 1 if patched else 0
    unexplained = render.build([paths.results_dir()])["findings_unexplained"]
    unexplained += [line for finding in found for line in catalogue.history_against_sweep(finding)]
    for line in unexplained:
        print(f"disagrees: {line}")
    incomplete = catalogue.without_history(found)
    for line in incomplete:
        print(f"incomplete: {line}")
    return 1 if differed or unexplained or incomplete or patched else 0


def patches(found: list, args) -> list[str]:
    """Each finding's one upstream patch checked (with --upstream, against the stored test files and the
    main row's torch; without --check, written anew there): what is wrong, printed."""
    from harness.core import matrix, venvs
    from harness.report import upstream_patch

    torch = None
    if args.upstream:
        if not args.upstream.is_dir():
            raise BadInput(f"--upstream {args.upstream}: not a directory")
        python = args.python or str(venvs.venv_python(matrix.main_session().name))
        torch = upstream_patch.released_torch(python)
        if torch.version != matrix.main_session().torch:
            raise BadInput(f"the patches are against torch {matrix.main_session().torch}; {python} has {torch.version}")
    elif not args.check:
        return []  # nothing to write them from
    problems = [line for finding in found
                for line in upstream_patch.check_patch(finding, args.upstream, torch, write=not args.check)]
    for line in problems:
        print(f"patch: {line}")
    return problems


def regressions(args) -> int:
    """Each finding's regression tests in each row's venv, held to the committed table (harness.report.regressions)."""
    from harness.report import regressions as held
    from harness.tools import testfile

    if len(args.results) > 1:
        raise BadInput("regressions holds the tests to one table: give --results one DIR")
    return held.check(args.sessions, testfile.row_python, testfile.run_file, python=args.python,
                      results=args.results[0], numbers=args.finding)


def report(args) -> int:
    """Write the report; its exit status is the nightly's: 1 for each reason printed (an expected
    session without a complete results file; a regression or a new failing case against the
    baseline unless --no-fail-on-regression), 2 for bad input (nothing written)."""
    from harness.report import committed
    from harness.report import render as reporting

    dirs = args.dirs or [paths.results_dir()]
    expect = list(dict.fromkeys(name for item in args.expect or [] for name in re.split(r"[,\s]+", item) if name))
    with tempfile.TemporaryDirectory(prefix="harness-committed-") as scratch:
        previous, source = args.previous, None
        if previous is None and args.previous_unavailable is None and args.since_committed:
            # by default, what changed since the table as last committed (for information)
            source = committed.last_committed(pathlib.Path(dirs[0]), pathlib.Path(scratch))
            if isinstance(source, committed.CommittedTable):
                previous = [source.directory]
        data = reporting.build(dirs, args.baseline, expect=expect, fail_on_regression=args.fail_on_regression,
                               previous_dirs=previous, previous_unavailable=args.previous_unavailable,
                               previous_source=source, nights_dirs=args.nights)
    out = pathlib.Path(args.out or dirs[0])
    for path in reporting.write(data, out):
        print(f"wrote {path}")
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary:
        with open(summary, "a", encoding="utf-8") as handle:
            handle.write(reporting.summary_markdown(data) + "\n")
    result = data["verdict"]
    for note in result["notes"]:
        print(f"note: {note}")
    for reason in result["reasons"]:
        print(f"fails: {reason}")
    if os.environ.get("GITHUB_ACTIONS") == "true":
        for line in reporting.annotations(data):
            print(line)
    return result["status"]


def repro(args) -> int:
    from harness.core import caseid
    from harness.tools import preflight
    from harness.tools.repro import command as reproduction

    if args.case and not args.all:  # bad input costs no download: the source, then results and venvs at hand
        caseid.check_exists(args.case)
        if not args.python:
            preflight.check_session(args.session)
            preflight.check_case(args.case, args.envdir, args.session, args.results)
    return reproduction.command(args)


def bisect(args) -> int:
    from harness.core import caseid
    from harness.tools import bisect as bisection
    from harness.tools import preflight, targets

    if bool(args.case) == bool(args.script):
        raise BadInput("bisect takes a CASE_ID or --script SCRIPT (one of them)")
    if args.script:
        args.script = preflight.check_script(args.script)
    targets.targets_of(args)  # an unknown row or an empty range, before the case
    if args.case:
        caseid.check_exists(args.case)
    if args.case and not args.env:
        preflight.check_case(args.case, args.envdir)
    return bisection.command(args)


def sweep(args) -> int:
    from harness.tools import sweep as sweeping

    return sweeping.command(args)


def reduce(args) -> int:
    from harness.tools.reduce import command as reduction

    return reduction.command(args)


def gpu_step(args) -> int:
    from harness.tools.gpu import cli

    return cli.main(cli.parser(OneLineParser).parse_args(args.step_args))


def explore(args) -> int:
    from harness.tools import explore as exploring

    return exploring.command(args.session, args.examples, args.pytest_args)


def lightning_newest(args) -> int:
    from harness.tools import lightning_releases

    return lightning_releases.command(args)


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
    commands = main.add_subparsers(dest="command", required=True)
    check = commands.add_parser("check-env", help="check the running environment against a session's pins")
    check.add_argument("session")
    check.add_argument("--no-gpu", action="store_true",
                       help="a CUDA session on a machine without a GPU: check the wheel's CUDA, not the device")
    check.set_defaults(func=check_env)
    run = commands.add_parser("run", help="run a session's cases in this environment, installing nothing (a GPU "
                              "machine or a container without a registry): the pin check, records and JUnit of "
                              "`nox -s SESSION`")
    run.add_argument("session")
    run.add_argument("pytest_args", nargs=argparse.REMAINDER, metavar="...",
                     help="after the session: pytest arguments that narrow it, as after `nox -s SESSION --`")
    run.set_defaults(func=run_session)
    stl = commands.add_parser("stale", help="which rows of the table were measured with other code or installs "
                              "than this checkout's, by family, and the command that measures them again")
    add_results(stl)
    stl.add_argument("--check", action="store_true", help="exit 1 when a row is stale")
    stl.set_defaults(func=stale)
    fnd = commands.add_parser("findings", help="write each finding's issue text (results/reductions/*.md) with its "
                              "root cause, proposed fix and upstream search from findings.toml and fixes/")
    fnd.add_argument("--check", action="store_true", help="write nothing; exit 1 when an issue text differs")
    fnd.add_argument("--upstream", type=pathlib.Path, metavar="DIR", help="stored copies of upstream test files, "
                     "DIR/COMMIT/PATH: write each finding's upstream patch (fixes/SCRIPT.patch), or with --check "
                     "compare it and `git apply --check` it")
    fnd.add_argument("--python", metavar="PYTHON", help="with --upstream: an interpreter with the main row's torch, "
                     "whose torch/ files the patches are against (default: that session's venv under .nox)")
    fnd.set_defaults(func=findings)
    reg = commands.add_parser("regressions", help="run each finding's regression tests in each row's venv and hold "
                              "them to what the table says of that row (exit 1 where one disagrees)")
    reg.add_argument("sessions", nargs="+", metavar="SESSION", help="rows of the table, e.g. cpu_torch215")
    reg.add_argument("--python", metavar="PYTHON", help="with one session: an interpreter with the row's torch "
                     "(default: the session's venv under .nox)")
    reg.add_argument("--finding", type=int, action="append", metavar="N", help="only finding N (repeatable)")
    add_results(reg)
    reg.set_defaults(func=regressions)
    rep = commands.add_parser("report", help="merge results files into REPORT.md, report.html, report.json")
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
    rep.set_defaults(func=report)
    rpr = commands.add_parser("repro", help="write one case as a short standalone script, run it, print an issue")
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
    add_results(rpr)  # the issue's table of versions
    rpr.add_argument("--jobs", type=int, default=1, metavar="N", help="with --all, scripts run at a time (default 1)")
    rpr.add_argument("--all", action="store_true", help="every case of --session, each script run and its outcome "
                     "compared with the session's results file; exit 1 on a mismatch or a script over 120 lines")
    rpr.set_defaults(func=repro)
    bis = commands.add_parser("bisect", help="find the torch version where a case's outcome changes")
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
    bis.set_defaults(func=bisect)
    swp = commands.add_parser("sweep", help="run a script in the environment of every torch row in a range")
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
    swp.set_defaults(func=sweep)
    red = commands.add_parser("reduce", help="the smallest plain-torch script that still shows a case's bug")
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
    red.set_defaults(func=reduce)
    xpl = commands.add_parser("explore", help="the property cases with many more examples in a session's venv, "
                              "shrinking what fails; records in results/explore/")
    xpl.add_argument("session", nargs="?", metavar="SESSION", help="a matrix session, e.g. cpu_torch215")
    xpl.add_argument("--examples", type=int, default=EXPLORE_EXAMPLES, metavar="N",
                     help=f"examples per property and cell (default {EXPLORE_EXAMPLES})")
    xpl.set_defaults(func=explore, takes_pytest_args=True)  # the arguments it does not know go to pytest
    exp = commands.add_parser("explore-summary", help="what an explore run found: its failing signatures, new "
                              "ones first, with their shrunk examples")
    exp.add_argument("dirs", nargs="*", metavar="DIR", help="the run's results (default: the results dir's explore/); "
                     "several: the findings of them all, grouped")
    exp.add_argument("--session", default=None, help="only this session's results file")
    exp.set_defaults(func=explore_summary)
    lit = commands.add_parser("lightning-newest", help="the newest Lightning that supports each torch row, from "
                              "the registry's metadata, against the table's `lightning_newest`")
    lit.add_argument("--write", action="store_true", help="record the resolved values in the table")
    lit.add_argument("--matrix", help=argparse.SUPPRESS)  # another table (the tests'); default the matrix's
    lit.set_defaults(func=lightning_newest)
    gpu = commands.add_parser("gpu", add_help=False, help="a CUDA row on a GPU machine, step by step: wheels, "
                              "preflight, row, alone, cpu-cells (python -m harness gpu -h)")
    gpu.add_argument("step_args", nargs=argparse.REMAINDER)
    gpu.set_defaults(func=gpu_step)
    return main


def exit_code(error: Exception) -> int | None:
    """Every error the command line reports, as one line and an exit status: 2 for what the user
    asked for that does not exist or does not fit (BadInput: a session, a case, a version range, a
    results file, an environment that does not match its pins), 1 for what could not be done; None
    for anything else, a bug of the harness, whose traceback is the useful part."""
    from harness.core.venvs import SessionError
    from harness.tools.repro.errors import ReproError

    for kinds, code in ((BadInput, 2), ((ReproError, SessionError, OSError), 1)):
        if isinstance(error, kinds):
            return code
    return None


# Where an import name is not the distribution's name (`pip install` wants the latter).
DISTRIBUTIONS = {"jinja2": "Jinja2", "pysource_minimize": "pysource-minimize", "yaml": "PyYAML"}


def missing_package(error: ModuleNotFoundError) -> str:
    """One line for a dependency this Python lacks: which package, and how to install it."""
    module = (error.name or "?").split(".")[0]
    package = DISTRIBUTIONS.get(module, module)
    return (f"missing package {package!r} (No module named {error.name!r}) in {sys.executable}: install the "
            f"project's dependencies with `python -m pip install -e '.[dev]'` in the checkout, "
            f"or `python -m pip install {package}`")


def explore_summary(args) -> int:
    """Prints (and appends to $GITHUB_STEP_SUMMARY) what an explore run found; 0 whatever it found."""
    from harness.report import explore

    folders = [pathlib.Path(d) for d in args.dirs] or [paths.results_subdir(paths.EXPLORE)]
    files = [f for folder in folders for f in explore.results_files(folder, args.session)]
    environments, cells = explore.explored(files)
    text = explore.markdown(environments, cells)
    print(text)
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary:
        with open(summary, "a", encoding="utf-8") as handle:
            handle.write(text + "\n")
    return 0


def main(argv=None) -> int:
    try:
        return run(argv)
    except ModuleNotFoundError as error:
        if not error.name or error.name.split(".")[0] == "harness":
            raise  # the harness itself is broken: its traceback is the useful part
        print(f"error: {missing_package(error)}", file=sys.stderr)
        return 2


def run(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["gpu"]:  # its steps parse their own options (argparse's REMAINDER cannot pass `-h` on)
        args = argparse.Namespace(command="gpu", func=gpu_step, step_args=argv[1:])
    else:
        args, unknown = parser().parse_known_args(argv)
        if getattr(args, "takes_pytest_args", False):
            args.pytest_args = unknown
        elif unknown:
            parser().error(f"unrecognized arguments: {' '.join(unknown)}")
    if args.command == "repro" and not args.case and not args.all:
        parser().error("repro needs a CASE_ID, or --all with --session")
    try:
        return args.func(args)
    except Exception as error:
        code = exit_code(error)
        if code is None:
            raise
        print(f"error: {one_line(error)}", file=sys.stderr)
        return code


def one_line(error: Exception) -> str:
    """A message of several lines (a list of close case ids) joined into one."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    if not lines:
        return type(error).__name__
    head = lines[0].rstrip(":")
    return head + (": " + ", ".join(lines[1:]) if lines[1:] else "")


if __name__ == "__main__":
    sys.exit(main())
