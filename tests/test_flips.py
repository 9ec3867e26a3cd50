"""A flip is learned from the table's own history in git (harness.report.flips), never from one run,
and kept apart from regressions and fixes everywhere the report compares cells: between versions,
since the table was last committed, and between Lightning releases."""

import json
import subprocess

from harness.core import sources
from harness.report import flips
from tests.test_committed_table import git
from tests.test_report import CK, NEST, OLD, TE, run_cli, write_session

CODE = {path: "digest-1" for path in {p for reached in sources.family_sources().values() for p in reached}}


def measure(table, number, cpu24, cpu25, packages24=("torch==2.4.1",)):
    """One measurement of the two rows, as a run writes it: its start, installs and sources."""
    started = f"2026-11-{10 + number}T03:00:00+00:00"
    write_session(table, "cpu_torch24", "2.4.1", cpu24, started=started, packages=list(packages24), reuse_sources=CODE)
    write_session(table, "cpu_torch25", "2.5.1", cpu25, started=started, packages=["torch==2.5.1"], reuse_sources=CODE)


def commit(repo, message):
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)


def committed_flip(tmp_path):
    """A table in git whose CK on 2.5 was measured pass, fail, pass with nothing changed: its results folder."""
    repo = tmp_path / "repo"
    git(tmp_path, "init", "-q", str(repo))
    for number, ck in enumerate(["pass", "fail", "pass"]):
        measure(repo / "results", number, {CK: "pass"}, {CK: ck})
        commit(repo, f"measurement {number}")
    return repo / "results"


def test_changes_and_came_back():
    assert flips.changes(["pass", "fail", "fail", "pass"]) == ["pass", "fail", "pass"]
    assert flips.came_back(["pass", "fail", "pass"]) and flips.came_back(["fail", "flaky"])
    assert not flips.came_back(["pass", "pass", "fail", "fail"])  # changed once, for good: a change
    assert not flips.came_back([])


def test_a_planted_flip_and_a_true_regression_are_told_apart(tmp_path):
    repo = tmp_path / "repo"
    table = repo / "results"
    git(tmp_path, "init", "-q", str(repo))
    # CK on 2.5 flips: pass, fail, pass with nothing changed; OLD on 2.4 regresses with a pin change;
    # TE on 2.5 changes once with nothing changed (a change, not a flip); NEST regresses from 2.4 to 2.5.
    for number, ck in enumerate(["pass", "fail", "pass"]):
        measure(table, number, {CK: "pass", OLD: "pass", TE: "pass", NEST: "pass"},
                {CK: ck, OLD: "fail", TE: "pass", NEST: "fail"})
        commit(repo, f"measurement {number}")
    measure(table, 5, {CK: "pass", OLD: "fail", TE: "pass", NEST: "pass"},
            {CK: "fail", OLD: "fail", TE: "fail", NEST: "fail"}, packages24=("torch==2.4.1", "sympy==1.14"))
    done = run_cli(table, "--out", tmp_path / "out")
    assert done.returncode == 0, done.stderr
    data = json.loads((tmp_path / "out" / "report.json").read_text())

    learned = {(c["session"], c["case"]): c for c in data["flips"]["cells"]}
    assert set(learned) == {("cpu_torch25", CK)}
    assert learned["cpu_torch25", CK]["outcomes"] == ["pass", "fail", "pass", "fail"]
    assert data["flips"]["measurements"] == 8 and data["flips"]["unavailable"] is None

    since = {(r["session"], r["case"]): r["status"] for r in data["previous"]["rows"] if r["status"] != "still failing"}
    assert since == {("cpu_torch25", CK): "flips", ("cpu_torch24", OLD): "regressed", ("cpu_torch25", TE): "regressed"}
    assert data["previous"]["counts"]["regressed"] == 2

    step = next(s for s in data["transitions"] if s["to_torch"] == "2.5.1")
    assert {c["case"] for c in step["flips"]} == {CK}
    assert {c["case"] for c in step["regressions"]} == {NEST, TE}
    assert "flips: pass → fail → pass → fail over 4 measurements" in step["flips"][0]["flip"]
    html = (tmp_path / "out" / "report.html").read_text()
    assert "1 cell changed that flip (known from the table" in html


def test_a_code_change_ends_what_the_history_says(tmp_path):
    table = committed_flip(tmp_path)
    changed = {**CODE, sources.family_files()["checkpoint"].relative_to(sources.paths.ROOT).as_posix(): "digest-2"}
    write_session(table, "cpu_torch25", "2.5.1", {CK: "fail"}, started="2026-11-20T03:00:00+00:00",
                  packages=["torch==2.5.1"], reuse_sources=changed)
    assert run_cli(table, "--out", tmp_path / "out").returncode == 0
    data = json.loads((tmp_path / "out" / "report.json").read_text())
    assert data["flips"]["cells"] == []
    assert {(r["case"], r["status"]) for r in data["previous"]["rows"]} == {(CK, "regressed")}


