"""A pull request's signal on the table: the families it changes, run on the newest CPU row, against
the committed table of the base branch, on the same torch build (the report does the comparing:
`python -m harness report RUN --baseline TABLE`, red exactly when a cell changes for the worse).

    python .github/scripts/pr_table.py families BASE_REF [SESSION]   case files to run, one a line (none:
                                                              nothing to run); every one when the base
                                                              branch has no table of SESSION (a new row)
    python .github/scripts/pr_table.py table BASE_REF SESSION DIR    the table to compare with, into DIR: the
                                                              base branch's, else the pull request's own
                                                              (it adds the row), else none; says which
    python .github/scripts/pr_table.py build TABLE.jsonl      `registry` when the table was measured on the
                                                              registry's build, else `auto` (HARNESS_TORCH_BUILD)

A change to what every family loads (a harness module that runs in a session: harness/core and
harness/plugin; harness/core/matrix.toml; or a module under cases/ that is not a case file:
cases/conftest.py, cases/programs/, the shared declarations) runs every family; a change to a case
file runs its family. These are the inputs of the reuse key (harness/core/sources.py), so the two
cannot disagree on what a change touches; like the key, a Python file whose code is the same (a
comment, a docstring) is no change. pyproject.toml (the session tools' bounds: hypothesis draws
the property cases' examples) and noxfile.py (how a session installs and runs) run every family too:
their effect reaches the key through what a session installs, which only running shows.
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


def merge_base(base: str, root: pathlib.Path) -> str:
    """Where the pull request left `base`: what it is compared with."""
    return git(root, "merge-base", base, "HEAD").stdout.strip()


def changed_paths(base: str, root: pathlib.Path = paths.ROOT) -> list[str]:
    """The files the pull request changes since its merge base with `base`, less the Python files whose
    code is the same (a comment or a docstring): the reuse key and the table's staleness ignore those too."""
    since = merge_base(base, root)

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
    everywhere = {paths.relative(p) for p in [*session_modules(), *case_support_files(), matrix.MATRIX_FILE,
                                              paths.ROOT / "pyproject.toml", paths.ROOT / "noxfile.py"]}
    if any(path in everywhere for path in changed):
        return every
    return [path for path in every if path in changed]


def table_path(session: str) -> str:
    return f"results/{session}{paths.RESULTS_SUFFIX}"


def base_has_table(base: str, session: str, root: pathlib.Path = paths.ROOT) -> bool:
    return git(root, "cat-file", "-e", f"{merge_base(base, root)}:{table_path(session)}", check=False).returncode == 0


def write_table(base: str, session: str, out: pathlib.Path, root: pathlib.Path = paths.ROOT) -> str:
    """The table `session` is held to, written into `out`: the base branch's (`base`); where the base
    has none (the pull request adds the row), the pull request's own committed one (`head`); else
    `none`, and the run is held to its own outcomes (the report's --expect) only."""
    for source, commit in (("base", merge_base(base, root)), ("head", "HEAD")):
        shown = git(root, "show", f"{commit}:{table_path(session)}", check=False)
        if shown.returncode == 0:
            out.mkdir(parents=True, exist_ok=True)
            (out / pathlib.Path(table_path(session)).name).write_text(shown.stdout, encoding="utf-8")
            return source
    return "none"


def table_build(table: pathlib.Path) -> str:
    """`registry` when the table's torch has no `cpu` local label (the registry's default wheel)."""
    return "auto" if versions.build_label(records.read(table)[0]["torch"]) == "cpu" else "registry"


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    command, args = (argv[0], argv[1:]) if argv else ("", [])
    try:
        if command == "families" and len(args) in (1, 2):
            new_row = len(args) == 2 and not base_has_table(args[0], args[1])
            every = [paths.relative(p) for p in family_files().values()]
            files = every if new_row else case_files(changed_paths(args[0]))
            if files:  # nothing at all where nothing is to run: an empty line read as a list is one blank file
                print("\n".join(files))
        elif command == "table" and len(args) == 3:
            print(write_table(args[0], args[1], pathlib.Path(args[2])))
        elif command == "build" and len(args) == 1:
            print(table_build(pathlib.Path(args[0])) if pathlib.Path(args[0]).is_file() else "auto")
        else:
            print("usage: pr_table.py families BASE_REF [SESSION] | table BASE_REF SESSION DIR | build TABLE.jsonl",
                  file=sys.stderr)
            return 2
    except subprocess.CalledProcessError as error:  # what git said, not the exception's repr
        said = (error.stderr or "").strip().splitlines()
        print(f"error: {' '.join(error.cmd)}: {said[-1] if said else f'exit status {error.returncode}'}",
              file=sys.stderr)
        return 2
    except records.ResultsError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
