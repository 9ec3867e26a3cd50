"""The Lightning axis of the matrix, read from the package registry: which Lightning releases exist,
which of them support a torch row, and the newest that does.

    python -m harness lightning-newest [--write]

resolves, for every [[torch]] row of harness/core/matrix.toml, the newest Lightning that installs with
the row's torch pin, Python and extra pins (uv's resolver reads each release's own metadata:
Requires-Dist and Requires-Python), prints it beside the recorded `lightning_newest`, and with
--write records it in the table. Sessions read the table only: `nox -l` never asks the registry.
Exit status: 0 when every row's recorded value is the resolved one (or --write wrote it), 1 when
one differs or the registry cannot be asked.

The release list (for `bisect --along lightning`) comes from the registry's JSON API
(`$HARNESS_PYPI_JSON`, default https://pypi.org/pypi).
"""

from __future__ import annotations

import functools
import json
import os
import pathlib
import re
import subprocess
import sys
import urllib.error
import urllib.request

from harness.core import matrix, records, versions
from harness.core.venvs import uv

JSON_API_ENV = "HARNESS_PYPI_JSON"  # the registry's JSON API (a mirror that serves it)
JSON_API = "https://pypi.org/pypi"


class RegistryError(OSError):
    """The registry cannot be asked (unreachable, or no answer that parses)."""


def _resolve(torch: str, python: str, lightning: str, extra=()) -> str:
    """The Lightning release uv's resolver picks for `lightning` (a requirement) beside torch==`torch`
    and `extra` on `python`, reading each release's own metadata (Requires-Dist, Requires-Python)."""
    wanted = "\n".join([f"torch=={torch}", lightning, *extra]) + "\n"
    try:
        done = subprocess.run([uv(), "pip", "compile", "-", "--python-version", python, "--no-header",
                               "--no-annotate", "--quiet"], input=wanted, capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise RegistryError(f"uv pip compile for torch {torch}: {exc}") from exc
    found = re.search(r"^lightning==(\S+)$", done.stdout, re.MULTILINE)
    if done.returncode != 0 or not found:
        last = (done.stderr.strip().splitlines() or ["no lightning in its resolution"])[-1]
        raise UnsupportedError(f"uv pip compile of {lightning} for torch {torch} on Python {python}: {last}")
    return found[1]


class UnsupportedError(RegistryError):
    """No Lightning release that the requirement admits installs with the torch asked for."""


def newest_supporting(torch: str, python: str, extra=()) -> str:
    """The newest Lightning release that installs with torch==`torch` (and `extra`) on `python`."""
    return _resolve(torch, python, "lightning", extra)


def supports(release: str, torch: str, python: str, extra=()) -> bool:
    """Whether the release (both packages of that version) installs with torch==`torch` on `python`."""
    try:
        _resolve(torch, python, f"lightning=={release}", [f"pytorch-lightning=={release}", *extra])
    except UnsupportedError:
        return False
    return True


def _rows(text: str) -> list[tuple[int, int]]:
    """(start, end) of each [[torch]] block of the table's text."""
    starts = [m.start() for m in re.finditer(r"^\[\[torch\]\]\s*$", text, re.MULTILINE)]
    ends = [*starts[1:], len(text)]
    for i, start in enumerate(starts):  # a block ends at the next table header too
        header = re.compile(r"^\[", re.MULTILINE).search(text, start + 1, ends[i])
        if header:
            ends[i] = header.start()
    return list(zip(starts, ends, strict=True))


def resolve_table(path: pathlib.Path = matrix.MATRIX_FILE) -> list[dict]:
    """Per row of the table: its torch, label, era Lightning, the recorded and the resolved newest."""
    found = []
    for row in matrix.read_table(path).get("torch", []):
        torch, python = str(row["torch"]), str(row["python"])
        found.append({"torch": torch, "label": row.get("label"), "python": python, "era": str(row["lightning"]),
                      "recorded": row.get("lightning_newest"),
                      "resolved": newest_supporting(torch, python, row.get("extra", ()))})
    return found


def write_table(path: pathlib.Path, resolved: list[dict]) -> str:
    """The table's text with each row's `lightning_newest` set to the resolved value (comments kept)."""
    text = path.read_text()
    for (start, end), row in reversed(list(zip(_rows(text), resolved, strict=True))):  # one resolved per [[torch]] row
        block = text[start:end]
        line = f'lightning_newest = "{row["resolved"]}"'
        if re.search(r"^lightning_newest\s*=.*$", block, re.MULTILINE):
            block = re.sub(r"^lightning_newest\s*=.*$", line, block, count=1, flags=re.MULTILINE)
        else:
            block = re.sub(r"^(lightning\s*=.*)$", r"\1\n" + line, block, count=1, flags=re.MULTILINE)
        text = text[:start] + block + text[end:]
    return text


# --- the release list, for a bisection along Lightning ------------------------------------------------

@functools.lru_cache(maxsize=None)
def _json(path: str) -> dict:
    url = f"{(os.environ.get(JSON_API_ENV) or JSON_API).rstrip('/')}/{path}/json"
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            return json.loads(response.read().decode("utf-8"))
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise RegistryError(f"cannot read {url}: {getattr(exc, 'reason', exc)}") from None


def releases(package: str = "lightning") -> list:
    """The package's final releases (packaging's versions) with at least one file not yanked, oldest first."""
    found = []
    for text, files in _json(package).get("releases", {}).items():
        version = versions.final_release(text)
        if version is not None and any(not f.get("yanked") for f in files):
            found.append(version)
    return sorted(found)


def candidates(torch: str, python: str, first: str | None, last: str | None, extra=()) -> list[str]:
    """The Lightning releases from `first` to `last` (each compared on as many parts as it gives)
    published as both packages and installing with torch `torch` on `python`, oldest first (uv's
    resolver reads each release's metadata; a few at a time, each waits on the registry)."""
    from concurrent.futures import ThreadPoolExecutor

    both = set(releases("pytorch-lightning"))
    chosen = [v for v in releases("lightning") if v in both and versions.in_range(str(v), first, last)]
    uv()  # found once, before the threads ask for it
    with ThreadPoolExecutor(max_workers=4) as pool:
        fits = list(pool.map(lambda v: supports(str(v), torch, python, extra), chosen))
    return [str(v) for v, fit in zip(chosen, fits, strict=True) if fit]


def command(args) -> int:
    path = pathlib.Path(args.matrix) if args.matrix else matrix.MATRIX_FILE
    resolved = resolve_table(path)
    differ = [row for row in resolved if row["recorded"] != row["resolved"]]
    for row in resolved:
        where = f"torch {row['torch']}" + (f" ({row['label']})" if row["label"] else "")
        note = "" if row["recorded"] == row["resolved"] else f"  (recorded: {row['recorded'] or 'none'})"
        print(f"{where:<24} era Lightning {row['era']:<8} newest supporting it {row['resolved']}{note}")
    if args.write and differ:
        records.write_atomically(path, write_table(path, resolved))
        print(f"wrote lightning_newest of {len(differ)} row(s) into {path}")
        return 0
    if differ:
        print(f"error: {len(differ)} row(s) record another lightning_newest than the registry's metadata gives "
              f"(python -m harness lightning-newest --write)", file=sys.stderr)
        return 1
    return 0
