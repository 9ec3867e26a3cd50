"""A pull request's signal on the table: the families it changes, run on the newest CPU row, and the
cells that differ from the committed table, like with like (the same torch build) or with the build
difference named.

    python .github/scripts/pr_table.py families BASE_REF      case files to run, one a line (none: nothing to run)
    python .github/scripts/pr_table.py build TABLE.jsonl      `registry` when the table was measured on the
                                                              registry's build, else `auto` (HARNESS_TORCH_BUILD)
    python .github/scripts/pr_table.py compare TABLE.jsonl RESULTS.jsonl
                                                              the differing cells, appended to $GITHUB_STEP_SUMMARY

A change to cases/conftest.py, harness/matrix.toml or a harness module that runs in a session runs every
family; a change to a case file runs its family.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from packaging.version import Version  # noqa: E402

from harness import records  # noqa: E402
from harness.reuse import session_modules  # noqa: E402


def changed_paths(base: str) -> list[str]:
    done = subprocess.run(["git", "diff", "--name-only", f"{base}...HEAD"], cwd=ROOT, capture_output=True,
                          text=True, check=True)
    return done.stdout.split()


def case_files(paths: list[str]) -> list[str]:
    """The case files a change to `paths` asks to run."""
    every = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "cases").glob("test_*.py"))
    in_sessions = {p.relative_to(ROOT).as_posix() for p in session_modules()}  # what the reuse key holds
    for path in paths:
        if path in in_sessions or path in ("cases/conftest.py", "harness/matrix.toml"):
            return every
    return [path for path in every if path in paths]


def build_of(environment: dict) -> str:
    """A torch version's build: its local label (`cpu`, `cu132`), 'no local label' without one."""
    return Version(environment["torch"]).local or "no local label"


def table_build(table: pathlib.Path) -> str:
    return "auto" if build_of(records.read(table)[0]) == "cpu" else "registry"


def compare(table: list[dict], run: list[dict]) -> str:
    before, after = table[0], run[0]
    run_cases = {r["case"]: r for r in run if r["kind"] == "case"}
    families = {r["family"] for r in run_cases.values()}
    table_cases = {r["case"]: r for r in table if r["kind"] == "case" and r["family"] in families}
    session = after.get("session")
    if build_of(before) == build_of(after):
        like = f"Compared like with like: torch {after['torch']} in the table and in this run."
    else:
        like = (f"**The builds differ**: the table was measured on torch {before['torch']}, this run on torch "
                f"{after['torch']} ({(after.get('torch_wheel') or {}).get('build', 'build not recorded')} build); "
                "a cell may differ because of the build.")
    rows = []
    for case in sorted(set(run_cases) | set(table_cases)):
        old, new = table_cases.get(case), run_cases.get(case)
        if old and new and old["outcome"] == new["outcome"]:
            continue
        message = (new or {}).get("message") or ""
        rows.append(f"| `{case}` | {old['outcome'] if old else '(new case)'} | {new['outcome'] if new else '(gone)'} | "
                    f"{message.splitlines()[0][:100].replace('|', '/') if message else ''} |")
    lines = [f"### {session}: the changed families against the committed table", "",
             f"Families run: {', '.join(sorted(families)) or 'none'}. {like}", ""]
    if rows:
        lines += [f"{len(rows)} cell(s) differ from the committed table:", "",
                  "| case | table | this run | message |", "|---|---|---|---|", *rows]
    else:
        lines += [f"No cell differs from the committed table ({len(run_cases)} cases)."]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    command, args = (argv[0], argv[1:]) if argv else ("", [])
    try:
        if command == "families" and len(args) == 1:
            print("\n".join(case_files(changed_paths(args[0]))))
        elif command == "build" and len(args) == 1:
            print(table_build(pathlib.Path(args[0])))
        elif command == "compare" and len(args) == 2:
            text = compare(records.read(pathlib.Path(args[0])), records.read(pathlib.Path(args[1])))
            target = os.environ.get("GITHUB_STEP_SUMMARY")
            if target:
                with open(target, "a", encoding="utf-8") as handle:
                    handle.write(text)
            print(text)
        else:
            print("usage: pr_table.py families BASE_REF | build TABLE.jsonl | "
                  "compare TABLE.jsonl RESULTS.jsonl", file=sys.stderr)
            return 2
    except (records.ResultsError, subprocess.CalledProcessError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
