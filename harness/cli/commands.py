"""What each `python -m harness` command does, given its parsed arguments (harness.cli.options): each
checks its input, then hands over to the folder that does the work; its exit status is returned."""

from __future__ import annotations

import os
import pathlib
import re
import tempfile

from harness.cli import OneLineParser
from harness.core import paths
from harness.core.errors import BadInput


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


def ambient(args) -> int:
    from harness.core import matrix
    from harness.tools import ambient as surveying

    for name in args.sessions:
        matrix.find(name)  # an unknown session, before any venv is looked at
    if args.python and len(args.sessions) != 1:
        raise BadInput("--python surveys one interpreter: name its one SESSION")
    return surveying.command(args)


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
