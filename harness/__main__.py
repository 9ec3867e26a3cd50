"""python -m harness COMMAND: the harness's command line (harness.cli: the commands and their options)."""

from __future__ import annotations

import argparse
import sys

from harness.cli import commands
from harness.cli.options import parser
from harness.core.errors import BadInput


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
        args = argparse.Namespace(command="gpu", func=commands.gpu_step, step_args=argv[1:])
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
