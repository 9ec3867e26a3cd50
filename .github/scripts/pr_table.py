"""A pull request's signal on the table: the families it changes, run on the newest CPU row, against
the committed table of the base branch, on the same torch build (the report does the comparing:
`python -m harness report RUN --baseline TABLE`, red exactly when a cell changes for the worse).

    python .github/scripts/pr_table.py families BASE_REF      case files to run, one a line (none: nothing to run)
    python .github/scripts/pr_table.py build TABLE.jsonl      `registry` when the table was measured on the
                                                              registry's build, else `auto` (HARNESS_TORCH_BUILD)

A change to what every family loads (a harness module that runs in a session: harness/core and
harness/plugin; harness/core/matrix.toml; or a module under cases/ that is not a case file:
cases/conftest.py, cases/programs/, the shared declarations) runs every family; a change to a case
file runs its family. These are the inputs of the reuse key (harness/core/sources.py), so the two
cannot disagree on what a change touches.
"""

from __future__ import annotations

import pathlib
import subprocess
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))  # the checkout, for `harness`

from harness.core import matrix, paths, records, versions  # noqa: E402
from harness.core.sources import case_support_files, family_files, session_modules  # noqa: E402


def changed_paths(base: str) -> list[str]:
    done = subprocess.run(["git", "diff", "--name-only", f"{base}...HEAD"], cwd=paths.ROOT, capture_output=True,
                          text=True, check=True)
    return done.stdout.split()


def case_files(changed: list[str]) -> list[str]:
    """The case files a change to the files `changed` asks to run."""
    every = [paths.relative(p) for p in family_files().values()]
    everywhere = {paths.relative(p) for p in [*session_modules(), *case_support_files(), matrix.MATRIX_FILE]}
    if any(path in everywhere for path in changed):
        return every
    return [path for path in every if path in changed]


def table_build(table: pathlib.Path) -> str:
    """`registry` when the table's torch has no `cpu` local label (the registry's default wheel)."""
    return "auto" if versions.build_label(records.read(table)[0]["torch"]) == "cpu" else "registry"


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    command, args = (argv[0], argv[1:]) if argv else ("", [])
    try:
        if command == "families" and len(args) == 1:
            print("\n".join(case_files(changed_paths(args[0]))))
        elif command == "build" and len(args) == 1:
            print(table_build(pathlib.Path(args[0])))
        else:
            print("usage: pr_table.py families BASE_REF | build TABLE.jsonl", file=sys.stderr)
            return 2
    except (records.ResultsError, subprocess.CalledProcessError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
