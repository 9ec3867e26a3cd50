"""A session job's step summary: what its cases did and its failing groups (family and outcome),
read from its results file. The job stays green whatever its cases did: the nightly's colour is the
report's against the baseline; this page says what failed without opening the report.

    python .github/scripts/session_summary.py SESSION [RESULTS_DIR]

Appends markdown to $GITHUB_STEP_SUMMARY (prints it without one) and prints a `::warning` annotation
at the case's file and line for the first failing cases. Exit 0 always, but 2 on bad input.
"""

from __future__ import annotations

import os
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))

from harness.core import paths, records  # noqa: E402
from harness.core.outcomes import OUTCOMES  # noqa: E402

ANNOTATED = 10  # GitHub shows at most 10 warnings of a step


def failing_groups(cases: list[dict]) -> dict[tuple[str, str], list[dict]]:
    """The cases whose outcome fails a session, by (family, outcome), most first."""
    groups: dict[tuple[str, str], list[dict]] = {}
    for case in cases:
        if OUTCOMES[case["outcome"]].fails_session:
            groups.setdefault((case["family"], case["outcome"]), []).append(case)
    return dict(sorted(groups.items(), key=lambda item: (-len(item[1]), item[0])))


def _cell(text) -> str:
    return str(text or "").splitlines()[0][:120].replace("|", "/") if text else ""


def summary(session: str, found: list[dict] | None, path: pathlib.Path) -> str:
    if not found:
        return (f"### {session}\n\nNo results file ({path}): the session did not run its cases. "
                "The report fails the nightly.\n")
    environment, cases = found[0], [r for r in found if r["kind"] == "case"]
    finished = found[-1]["kind"] == "end"
    counts: dict[str, int] = {}
    for case in cases:
        counts[case["outcome"]] = counts.get(case["outcome"], 0) + 1
    wheel = environment.get("torch_wheel") or {}
    lines = [f"### {session}", "",
             f"torch {environment.get('torch')} ({wheel.get('build', 'build not recorded')} build), "
             f"Lightning {environment.get('lightning')}, Python {environment.get('python')}: "
             + ", ".join(f"{n} {o}" for o, n in sorted(counts.items())) + f" of {len(cases)} cases"
             + ("" if finished else " (**the run did not finish**)")
             + (f"; {sum(1 for c in cases if c.get('reused_from'))} carried over from the last nightly"
                if any(c.get("reused_from") for c in cases) else ""), ""]
    groups = failing_groups(cases)
    if not groups:
        lines += ["No failing case.", ""]
    else:
        lines += ["| family | outcome | cases | first case | message |", "|---|---|---|---|---|"]
        lines += [f"| {family} | {outcome} | {len(group)} | `{group[0]['case']}` | {_cell(group[0].get('message'))} |"
                  for (family, outcome), group in groups.items()]
        lines += ["", "Whether this fails the nightly is the report's call, against the baseline.", ""]
    return "\n".join(lines) + "\n"


def _property(text: str) -> str:
    """A workflow command's property value: its separators escaped."""
    for char, code in (("%", "%25"), ("\r", "%0D"), ("\n", "%0A"), (":", "%3A"), (",", "%2C")):
        text = text.replace(char, code)
    return text


def annotations(found: list[dict]) -> list[str]:
    failing = [c for group in failing_groups([r for r in found if r["kind"] == "case"]).values() for c in group]
    out = []
    for case in failing[:ANNOTATED]:
        where = case.get("location") or {}
        place = (f"file={_property(where['file'])},line={where['line']},"
                 if where.get("file") and where.get("line") else "")
        title = _property(f"{case['outcome']}: {case['case']}")
        out.append(f"::warning {place}title={title}::{_cell(case.get('message')).replace('%', '%25')}")
    return out


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not 1 <= len(argv) <= 2:
        print("usage: session_summary.py SESSION [RESULTS_DIR]", file=sys.stderr)
        return 2
    session = argv[0]
    path = paths.results_path(session, argv[1] if len(argv) > 1 else "results")
    try:
        found = records.read(path) if path.is_file() else None
    except records.ResultsError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    text = summary(session, found, path)
    target = os.environ.get("GITHUB_STEP_SUMMARY")
    if target:
        with open(target, "a", encoding="utf-8") as handle:
            handle.write(text)
    else:
        print(text)
    for line in annotations(found or []):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
