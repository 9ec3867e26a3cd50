"""python -m harness COMMAND: the harness's command line."""

from __future__ import annotations

import argparse
import sys


def check_env(args) -> int:
    from harness import envcheck, matrix

    session = matrix.find(args.session)
    found = envcheck.check(session)
    print(f"{session.name}: torch {found['torch']} (CUDA {found['cuda']}), "
          f"lightning {found['lightning']} match the session's pins")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness")
    commands = parser.add_subparsers(dest="command", required=True)
    check = commands.add_parser("check-env", help="check the running environment against a session's pins")
    check.add_argument("session")
    check.set_defaults(func=check_env)
    args = parser.parse_args(argv)

    from harness.envcheck import EnvironmentMismatch
    from harness.matrix import MatrixError

    try:
        return args.func(args)
    except (MatrixError, EnvironmentMismatch) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
