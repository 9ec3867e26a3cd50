"""The last scheduled nightly of the default branch with results for each session: the records a
session reuses and the report's previous-night comparison.

    python .github/scripts/nightly_runs.py find [SESSION...]
        Appends to $GITHUB_OUTPUT (or prints) `default_branch=`, `previous=` (JSON: session ->
        {"run": ID, "artifact": ID}, sessions without an earlier run left out) and `previous_error=`
        (one line when the API could not be asked; then `previous={}`), and `nights=` (JSON: session ->
        [{"run": ID, "artifact": ID}, ...], the up to NIGHTS_READ scheduled runs before `previous` with
        its results, newest first: what the report learns flips from). Exits 0 either way: a nightly
        still measures everything without it, and the report states the error. No session: asks nothing.
    python .github/scripts/nightly_runs.py download DEST PREVIOUS_JSON SESSION...
        Unpacks each SESSION's artifact named in PREVIOUS_JSON into DEST/results-SESSION. Exits 1,
        with one line, when one cannot be downloaded.
    python .github/scripts/nightly_runs.py download-nights DEST NIGHTS_JSON SESSION...
        Unpacks each of a SESSION's earlier nights into DEST/run-ID/results-SESSION; the same exit.

The default branch is asked of the API: a `schedule` event's payload has no repository object, so
`github.event.repository.default_branch` is empty there. The runs are listed once, and each run's
artifacts once for all sessions (about 1 + 30 requests at most, whatever the number of sessions).
Needs $GH_TOKEN (actions: read), $GH_REPO; $THIS_RUN is never its own baseline.
"""

from __future__ import annotations

import json
import os
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

from github_api import GitHub, GitHubError  # noqa: E402

WORKFLOW = "nightly.yml"
RUNS_LOOKED_AT = 30  # about a month of nights; artifacts expire after 30 days anyway
NIGHTS_READ = 6  # earlier nights a report learns flips from, besides the night before (a week in all)


def find(github: GitHub, sessions: list[str], this_run: str | None) -> tuple[str, dict, dict]:
    """The default branch, each session's last scheduled run of it with a live results artifact, and the
    up to NIGHTS_READ such runs before that one."""
    branch = github.get(f"repos/{github.repo}")["default_branch"]
    runs = github.pages(f"repos/{github.repo}/actions/workflows/{WORKFLOW}/runs?event=schedule&branch={branch}"
                        "&status=completed", "workflow_runs", per_page=RUNS_LOOKED_AT, limit=RUNS_LOOKED_AT)
    wanted, found, nights = set(sessions), {}, {session: [] for session in sessions}
    for run in runs:
        if str(run["id"]) == str(this_run) or run.get("event") != "schedule" or run.get("head_branch") != branch:
            continue  # the API filters these; a changed filter must not pick a dispatched run
        for artifact in github.pages(f"repos/{github.repo}/actions/runs/{run['id']}/artifacts", "artifacts"):
            session = artifact["name"].removeprefix("results-")
            if session in wanted and not artifact.get("expired"):
                night = {"run": run["id"], "artifact": artifact["id"]}
                if session not in found:
                    found[session] = night
                elif len(nights[session]) < NIGHTS_READ:
                    nights[session].append(night)
        if len(found) == len(wanted) and all(len(earlier) == NIGHTS_READ for earlier in nights.values()):
            break
    return branch, found, {session: earlier for session, earlier in nights.items() if earlier}


def write_outputs(pairs: dict) -> None:
    lines = "".join(f"{key}={value}\n" for key, value in pairs.items())
    target = os.environ.get("GITHUB_OUTPUT")
    if target:
        with open(target, "a", encoding="utf-8") as handle:
            handle.write(lines)
    print(lines, end="")


def download(dest: pathlib.Path, runs_json: str, sessions: list[str], nights: bool) -> int:
    """Each session's night before (`previous=`) into DEST/results-SESSION, or its earlier nights
    (`nights=`) into DEST/run-ID/results-SESSION: 1, with one line, when one cannot be downloaded."""
    try:
        runs = json.loads(runs_json or "{}")
        github = GitHub()
        for session in sessions:
            if nights:
                for night in runs.get(session, []):
                    github.download_zip(night["artifact"], dest / f"run-{night['run']}" / f"results-{session}")
                print(f"{session}: {len(runs.get(session, []))} earlier night(s)")
            elif session not in runs:
                print(f"{session}: no earlier scheduled nightly with its results")
            else:
                github.download_zip(runs[session]["artifact"], dest / f"results-{session}")
                print(f"{session}: results of run {runs[session]['run']}")
    except (GitHubError, ValueError, KeyError, TypeError, AttributeError) as error:
        which = "an earlier nightly's" if nights else "the previous nightly's"
        print(f"error: {which} results could not be downloaded: {error}", file=sys.stderr)
        return 1
    return 0


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["find"]:
        sessions = argv[1:]
        if not sessions:  # a run narrowed to sessions that run nowhere (a cuda tag, no GPU runner): no question
            print("no sessions: no previous nightly looked up", file=sys.stderr)
            write_outputs({"default_branch": "", "previous": "{}", "nights": "{}", "previous_error": ""})
            return 0
        try:
            github = GitHub()
            branch, found, nights = find(github, sessions, os.environ.get("THIS_RUN"))
        except GitHubError as error:
            print(f"::warning::the previous nightly could not be looked up: {error}", file=sys.stderr)
            write_outputs({"default_branch": "", "previous": "{}", "nights": "{}", "previous_error": str(error)})
            return 0
        for session in sessions:
            run = found.get(session)
            print(f"{session}: " + (f"run {run['run']}" if run else f"no earlier scheduled nightly of {branch} "
                                    "with its results"), file=sys.stderr)
        print(f"{github.calls} API requests", file=sys.stderr)
        write_outputs({"default_branch": branch, "previous": json.dumps(found, separators=(",", ":")),
                       "nights": json.dumps(nights, separators=(",", ":")), "previous_error": ""})
        return 0
    if len(argv) >= 3 and argv[0] in ("download", "download-nights"):
        return download(pathlib.Path(argv[1]), argv[2], argv[3:], nights=argv[0] == "download-nights")
    print("usage: nightly_runs.py find [SESSION...] | download DEST PREVIOUS_JSON SESSION... | "
          "download-nights DEST NIGHTS_JSON SESSION...", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
