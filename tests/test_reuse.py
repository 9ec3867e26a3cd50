"""Reuse: a full session carries over the last run's records for what nothing has changed for,
runs the rest, and says which records it carried. Real nox on a copy of the project with two small
families (a full session takes seconds), the checkout's session venv."""

import pathlib

import pytest

from harness import records, report
from tests.conftest import copy_project, run_nox

SESSION = "cpu_torch215"

ALPHA = '''
import torch


def test_sin(case, backend):
    case.check(torch.sin, torch.randn(3, requires_grad=True))
'''

BETA = '''
import os
import pathlib

import pytest
import torch


def test_cos(case):
    case.check(torch.cos, torch.randn(3, requires_grad=True), compiled=torch.compile(torch.cos, backend="eager"))


@pytest.fixture
def flaky_setup():
    marker = pathlib.Path(os.environ["HARNESS_RESULTS_DIR"]) / "setup-ran"
    if not marker.exists():
        marker.write_text("")
        raise OSError("the environment broke once")


def test_setup_breaks_once(case, flaky_setup):
    pass
'''


@pytest.fixture
def project(tmp_path):
    project = copy_project(tmp_path / "project")
    for path in (project / "cases").glob("test_*.py"):
        path.unlink()
    (project / "cases" / "test_alpha.py").write_text(ALPHA)
    (project / "cases" / "test_beta.py").write_text(BETA)
    return project


def session(project, results, *args, env=None, fails=False):
    done = run_nox(project, "-s", SESSION, *(["--", *args] if args else []), results=results, env=env)
    assert done.returncode == (1 if fails else 0), done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout + done.stderr


def cases(results: pathlib.Path) -> dict:
    return {r["case"]: r for r in records.read(results / f"{SESSION}.jsonl") if r["kind"] == "case"}


@pytest.mark.slow
def test_nothing_changed_runs_nothing_and_says_what_it_reused(project, tmp_path):
    results = tmp_path / "results"
    first = session(project, results, env={"HARNESS_RERUNS": "0"}, fails=True)  # the error fails it
    assert "0 records reused; to run: alpha, beta" in first
    measured = cases(results)
    assert {c: r["outcome"] for c, r in measured.items()} == {
        "alpha/sin[eager]": "pass", "alpha/sin[aot_eager]": "pass", "alpha/sin[inductor]": "pass",
        "beta/cos": "pass", "beta/setup_breaks_once": "error"}
    second = session(project, results, env={"HARNESS_RERUNS": "0"})
    # the error runs again (it passes now); the rest is carried over, and says from which run
    assert "4 records reused; to run: cases/test_beta.py::test_setup_breaks_once" in second
    again = cases(results)
    assert again["beta/setup_breaks_once"]["outcome"] == "pass" and "reused_from" not in again["beta/setup_breaks_once"]
    first_run = records.read(sorted((results / "previous").glob("*.jsonl"))[0])[0]
    for case_id in ("alpha/sin[eager]", "beta/cos"):
        assert again[case_id]["reused_from"] == {"started": first_run["started"], "git_commit": first_run["git_commit"]}
        assert {k: v for k, v in again[case_id].items() if k != "reused_from"} == measured[case_id]
    third = session(project, results, env={"HARNESS_RERUNS": "0"})
    assert "5 records reused; to run: nothing" in third and "python -m pytest" not in third  # pytest never started
    final = records.read(results / f"{SESSION}.jsonl")
    second_run = records.read(sorted((results / "previous").glob("*.jsonl"))[-1])[0]
    assert final[0]["reused_from"]["started"] == second_run["started"]  # the environment as the last run measured it
    assert {r["case"]: r for r in final[1:-1]} == {case: {**r, "reused_from": r.get("reused_from") or {
        "started": second_run["started"], "git_commit": second_run["git_commit"]}} for case, r in again.items()}
    assert final[-1]["kind"] == "end" and final[-1]["reused"] == 5
    assert (results / f"{SESSION}.xml").is_file()
    # reused and fresh results give the same report
    fresh = tmp_path / "fresh"
    session(project, fresh, "--fresh", env={"HARNESS_RERUNS": "0"}, fails=True)
    (fresh / "setup-ran").unlink()
    outcomes = {kind: {c["case"]: c["cells"][SESSION]["outcome"] for c in report.build([d])["cases"]}
                for kind, d in (("reused", results), ("fresh", fresh))}
    assert outcomes["reused"] == {**outcomes["fresh"], "beta/setup_breaks_once": "pass"}


@pytest.mark.slow
def test_a_changed_family_file_runs_that_family_alone(project, tmp_path):
    results = tmp_path / "results"
    session(project, results)  # the setup error is retried once, and passes: flaky
    assert cases(results)["beta/setup_breaks_once"]["outcome"] == "flaky"
    # carried with its attempts: rerun alone, an order-dependent case would not meet the session's state
    assert "5 records reused; to run: nothing" in session(project, results)
    assert cases(results)["beta/setup_breaks_once"]["attempts"][0]["outcome"] == "error"
    path = project / "cases" / "test_beta.py"
    path.write_text(path.read_text() + "\n# a change\n")
    assert "3 records reused; to run: beta" in session(project, results)
    harness_file = project / "harness" / "casekit.py"
    harness_file.write_text(harness_file.read_text() + "\n# a change\n")
    assert "0 records reused; to run: alpha, beta" in session(project, results)
    report_file = project / "harness" / "report.py"  # never runs in a session
    report_file.write_text(report_file.read_text() + "\n# a change\n")
    assert "5 records reused; to run: nothing" in session(project, results)


@pytest.mark.slow
def test_a_narrowed_or_fresh_run_reuses_nothing(project, tmp_path):
    results = tmp_path / "results"
    session(project, results)
    narrowed = session(project, results, "cases/test_alpha.py")
    assert "records reused" not in narrowed
    assert not records.read(results / f"{SESSION}.jsonl")[0].get("reuse_keys")  # and is not a source
    assert "0 records reused; to run: alpha, beta" in session(project, results)
    assert "0 records reused (fresh run); to run: alpha, beta" in session(project, results, "--fresh")
