"""The committed table (results/*.jsonl) was measured with the code at hand, so that a fresh clone's
`nox` reuses its rows instead of measuring them again. Each results file keeps a digest of every source
its reuse keys hold (`reuse_sources`, harness.plugin.reuse: the session-side harness, the case files and
what they import) and the distributions its venv held (`packages`): a row is stale when one of those
sources differs from the checkout's, or when what its session installs now (the row's pins, the
`session` extra of pyproject.toml) is not what the row was measured with. The check names the stale
rows, what changed, and the command that measures them again."""

from __future__ import annotations

import pathlib

from packaging.requirements import Requirement

from harness.core import matrix, paths, records, venvs
from harness.plugin import reuse

TABLE = paths.ROOT / "results"
SHOWN = 6  # changes named per row; the rest are counted


def installs_differ(environment: dict) -> list[str]:
    """What the row's session installs now (its pins and the tools' bounds) that the distributions
    it was measured with do not satisfy."""
    spec = matrix.find(environment["identity"]["session"])
    measured = dict(entry.split("==", 1) for entry in environment.get("packages") or [] if "==" in entry)
    measured = {name.lower().replace("_", "-"): version for name, version in measured.items()}
    found = []
    for text in [*spec.requirements, *venvs.HARNESS_REQUIREMENTS]:
        wanted = Requirement(text)
        have = measured.get(wanted.name.lower().replace("_", "-"))
        if have is None or (wanted.specifier and not wanted.specifier.contains(have, prereleases=True)):
            found.append(f"installs {text} (measured with {have or 'none'})")
    return found


def stale_rows(table: pathlib.Path = TABLE, sources: dict | None = None) -> dict[str, list[str]]:
    """Each committed row measured with other code or other installs than the checkout's, and why."""
    sources = reuse.source_digests() if sources is None else sources
    stale = {}
    for path in paths.results_files(table):
        environment = records.read(path)[0]
        if not environment.get("reuse_keys"):
            why = ["no reuse keys: a run narrowed by pytest arguments is no source to reuse from"]
        elif environment.get("reuse_sources") is None:
            why = ["no reuse_sources: measured before results kept the digests of their sources"]
        else:
            why = reuse.source_changes(environment["reuse_sources"], sources)
        why += installs_differ(environment)
        if why:
            stale[environment["identity"]["session"]] = why
    return stale


def explain(stale: dict[str, list[str]], rows: int) -> str:
    lines = [f"{len(stale)} of {rows} committed rows of results/ were measured with other code or other "
             "installs than this checkout's: a fresh clone's `nox` would measure them again."]
    for session, why in stale.items():
        more = f" and {len(why) - SHOWN} more" if len(why) > SHOWN else ""
        lines.append(f"  results/{session}.jsonl: {'; '.join(why[:SHOWN])}{more}")
    lines.append(f"Measure them again and commit results/: nox -s {' '.join(stale)} && nox -s report")
    return "\n".join(lines)


def test_every_committed_row_was_measured_with_the_code_at_hand():
    stale = stale_rows()
    assert not stale, explain(stale, len(paths.results_files(TABLE)))


def satisfying(requirement: str) -> str:
    """`name==version` of a distribution that meets `requirement`."""
    wanted = Requirement(requirement)
    pins = [s.version for s in wanted.specifier if s.operator in ("==", ">=")]
    return f"{wanted.name}=={pins[0] if pins else '1'}"


def test_the_check_names_a_row_whose_sources_or_installs_changed_and_only_it(tmp_path):
    committed = records.read(TABLE / "cpu_torch215.jsonl")[0]
    now = {"harness/core/records.py": "a1", "cases/test_checkpoint.py": "b2"}
    packages = [satisfying(r) for r in [*matrix.find("cpu_torch215").requirements, *venvs.HARNESS_REQUIREMENTS]]
    rows = {"cpu_torch215": dict(now), "cpu_torch214": {**now, "cases/test_checkpoint.py": "c3"},
            "cpu_torch213": None}
    for session, sources in rows.items():
        writer = records.ResultsWriter(paths.results_path(session, tmp_path))
        writer.write({**{k: v for k, v in committed.items() if k not in ("schema", "identity", "reuse_sources")},
                      "session": session, "identity": matrix.find(session).identity, "reuse_keys": {"checkpoint": "k"},
                      "packages": packages, **({"reuse_sources": sources} if sources is not None else {})})
        writer.close()
    stale = stale_rows(tmp_path, now)
    assert set(stale) == {"cpu_torch214", "cpu_torch213"}
    assert stale["cpu_torch214"][0] == "changed cases/test_checkpoint.py"
    assert stale["cpu_torch213"][0].startswith("no reuse_sources")
    assert any("installs torch==2.14" in why for why in stale["cpu_torch214"])  # measured with 2.15's pins
    text = explain(stale, 3)
    assert "nox -s cpu_torch213 cpu_torch214 && nox -s report" in text and "results/cpu_torch214.jsonl" in text
