"""`python -m harness gpu STEP ...`: a CUDA row on a GPU machine, step by step (harness.tools.gpu)."""

from __future__ import annotations

import argparse
import pathlib
import signal

from harness.tools.gpu import preflight, row, wheels


def _session(parser) -> None:
    parser.add_argument("session", help="a CUDA session of the matrix, e.g. cuda13_torch211")


def _carried(parser) -> None:
    parser.add_argument("--wheels", type=pathlib.Path, default=None,
                        help="a folder of wheels carried in (`gpu wheels`): those this environment lacks are installed "
                             "into --site, first on PYTHONPATH")
    parser.add_argument("--site", type=pathlib.Path, default=None,
                        help="where carried wheels go (default: beside --wheels)")


def _budget(parser, default: float | None) -> None:
    parser.add_argument("--budget", type=float, default=default, help="seconds this step may take (stopped at it)")


def _seconds(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds, 1 or more")
    return int(text)


def _case_timeout(parser) -> None:
    parser.add_argument("--case-timeout", type=_seconds, default=None,
                        help="seconds a case may run, in place of the row's case_timeout ($HARNESS_CASE_TIMEOUT)")


def parser(base=argparse.ArgumentParser) -> argparse.ArgumentParser:
    top = base(prog="python -m harness gpu", description=__doc__.splitlines()[0])
    steps = top.add_subparsers(dest="step", required=True)
    get = steps.add_parser("wheels", help="here, with a registry: download the wheels a GPU machine lacks")
    _session(get)
    get.add_argument("--python", default="3.12", help="the GPU machine's Python (default 3.12)")
    get.add_argument("--dest", type=pathlib.Path, default=pathlib.Path(".whl"))
    pre = steps.add_parser("preflight", help=f"GO or NO-GO, in at most {preflight.PREFLIGHT_SECONDS} s")
    _session(pre)
    _carried(pre)
    pre.add_argument("--work", type=pathlib.Path, default=None,
                     help="where its runs write (default: a new temporary folder)")
    run = steps.add_parser("row", help="the session's cases within a budget, with progress and a summary")
    _session(run)
    _carried(run)
    run.add_argument("--out", type=pathlib.Path, required=True)
    _budget(run, None)
    _case_timeout(run)
    one = steps.add_parser("alone", help="cells of a row run again, each alone in a fresh process")
    _session(one)
    _carried(one)
    one.add_argument("--row", type=pathlib.Path, required=True, help="the --out of `gpu row`")
    one.add_argument("--out", type=pathlib.Path, required=True)
    one.add_argument("--count", type=int, default=20)
    _budget(one, None)
    _case_timeout(one)
    cpu = steps.add_parser("cpu-cells", help="the row's CPU session on this machine, against the committed CPU row")
    _session(cpu)
    _carried(cpu)
    cpu.add_argument("--out", type=pathlib.Path, required=True)
    _budget(cpu, None)
    return top


def main(args) -> int:
    from harness.core import matrix

    # The steps stop their runs with SIGINT, as Ctrl-C would. A shell starts a background job (`cmd &`
    # in a script) with SIGINT ignored, and every run would inherit that and could not be stopped: the
    # runs get the default again (a Python handler is reset at exec, an ignored signal is not).
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    spec = matrix.find(args.session)
    if args.step == "wheels":
        found = wheels.download(spec, args.python, args.dest)
        print(f"{len(found)} wheels for {spec.name} on Python {args.python} in {args.dest}: "
              f"{', '.join(p.name for p in found)}")
        return 0
    if getattr(args, "wheels", None) is not None:
        site = args.site or args.wheels.resolve().parent / f"{args.wheels.name}-site"
        if args.step != "preflight":  # the preflight installs them as its check of the pins
            wheels.install(spec, args.wheels, site)
    if args.step == "preflight":
        site = args.site or (args.wheels.resolve().parent / f"{args.wheels.name}-site" if args.wheels else None)
        return 0 if preflight.preflight(spec.name, args.wheels, args.work, site=site) else 1
    if args.step == "row":
        return 0 if row.row(spec.name, args.out, args.budget, args.case_timeout) else 1
    if args.step == "alone":
        return 0 if row.alone(spec.name, args.row, args.out, args.count, args.budget, args.case_timeout) else 1
    return 0 if row.cpu_cells(spec.name, args.out, args.budget) else 1
