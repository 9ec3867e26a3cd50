"""Staleness of the table, reported by row and family (harness.report.staleness), through the real
command (`python -m harness stale`) on a copy of the project: a comment or a docstring marks no row
stale, a change to a family's case file marks that family on every row, a change to the code the
families share or to a row's pins marks every family. The committed table is not held to the checkout
here: `nox -s tests` prints what is stale, and the report shows it."""

from __future__ import annotations

import subprocess
import sys

from harness.core import installs, matrix, paths, records, resultsfile, sources
from harness.report import staleness
from tests.conftest import ROOT, copy_project

ROWS = ("cpu_torch213", "cpu_torch214")


def satisfying(requirement: str) -> str:
    """`name==version` of a distribution that meets `requirement`."""
    from packaging.requirements import Requirement

    wanted = Requirement(requirement)
    pins = [s.version for s in wanted.specifier if s.operator in ("==", ">=")]
    return f"{wanted.name}=={pins[0] if pins else '1'}"


def plant_rows(table, root, pins_of=None):
    """A results file per row whose sources are `root`'s as they are now, installs as its pins say."""
    now = sources.source_digests(root)
    for session in ROWS:
        spec = matrix.find(pins_of or session)
        writer = resultsfile.ResultsWriter(paths.results_path(session, table))
        writer.write({"kind": "environment", "session": session, "identity": matrix.find(session).identity,
                      "torch": spec.torch, "reuse_keys": {"checkpoint": "k"}, "reuse_sources": now,
                      "packages": [satisfying(r) for r in [*spec.requirements, *installs.HARNESS_REQUIREMENTS]]})
        writer.write(records.end_record(0, {}, 0))  # a run that finished
        writer.close()


def stale(project, table) -> str:
    done = subprocess.run([sys.executable, "-m", "harness", "stale", "--results", str(table)], cwd=project,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout


def edit(path, old, new):
    text = path.read_text()
    assert old in text, (path, old)
    path.write_text(text.replace(old, new, 1))


def test_only_a_change_of_code_marks_rows_stale_and_it_names_the_families(tmp_path):
    project = copy_project(tmp_path / "project")
    table = tmp_path / "table"
    plant_rows(table, project)
    assert stale(project, table).startswith("All 2 rows of the table were measured with this checkout's code")
    # A comment, a docstring and blank lines: no outcome can change.
    edit(project / "harness" / "core" / "outcomes.py", "\n\n", "\n\n# a comment added by the test\n\n\n")
    edit(project / "cases" / "test_checkpoint.py", '"""', '"""A docstring line added by the test.\n')
    assert stale(project, table).startswith("All 2 rows")
    # A family's case: that family, on every row.
    edit(project / "cases" / "test_checkpoint.py", "\nimport ", "\nassert True\nimport ")
    said = stale(project, table)
    assert said.startswith("2 of 2 rows")
    assert "\n  cpu_torch213, cpu_torch214: checkpoint: changed cases/test_checkpoint.py\n" in said  # alike: one line
    assert "nox -s cpu_torch213 cpu_torch214; nox -s report" in said
    # Code every family shares: every family.
    edit(project / "harness" / "core" / "outcomes.py", "\nimport ", "\nassert True\nimport ")
    assert "\n  cpu_torch213, cpu_torch214: every family: changed cases/test_checkpoint.py; changed " \
           "harness/core/outcomes.py\n" in stale(project, table)


def test_a_row_measured_with_other_pins_is_stale_in_every_family(tmp_path):
    plant_rows(tmp_path, ROOT, pins_of="cpu_torch215")
    found = {row.session: row for row in staleness.stale_rows(tmp_path)}
    assert found["cpu_torch214"].families == [staleness.ALL]
    assert any(why.startswith("installs torch is 2.15.0 (needs torch==2.14") for why in found["cpu_torch214"].why)


def test_a_row_without_its_sources_is_stale(tmp_path):
    writer = resultsfile.ResultsWriter(paths.results_path("cpu_torch213", tmp_path))
    writer.write({"kind": "environment", "session": "cpu_torch213", "identity": matrix.find("cpu_torch213").identity,
                  "reuse_keys": {"checkpoint": "k"}})
    writer.write(records.end_record(0, {}, 0))
    writer.close()
    (row,) = staleness.stale_rows(tmp_path)
    assert row.families == [staleness.ALL] and row.why[0].startswith("no reuse_sources")


def test_a_row_whose_run_stopped_early_is_stale_in_every_family(tmp_path):
    """A run stopped before its end (Ctrl-C, a killed session) wrote the cases it ran and none it would have
    carried over; measured with the code at hand, it is still no whole row: the next run measures what it lacks."""
    plant_rows(tmp_path, ROOT)
    for session in ROWS:  # the first row's run stopped before its end record, the second's was interrupted
        path = paths.results_path(session, tmp_path)
        kept = records.read(path)[:-1]
        writer = resultsfile.ResultsWriter(path)
        for record in kept:
            writer.write({k: v for k, v in record.items() if k != "schema"})
        if session == ROWS[1]:
            writer.write({**records.end_record(2, {}, 0), "interrupted": "KeyboardInterrupt"})
        writer.close()
    found = {row.session: row for row in staleness.stale_rows(tmp_path)}
    assert found[ROWS[0]].families == [staleness.ALL] and found[ROWS[0]].why == ["stopped early: no end record"]
    assert found[ROWS[1]].families == [staleness.ALL] and found[ROWS[1]].why == ["stopped early: KeyboardInterrupt"]


def test_staleness_follows_imports(tmp_path):
    """A family's program stales that family alone; what only the driver runs stales nothing."""
    project = copy_project(tmp_path / "project")
    table = tmp_path / "table"
    plant_rows(table, project)
    edit(project / "harness" / "core" / "runsession.py", "\nimport ", "\nassert True\nimport ")  # nox's steps only
    assert stale(project, table).startswith("All 2 rows")
    edit(project / "cases" / "programs" / "recompile.py", "\nimport ", "\nassert True\nimport ")
    assert "\n  cpu_torch213, cpu_torch214: recompile: changed cases/programs/recompile.py\n" in stale(project, table)
