"""The committed table's outcomes of a row, as a reference a test holds its own run to, where the checkout
would measure that row's families the same (harness.report.staleness: no source they import and no install
of the row changed since). A test that needs a clean run of real cases to compare with reads it here instead
of running the same cases again; where the row is stale for those families it runs them itself."""

from __future__ import annotations

from collections.abc import Iterable

from harness.core import paths
from harness.core.errors import BadInput
from harness.report import regressions, staleness

FLAKY = "flaky"


def fresh_records(session: str, families: Iterable[str]) -> dict[str, dict] | None:
    """Each case record of `families` on the committed row `session`, by case id. None where the row is
    stale for one of them, or has no case of one: then only a run of the checkout's own is a reference."""
    wanted = set(families)
    table = paths.results_dir()
    for row in staleness.stale_rows(table):
        if row.session == session and (staleness.ALL in row.families or wanted & set(row.families)):
            return None
    try:
        cases = [r for r in regressions.row_cases(session, table) if r["family"] in wanted]
    except BadInput:  # the table has no such row
        return None
    if {r["family"] for r in cases} != wanted:
        return None
    return {r["case"]: r for r in cases}


def fresh_outcomes(session: str, families: Iterable[str]) -> dict[str, str] | None:
    """Each case's outcome of fresh_records, by case id."""
    found = fresh_records(session, families)
    return None if found is None else {case: record["outcome"] for case, record in found.items()}


def disagreements(measured: dict[str, str], reference: dict[str, str]) -> dict[str, tuple[str, str | None]]:
    """Each case measured whose outcome the reference does not hold: (measured, reference). A case the
    reference holds as flaky agrees with a pass or a fail (its attempts disagreed in the table's run)."""
    def agrees(outcome: str, expected: str | None) -> bool:
        return outcome == expected or (expected == FLAKY and outcome in ("pass", "fail", FLAKY))
    return {case: (outcome, reference.get(case)) for case, outcome in measured.items()
            if not agrees(outcome, reference.get(case))}
