"""The committed row as a reference for the suite's own runs (tests/committed_row.py): read only where the
checkout would measure the row's families the same, on the committed table's real records."""

import json

from harness.core import matrix, paths
from tests import committed_row
from tests.conftest import ROOT

NEWEST = matrix.main_session().name


def table_with(tmp_path, monkeypatch, changed_source: str | None):
    """A copy of the committed newest row, as the results directory; `changed_source` recorded with
    another digest than the checkout's, as a row measured before that file changed would be."""
    lines = paths.results_path(NEWEST, ROOT / "results").read_text().splitlines()
    environment = json.loads(lines[0])
    if changed_source is not None:
        environment["reuse_sources"][changed_source] = "0" * 16
    paths.results_path(NEWEST, tmp_path).write_text("\n".join([json.dumps(environment), *lines[1:]]) + "\n")
    monkeypatch.setenv(paths.RESULTS_ENV, str(tmp_path))


def test_a_fresh_row_gives_the_records_of_the_families_asked_for(tmp_path, monkeypatch):
    table_with(tmp_path, monkeypatch, None)
    found = committed_row.fresh_records(NEWEST, ["checkpoint", "autocast"])
    assert found and {record["family"] for record in found.values()} == {"checkpoint", "autocast"}
    assert all(case.startswith(("checkpoint/", "autocast/")) for case in found)


def test_a_row_stale_for_a_family_is_no_reference_for_it_and_still_one_for_the_others(tmp_path, monkeypatch):
    table_with(tmp_path, monkeypatch, "cases/test_checkpoint.py")
    assert committed_row.fresh_outcomes(NEWEST, ["checkpoint"]) is None
    assert committed_row.fresh_outcomes(NEWEST, ["checkpoint", "autocast"]) is None
    assert committed_row.fresh_outcomes(NEWEST, ["autocast"])


def test_code_every_family_shares_changed_is_no_reference_at_all(tmp_path, monkeypatch):
    table_with(tmp_path, monkeypatch, "harness/core/outcomes.py")
    assert committed_row.fresh_outcomes(NEWEST, ["autocast"]) is None


def test_a_family_the_row_lacks_is_no_reference(tmp_path, monkeypatch):
    table_with(tmp_path, monkeypatch, None)
    assert committed_row.fresh_outcomes(NEWEST, ["autocast", "no_such_family"]) is None


def test_a_flaky_reference_agrees_with_either_outcome_and_nothing_else_differs_quietly():
    reference = {"a": "flaky", "b": "pass", "c": "known"}
    assert not committed_row.disagreements({"a": "pass", "b": "pass", "c": "known"}, reference)
    assert not committed_row.disagreements({"a": "fail"}, reference)
    assert committed_row.disagreements({"a": "crash", "b": "fail", "c": "fail", "d": "pass"}, reference) == {
        "a": ("crash", "flaky"), "b": ("fail", "pass"), "c": ("fail", "known"), "d": ("pass", None)}
