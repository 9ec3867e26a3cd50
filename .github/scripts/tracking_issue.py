"""The nightly's tracking issue: one issue, labelled nightly-regression, that follows the colour of
the scheduled nightly, through the REST API (github_api.py, the standard library only).

    python .github/scripts/tracking_issue.py STATUS REGRESSIONS [REGRESSIONS_MD]

STATUS: the report's exit status; REGRESSIONS: how many cells are worse than the committed table;
REGRESSIONS_MD: the report's baseline section, listing them. $RUN_URL names this run.

- red with regressions: open the issue (once) listing them; a later red night updates its
  description ("still red"), and comments only when what it lists changed;
- green (status 0): an open issue is commented on and closed;
- red without a regression (a session without results, an API error): the infrastructure, not torch;
  said in the run's summary and on an open issue, which stays open; no issue is opened for it.

Prints what it did, one line; exits 1 with one line when the API cannot be reached after its retries.
"""

from __future__ import annotations

import os
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

from github_api import GitHub, GitHubError  # noqa: E402

LABEL = "nightly-regression"
TITLE = "Nightly matrix: torch.compile regressions"
INTRO = ("The nightly torch.compile matrix found cells worse than the committed table (results/). They stay "
         "here until the cause is fixed or the new outcome is committed to the table; the issue closes on the "
         "first green nightly.")
MARK = "<!-- regressions -->"  # the listed regressions follow it: what decides whether they changed


def body(section: str, run: str, nights: int) -> str:
    still = f"Still red: {nights} nights in a row. " if nights > 1 else ""
    return f"{INTRO}\n\n{still}Latest: {run} (the full report is its `report` artifact).\n\n{MARK}\n{section.strip()}\n"


def listed(text: str | None) -> str:
    return (text or "").split(MARK, 1)[-1].strip()


def nights_of(text: str | None) -> int:
    found = (text or "").split("Still red: ", 1)
    return int(found[1].split(" ", 1)[0]) if len(found) == 2 else 1


def track(api: GitHub, status: int, regressions: int, section: str, run: str) -> str:
    issues = api.get(f"repos/{api.repo}/issues?labels={LABEL}&state=open&per_page=1")
    issue = issues[0] if issues else None
    where = f"repos/{api.repo}/issues"
    if status == 0:
        if issue is None:
            return "green: no open tracking issue"
        api.send("POST", f"{where}/{issue['number']}/comments", {"body": f"Green again in {run}: no cell is worse "
                                                                         "than the committed table. Closing."})
        api.send("PATCH", f"{where}/{issue['number']}", {"state": "closed", "state_reason": "completed"})
        return f"green: closed #{issue['number']}"
    if regressions == 0:
        if issue is not None:
            api.send("POST", f"{where}/{issue['number']}/comments",
                     {"body": f"{run} is red, but not for a regression (see its report's `fails:` lines: a session "
                              "without results, an API error): this issue stays open, unchanged."})
        return "red without a regression: the infrastructure, not torch" + (
            f" (said on #{issue['number']})" if issue else "")
    if issue is None:
        try:
            api.send("POST", f"repos/{api.repo}/labels", {"name": LABEL, "color": "B60205",
                                                          "description": "Found by the nightly matrix"})
        except GitHubError as error:
            if error.status != 422:  # 422: the label exists already
                raise
        made = api.send("POST", where, {"title": TITLE, "body": body(section, run, 1), "labels": [LABEL]})
        return f"red: opened #{made['number']}"
    nights = nights_of(issue.get("body")) + 1
    api.send("PATCH", f"{where}/{issue['number']}", {"body": body(section, run, nights)})
    if listed(issue.get("body")) != section.strip():
        api.send("POST", f"{where}/{issue['number']}/comments",
                 {"body": f"The regressions changed in {run}; the description lists them now."})
        return f"red: updated #{issue['number']} (what it lists changed)"
    return f"red: updated #{issue['number']} (still red, the same regressions)"


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) not in (2, 3) or not all(a.isdigit() for a in argv[:2]):
        print("usage: tracking_issue.py STATUS REGRESSIONS [REGRESSIONS_MD]", file=sys.stderr)
        return 2
    section = (pathlib.Path(argv[2]).read_text(encoding="utf-8")
               if len(argv) == 3 and pathlib.Path(argv[2]).is_file() else "")
    try:
        said = track(GitHub(), int(argv[0]), int(argv[1]), section, os.environ.get("RUN_URL") or "this run")
    except GitHubError as error:
        print(f"error: the tracking issue: {error}", file=sys.stderr)
        return 1
    print(said)
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary:
        with open(summary, "a", encoding="utf-8") as handle:
            handle.write(f"Tracking issue: {said}.\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
