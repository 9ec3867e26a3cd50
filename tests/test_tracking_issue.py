"""The nightly's tracking issue over several nights, through the real script against a local stand-in
for GitHub's API that records every call (tests/fake_github.py)."""

import subprocess
import sys

from tests.conftest import ROOT
from tests.fake_github import FakeGitHub
from tests.test_workflows import clean_env

SCRIPT = ROOT / ".github" / "scripts" / "tracking_issue.py"
ONE = "## Against the baseline\n\n| cpu_torch215 | `checkpoint/a` | **regressed** | pass | fail | x |\n"
TWO = ONE + "| cpu_torch215 | `checkpoint/b` | **regressed** | pass | fail | y |\n"


def night(api, tmp_path, status, regressions, section="", run="run-1"):
    listed = tmp_path / f"{run}.md"
    listed.write_text(section)
    done = subprocess.run([sys.executable, str(SCRIPT), str(status), str(regressions), str(listed)],
                          capture_output=True, text=True, timeout=60,
                          env=clean_env(GITHUB_API_URL=api.url, GH_REPO=api.repo, GH_TOKEN="t", RUN_URL=run,
                                        GITHUB_API_RETRY_WAIT="0"))
    return done


def test_red_still_red_then_green(tmp_path):
    with FakeGitHub([]) as api:
        first = night(api, tmp_path, 1, 1, ONE, "run-1")
        assert first.returncode == 0 and first.stdout == "red: opened #1\n", first.stderr
        issue, = api.issues
        assert issue["state"] == "open" and issue["labels"] == [{"name": "nightly-regression"}]
        assert "`checkpoint/a`" in issue["body"] and "run-1" in issue["body"] and "Still red" not in issue["body"]

        second = night(api, tmp_path, 1, 1, ONE, "run-2")  # the same regression: updated, no comment
        assert second.stdout == "red: updated #1 (still red, the same regressions)\n"
        assert "Still red: 2 nights in a row" in issue["body"] and "run-2" in issue["body"]
        assert api.comments == {}

        third = night(api, tmp_path, 1, 2, TWO, "run-3")  # another one: the list changes, said once
        assert third.stdout == "red: updated #1 (what it lists changed)\n"
        assert "Still red: 3 nights in a row" in issue["body"] and "`checkpoint/b`" in issue["body"]
        assert api.comments == {1: ["The regressions changed in run-3; the description lists them now."]}

        infra = night(api, tmp_path, 1, 0, "", "run-4")  # red, but a session had no results
        assert infra.stdout.startswith("red without a regression") and issue["state"] == "open"
        assert "`checkpoint/b`" in issue["body"]  # what it lists stays

        green = night(api, tmp_path, 0, 0, "", "run-5")
        assert green.stdout == "green: closed #1\n"
        assert (issue["state"], issue["state_reason"]) == ("closed", "completed")
        assert api.comments[1][-1].startswith("Green again in run-5")

        again = night(api, tmp_path, 0, 0, "", "run-6")  # green with nothing open: nothing to do
        assert again.stdout == "green: no open tracking issue\n"
        red_again = night(api, tmp_path, 1, 1, ONE, "run-7")  # a new red: a new issue, the label reused
        assert red_again.stdout == "red: opened #2\n" and len(api.issues) == 2
        # every change the script made, in order: one label, two issues, the edits and the comments
        assert [(method, path.rsplit("/project", 1)[1]) for method, path, _ in api.calls] == [
            ("POST", "/labels"), ("POST", "/issues"),
            ("PATCH", "/issues/1"),
            ("PATCH", "/issues/1"), ("POST", "/issues/1/comments"),
            ("POST", "/issues/1/comments"),
            ("POST", "/issues/1/comments"), ("PATCH", "/issues/1"),
            ("POST", "/labels"), ("POST", "/issues")]


def test_an_api_that_stays_down_is_one_line_and_a_failure(tmp_path):
    with FakeGitHub([], fail={"/repos/owner/project/issues": 502}) as api:
        done = night(api, tmp_path, 1, 1, ONE)
    assert done.returncode == 1 and done.stderr.count("\n") == 1
    assert "502 Server Error" in done.stderr and "(tried 3 times)" in done.stderr
    assert api.requests.count("/repos/owner/project/issues") == 3  # tried again before giving up
