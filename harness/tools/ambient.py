"""`python -m harness ambient`: the ambient states each torch row lets a user set, surveyed in the row's
own venv by cases/programs/ambient.py (each setter found in that torch's namespace, its values tried and
restored), written to results/ambient/SESSION.json and printed as one table across the rows: which
torch has which setter, since when, and why one is left out.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess

from harness.core import matrix, paths
from harness.core.errors import BadInput
from harness.tools import testfile

SURVEY = paths.ROOT / "cases" / "programs" / "ambient.py"
SURVEY_TIMEOUT = 300  # seconds: importing torch and each backend, then a few hundred sets and restores


def results_dir() -> pathlib.Path:
    return paths.results_dir() / "ambient"


def survey(python: pathlib.Path) -> dict:
    """The survey's JSON, run by `python` in a process of its own (it changes process state while it runs)."""
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    done = subprocess.run([str(python), "-W", "ignore", str(SURVEY)], capture_output=True, text=True, env=env,
                          timeout=SURVEY_TIMEOUT)
    if done.returncode != 0:
        said = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
        raise BadInput(f"the ambient survey failed in {python}: {said}")
    return json.loads(done.stdout)


def rows(names: list[str] | None) -> list[matrix.Session]:
    """The sessions named, else each plain CPU row (one per torch version)."""
    if names:
        return [matrix.find(name) for name in names]
    return [s for s in matrix.load() if s.device == "cpu" and not s.lightning_of and not s.label and not s.nightly]


def table(surveys: dict[str, dict]) -> str:
    """Markdown: a line per setter, a column per torch: ✓ and how many values drawn, ✗ left out, blank
    where that torch has no such setter; then why each is left out on the newest torch that has it."""
    versions = list(surveys)
    by_name: dict[str, dict[str, dict]] = {}
    for version, found in surveys.items():
        for setter in found["setters"]:
            by_name.setdefault(setter["name"], {})[version] = setter
    lines = ["| setter | " + " | ".join(versions) + " |", "|---|" + ":-:|" * len(versions)]
    for name, seen in sorted(by_name.items()):
        cells = ["" if v not in seen else "✗" if seen[v]["left_out"] else f"✓ {len(seen[v]['values'])}"
                 for v in versions]
        lines.append(f"| `{name}` | " + " | ".join(cells) + " |")
    lines += ["", "Left out (on the newest torch that has the setter):", ""]
    for name, seen in sorted(by_name.items()):
        newest = seen[max(seen, key=versions.index)]
        if newest["left_out"]:
            lines.append(f"- `{name}`: {newest['left_out']}")
    return "\n".join(lines)


def command(args) -> int:
    chosen = rows(args.sessions)
    pythons = [testfile.row_python(spec, args.python) for spec in chosen]  # every venv there, before any survey
    out = results_dir()
    out.mkdir(parents=True, exist_ok=True)
    surveys = {}
    for spec, python in zip(chosen, pythons, strict=True):
        found = survey(python)
        (out / f"{spec.name}.json").write_text(json.dumps({"session": spec.name, **found}, indent=1) + "\n")
        surveys[spec.torch or found["torch"]] = found
        drawn = sum(1 for s in found["setters"] if not s["left_out"])
        print(f"{spec.name}: torch {found['torch']}: {drawn} setters drawn, {len(found['setters']) - drawn} left out")
    print(table(surveys))
    return 0