def test_outside_git_nothing_is_learned_and_the_data_says_why(tmp_path):
    measure(tmp_path / "alone", 0, {CK: "pass"}, {CK: "flaky"})
    assert run_cli(tmp_path / "alone", "--out", tmp_path / "out").returncode == 0
    data = json.loads((tmp_path / "out" / "report.json").read_text())
    assert "outside" in data["flips"]["unavailable"] or "git could not say" in data["flips"]["unavailable"]
    flipping = subprocess.run(["git", "--version"], capture_output=True).returncode == 0
    assert flipping and data["flips"]["cells"] == []


def test_results_outside_git_learn_from_the_history_of_the_table_they_are_held_to(tmp_path):
    """The nightly's results are downloaded artifacts, outside git: its report learns which cells flip
    from the committed table it is held to (`--baseline`, a checkout with its history)."""
    table = committed_flip(tmp_path)
    measure(tmp_path / "artifacts", 7, {CK: "pass"}, {CK: "fail"})  # tonight's run
    done = run_cli(tmp_path / "artifacts", "--baseline", table, "--out", tmp_path / "out")
    assert done.returncode in (0, 1), done.stderr
    data = json.loads((tmp_path / "out" / "report.json").read_text())
    assert data["flips"]["unavailable"] is None
    learned = {(c["session"], c["case"]): c["outcomes"] for c in data["flips"]["cells"]}
    assert learned == {("cpu_torch25", CK): ["pass", "fail", "pass", "fail"]}
    assert {(r["case"], r["status"]) for r in data["baseline"]["rows"] if r["status"] != "still failing"} == {
        (CK, "flips")}


def test_the_night_before_is_a_measurement_flips_are_learned_from(tmp_path):
    """The committed table measured CK pass; the night before (its artifacts, outside git) fail;
    tonight pass: the cell came back, which only the night before shows."""
    repo = tmp_path / "repo"
    git(tmp_path, "init", "-q", str(repo))
    measure(repo / "results", 0, {CK: "pass"}, {CK: "pass"})
    commit(repo, "the table")
    measure(tmp_path / "night_before", 1, {CK: "pass"}, {CK: "fail"})
    measure(tmp_path / "tonight", 2, {CK: "pass"}, {CK: "pass"})
    for previous, learned in ((False, {}), (True, {("cpu_torch25", CK): ["pass", "fail", "pass"]})):
        out = tmp_path / f"out-{previous}"
        args = ["--previous", tmp_path / "night_before"] if previous else ["--previous-unavailable", "not asked"]
        done = run_cli(tmp_path / "tonight", "--baseline", repo / "results", *args, "--out", out)
        assert done.returncode in (0, 1), done.stderr
        data = json.loads((out / "report.json").read_text())
        assert {(c["session"], c["case"]): c["outcomes"] for c in data["flips"]["cells"]} == learned


def test_the_bug_strip_marks_a_version_whose_failing_cells_all_flip(tmp_path):
    # CK on 2.5 was measured pass, fail, pass and fails again tonight: its card's 2.5 is a flip, not a
    # bug that fails there; NEST fails on 2.5 for the first time: its card's 2.5 fails.
    from harness.report import render

    table = committed_flip(tmp_path)
    measure(table, 3, {CK: "pass", NEST: "pass"}, {CK: {"outcome": "fail", "message": "Tensor-likes are not close!"},
                                                   NEST: {"outcome": "fail", "exc_type": "KeyError", "message": "'x'"}})
    data = render.build([table])
    marks = {row["label"]: row["marks"] for row in data["bug_strip"]["lines"][0]["rows"]}
    by_case = {card["cases"][0]["case"]: card["label"] for card in data["failing"]}
    assert marks[by_case[CK]] == ["ran", "flips"] and marks[by_case[NEST]] == ["ran", "fails"], marks
    html = render.render_html(data)
    assert data["bug_strip"]["marks"]["flips"]["symbol"] in html[html.index('id="bug-strip"'):]


def test_earlier_nights_are_measurements_too_each_read_alone(tmp_path):
    """Two earlier nights of the same session (--nights, one folder each, as the nightly unpacks them):
    the table measured CK pass, a night fail, tonight pass: a flip; without the nights, none."""
    repo = tmp_path / "repo"
    git(tmp_path, "init", "-q", str(repo))
    measure(repo / "results", 0, {CK: "pass"}, {CK: "pass"})
    commit(repo, "the table")
    measure(tmp_path / "nights" / "run-1", 1, {CK: "pass"}, {CK: "fail"})
    measure(tmp_path / "nights" / "run-2", 2, {CK: "pass"}, {CK: "fail"})
    measure(tmp_path / "tonight", 3, {CK: "pass"}, {CK: "pass"})
    for nights, learned in (([], {}), ([tmp_path / "nights" / "run-1", tmp_path / "nights" / "run-2"],
                                       {("cpu_torch25", CK): ["pass", "fail", "pass"]})):
        out = tmp_path / f"out-{len(nights)}"
        done = run_cli(tmp_path / "tonight", "--baseline", repo / "results", "--no-since-committed",
                       *(["--nights", *nights] if nights else []), "--out", out)
        assert done.returncode in (0, 1), done.stderr
        data = json.loads((out / "report.json").read_text())
        assert {(c["session"], c["case"]): c["outcomes"] for c in data["flips"]["cells"]} == learned
