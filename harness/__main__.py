"""python -m harness COMMAND: the harness's command line."""

from __future__ import annotations

import argparse
import sys


def check_env(args) -> int:
    from harness import envcheck, matrix

    session = matrix.find(args.session)
    found = envcheck.check(session)
    cuda = f" (CUDA {found['cuda']})" if "cuda" in found else ""
    print(f"{session.name}: torch {found['torch']}{cuda}, lightning {found['lightning']} match the session's pins")
    return 0


def report(args) -> int:
    import os
    import pathlib

    from harness import report as reporting

    data = reporting.build(args.dirs or ["results"], args.baseline)
    out = pathlib.Path(args.out or (args.dirs or ["results"])[0])
    for path in reporting.write(data, out):
        print(f"wrote {path}")
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary:
        with open(summary, "a", encoding="utf-8") as handle:
            handle.write(reporting.summary_markdown(data) + "\n")
    regressed = [r for r in (data["baseline"] or {}).get("rows", []) if r["status"] == "regressed"]
    incomplete = [s["name"] for s in data["sessions"] if not s["complete"]]
    if incomplete:
        print(f"incomplete sessions: {', '.join(incomplete)}")
    if regressed:
        print(f"{len(regressed)} regression(s) against the baseline:")
        for row in regressed:
            print(f"  {row['session']}: {row['case']}: {row['baseline']} -> {row['now']} {row['message']}")
        return 1 if args.fail_on_regression else 0
    return 0


def _reproduction_command(command, args) -> int:
    """repro and bisect: 2 for an unknown case id (closest ids named), 1 for other failures."""
    from harness import repro as reproduction

    try:
        return command(args)
    except reproduction.ReproError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2 if isinstance(exc, reproduction.UnknownCase) else 1


def repro(args) -> int:
    from harness import repro as reproduction

    return _reproduction_command(reproduction.command, args)


def bisect(args) -> int:
    from harness import bisect as bisection

    return _reproduction_command(bisection.command, args)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness")
    commands = parser.add_subparsers(dest="command", required=True)
    check = commands.add_parser("check-env", help="check the running environment against a session's pins")
    check.add_argument("session")
    check.set_defaults(func=check_env)
    rep = commands.add_parser("report", help="merge results files into REPORT.md, report.html, report.json")
    rep.add_argument("dirs", nargs="*", metavar="DIR", help="directories of *.jsonl results (default: results)")
    rep.add_argument("--baseline", nargs="+", metavar="DIR", help="results of an earlier run to compare with")
    rep.add_argument("--out", metavar="DIR", help="where the report goes (default: the first DIR)")
    rep.add_argument("--no-fail-on-regression", dest="fail_on_regression", action="store_false",
                     help="exit 0 even when a case regressed against the baseline")
    rep.set_defaults(func=report)
    rpr = commands.add_parser("repro", help="write one case as a standalone script, run it, print an issue-ready report")
    rpr.add_argument("case", metavar="CASE_ID", help="family/variant[params], e.g. checkpoint/plain_checkpoint[cpu-eager-fullgraph]")
    rpr.add_argument("--session", help="whose environment (.nox/SESSION) runs it (default: the newest CPU "
                     "session whose venv exists, else cpu_torch213); built with nox if missing")
    rpr.add_argument("--out", metavar="FILE", help="the script (default results/repro/repro_<case>.py; the report goes beside it as .md)")
    rpr.add_argument("--no-run", action="store_true", help="write the script only")
    rpr.add_argument("--python", metavar="PATH", help="collect and run with this interpreter instead of a session's venv")
    rpr.add_argument("--envdir", metavar="DIR", help="where the session venvs are (default .nox)")
    rpr.set_defaults(func=repro)
    bis = commands.add_parser("bisect", help="run one case across the matrix's torch versions and name where its outcome changes")
    bis.add_argument("case", metavar="CASE_ID")
    bis.add_argument("--from", dest="first", metavar="VERSION", help="oldest torch to run, e.g. 2.1 (default: the oldest row)")
    bis.add_argument("--to", dest="last", metavar="VERSION", help="newest torch to run, e.g. 2.15 (default: the newest row)")
    bis.add_argument("--device", default="cpu", choices=["cpu", "cuda"], help="which sessions of each row (default cpu)")
    bis.add_argument("--no-build", action="store_true", help="skip versions whose venv is missing instead of building it")
    bis.add_argument("--envdir", metavar="DIR", help="where the session venvs are (default .nox)")
    bis.add_argument("--env", action="append", default=[], metavar="VERSION=PYTHON",
                     help="run in this interpreter instead of the matrix's venvs (repeatable; replaces the matrix rows)")
    bis.set_defaults(func=bisect)
    args = parser.parse_args(argv)

    from harness.envcheck import EnvironmentMismatch
    from harness.matrix import MatrixError
    from harness.report import ReportError

    try:
        return args.func(args)
    except (MatrixError, EnvironmentMismatch, ReportError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
