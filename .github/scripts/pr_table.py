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
cannot disagree on what a change touches; like the key, a Python file whose code is the same (a
comment, a docstring) is no change.
"""

from __future__ import annotations

import pathlib
import subprocess
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))  # the checkout, for `harness`

from harness.core import matrix, paths, records, versions  # noqa: E402
from harness.core.sources import case_support_files, code_text, family_files, session_modules  # noqa: E402


def git(root: pathlib.Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, errors="replace", check=check)


def changed_paths(base: str, root: pathlib.Path = paths.ROOT) -> list[str]:
    """The files the pull request changes since its merge base with `base`, less the Python files whose
    code is the same (a comment or a docstring): the reuse key and the table's staleness ignore those too."""
    since = git(root, "merge-base", base, "HEAD").stdout.strip()

    def at_base(path: str) -> str | None:
        shown = git(root, "show", f"{since}:{path}", check=False)
        return shown.stdout if shown.returncode == 0 else None

    def now(path: str) -> str | None:
        return (root / path).read_text(encoding="utf-8", errors="replace") if (root / path).is_file() else None

    return [path for path in git(root, "diff", "--name-only", f"{since}..HEAD").stdout.split()
            if changes_code(path, at_base(path), now(path))]


def changes_code(path: str, before: str | None, after: str | None) -> bool:
    """Whether `path` differs in more than comments and docstrings (a Python file, compared as
    harness.core.sources.digest compares it); an added or a removed file (None) does."""
    if before is None or after is None:
        return True
    return code_text(before) != code_text(after) if path.endswith(".py") else before != after


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
