"""Which rows of a table were measured with other code or other installs than the checkout's, by family:
what a fresh clone's `nox` would measure again. Reported, never a failure: by `python -m harness stale`,
on the report's page and REPORT.md, after `nox -s tests`, and in the PR check.

Each results file keeps a digest of every source its reuse keys hold (`reuse_sources`,
harness.core.sources: code only, so a comment or a docstring changes nothing) and the distributions its
venv held (`packages`). A family is stale when a source it reaches by imports changed
(harness.core.sources.family_sources: its case file, the programs it imports, the session's harness and
cases/conftest.py, pytest's configuration); every family of a row is, when what the row's session installs
now (its pins, the `session` extra of pyproject.toml) is not what it was measured with, and when its run
stopped before its end (no end record, or one that says it was interrupted or lacks collected cases): the
cases it ran are there, those it did not run or carry over are not, and the next run of every family
measures them (harness.plugin.reuse: from a run with no end record it reuses nothing, and measures all).
"""

from __future__ import annotations

import dataclasses
import pathlib

from harness.core import envcheck, installs, matrix, paths, records, sources

ALL = "every family"


@dataclasses.dataclass
class StaleRow:
    session: str
    families: list[str]  # the families to measure again (all of them: every family of the row)
    why: list[str]  # what changed, each a line

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


def installs_differ(environment: dict) -> list[str]:
    """What the row's session installs now (its pins and the tools' bounds) that the distributions it
    was measured with do not satisfy."""
    try:
        spec = matrix.find(environment["identity"]["session"])
    except matrix.MatrixError:
        return ["its session is no longer in the matrix"]
    measured = dict(entry.split("==", 1) for entry in environment.get("packages") or [] if "==" in entry)
    return [f"installs {why}" for why in envcheck.unmet([*spec.requirements, *installs.HARNESS_REQUIREMENTS], measured)]


def stale_rows(table: pathlib.Path | None = None, now: dict | None = None,
               root: pathlib.Path = paths.ROOT, unknown: bool = True) -> list[StaleRow]:
    """Each row of `table` (default: the committed table, results/) measured with other code or other
    installs than the checkout's, and which of its families that concerns. `unknown=False`: a row that
    does not say what it was measured with (a narrowed run, results made by hand) is left out."""
    table = paths.results_dir(root) if table is None else table
    now = sources.source_digests(root) if now is None else now
    reach = {family: set(reached) for family, reached in sources.family_sources(root).items()}
    found = []
    for path in paths.results_files(table):
        found_records = records.read(path)
        environment, end = found_records[0], found_records[-1]
        session = environment["identity"]["session"]
        if not unknown and not (environment.get("reuse_keys") and environment.get("reuse_sources") is not None):
            continue
        if not records.run_complete(end):  # its cases are not all there: the next run measures what it lacks
            found.append(StaleRow(session, [ALL], [f"stopped early: {stopped_how(end)}"]))
            continue
        if not environment.get("reuse_keys"):
            found.append(StaleRow(session, [ALL], ["no reuse keys: a run narrowed by pytest arguments"]))
            continue
        if environment.get("reuse_sources") is None:
            found.append(StaleRow(session, [ALL], ["no reuse_sources: measured before results kept their sources"]))
            continue
        changed = sources.changed_sources(environment["reuse_sources"], now)
        installs = installs_differ(environment)
        # A source removed was reached through a module that changed to stop importing it: that one says so.
        touching = [c for c in changed if any(c.path in reached for reached in reach.values())]
        families = sorted({family for family, reached in reach.items() for c in touching if c.path in reached})
        if installs or families:
            found.append(StaleRow(session, [ALL] if installs or len(families) == len(reach) else families,
                                  [*(c.line for c in touching), *installs]))
    return found


def stopped_how(end: dict) -> str:
    """Why a run's results are not a whole row, from its last record (the conditions of records.run_complete,
    which the sessions' code keeps: a change there would stale every row)."""
    if end.get("kind") != "end":
        return "no end record"
    if end.get("interrupted"):
        return end["interrupted"]
    if end.get("missing"):
        return f"{end['missing']} collected cases never recorded"
    return f"pytest exit status {end.get('exitstatus')}"


def refresh_command(stale: list[StaleRow]) -> str:
    """What measures the stale rows again and rewrites the report (a session whose cases fail exits 1:
    the report runs whatever they exit with)."""
    return f"nox -s {' '.join(row.session for row in stale)}; nox -s report"


def explain(stale: list[StaleRow], rows: int, shown: int = 6) -> str:
    if not stale:
        return f"All {rows} rows of the table were measured with this checkout's code and installs."
    lines = [f"{len(stale)} of {rows} rows of the table were measured with other code or other installs than "
             "this checkout's (a fresh clone's `nox` measures those families again):"]
    alike: dict[tuple, list[str]] = {}  # rows stale in the same families for the same reasons: one line
    for row in stale:
        alike.setdefault((tuple(row.families), tuple(row.why)), []).append(row.session)
    for (families, why), sessions in alike.items():
        more = f" and {len(why) - shown} more" if len(why) > shown else ""
        lines.append(f"  {', '.join(sessions)}: {', '.join(families)}: {'; '.join(why[:shown])}{more}")
    lines.append(f"Measure them again, then commit results/: {refresh_command(stale)}")
    return "\n".join(lines)
