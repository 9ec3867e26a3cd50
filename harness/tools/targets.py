"""The versions a bisection or a sweep runs over, shared by both (harness.tools.bisect,
harness.tools.sweep): one environment per torch row in a range (the row's plain session; on CUDA the
registry's wheel where there is one), given interpreters (--env VERSION=PYTHON), or the Lightning
releases at one torch row (--along lightning --torch 2.5), each environment ready to run in."""

from __future__ import annotations

import dataclasses
import pathlib
import shutil

from harness.core import matrix, venvs, versions
from harness.core.errors import BadInput
from harness.tools import scriptrun


@dataclasses.dataclass
class Target:
    version: str  # torch version of the row (or the --env label; along Lightning, the Lightning release)
    session: str  # the matrix session, or bisect-<label>
    python: pathlib.Path  # its interpreter, which may not be built yet
    spec: matrix.Session | None = None  # None for --env
    outside: bool = False  # an environment outside the table (along Lightning): built from `spec`, not by nox

    @property
    def built(self) -> bool:
        return self.python.exists()


def torch_targets(first=None, last=None, device="cpu", envs=(), envdir=None) -> list[Target]:
    """The versions in range, oldest first: one session per torch row (the plain row; on CUDA the
    registry's wheel where there is one), or the given interpreters."""
    if envs:
        targets = []
        for entry in envs:
            label, sep, python = entry.partition("=")
            if not sep or not label or not python:
                raise BadInput(f"--env wants VERSION=PYTHON, got {entry!r}")
            found = shutil.which(pathlib.Path(python).expanduser())  # a path, or a name on PATH (python3)
            if found is None:  # a given interpreter is never built
                raise BadInput(f"--env {entry}: no such interpreter")
            targets.append(Target(label, matrix.local_session_name(label, prefix="bisect-"), pathlib.Path(found)))
        return sorted((t for t in targets if versions.in_range(t.version, first, last)),
                      key=lambda t: versions.release(t.version))
    chosen: dict[str, matrix.Session] = {}
    for spec in matrix.load():
        if spec.device != device or spec.nightly or spec.label:
            continue
        torch = pinned_torch(spec)
        if not versions.in_range(torch, first, last):
            continue
        if torch not in chosen or (chosen[torch].index and not spec.index):
            chosen[torch] = spec
    targets = [Target(torch, s.name, venvs.venv_python(s.name, envdir), s)
               for torch, s in sorted(chosen.items(), key=lambda item: versions.release(item[0]))]
    if not targets:
        raise BadInput(f"no {device} row of the matrix has a torch between {first or 'the oldest'} and "
                         f"{last or 'the newest'}")
    return targets


def pinned_torch(spec: matrix.Session) -> str:
    """The torch version a row's session pins: every session's but the nightly's, which no bisection
    or sweep runs over."""
    if spec.torch is None:
        raise BadInput(f"{spec.name} pins no torch version (the nightly): no row to run over")
    return spec.torch


def row_of(torch: str, device: str = "cpu") -> matrix.Session:
    """The plain session of the one torch row that `torch` names (2.5 names 2.5.1)."""
    rows = [s for s in matrix.load() if s.device == device and not (s.nightly or s.label or s.index)
            and versions.in_range(pinned_torch(s), torch, torch)]
    if not rows:
        raise BadInput(f"--torch {torch} names no {device} row of the matrix")
    if len(rows) > 1:
        raise BadInput(f"--torch {torch} names several {device} rows of the matrix: "
                       f"{', '.join(pinned_torch(s) for s in rows)}")
    return rows[0]


def lightning_targets(torch: str | None, first=None, last=None, device="cpu", envdir=None) -> list[Target]:
    """Along Lightning at the row `torch` names: the releases from `first` (default: the row's era
    Lightning) to `last` (default: the newest that supports its torch) that the registry lists and
    whose own metadata admits the row's torch and Python, oldest first."""
    from harness.tools import lightning_releases

    if not torch:
        raise BadInput("--along lightning needs --torch VERSION (the row to hold fixed)")
    era = row_of(torch, device)
    axis = {s.lightning: s for s in matrix.load() if s.lightning_of == era.name}
    first, last = first or era.lightning, last or next(iter(axis), era.lightning)
    releases = lightning_releases.candidates(pinned_torch(era), era.python, first, last, era.extra)
    if not releases:
        raise BadInput(f"no Lightning release from {first} to {last} supports torch {era.torch} on Python "
                         f"{era.python}")
    shared = venvs.python_in(venvs.lightning_venv(era, envdir))
    targets = []
    for release in releases:
        session = era if release == era.lightning else axis.get(release)
        own = venvs.venv_python(session.name, envdir) if session else None
        if own is not None and own.exists():
            python, outside = own, False
        else:  # runs in the row's one venv along Lightning
            python, outside = shared, True
        if session is None:  # the row's pins with this Lightning
            session = matrix.with_lightning(era, release)
        # the case's own node id runs, whatever the session selects
        targets.append(Target(release, session.name, python,
                              dataclasses.replace(session, lightning_of=None, label=None), outside))
    return targets


def environment(target: Target, envdir, build: bool) -> tuple[pathlib.Path | None, bool]:
    """(the python `target` runs in, ready, or None where --no-build leaves it unbuilt; whether it was
    built now). Along Lightning, a release without a built session venv runs in the row's one venv,
    its Lightning switched to the release's (harness.core.venvs.with_lightning)."""
    if target.outside:
        if not target.python.exists() and not build:
            return None, False
        assert target.spec is not None  # lightning_targets gives every target outside the table its spec
        return venvs.with_lightning(target.spec, venvs.venv_of(target.python))
    if target.built:
        return target.python, False
    python = venvs.ensure_venv(target.session, envdir, build=build)
    return python, python is not None


def run_script(target: Target, script: pathlib.Path, timeout: float, memory_limit: str | None) -> scriptrun.ScriptRun:
    """A plain script in the target's environment, sharing its venv's compile caches."""
    cache = venvs.venv_of(target.python) if target.spec else None
    return scriptrun.run(target.python, script, timeout=timeout, memory_limit=memory_limit, cache_dir=cache)


def targets_of(args) -> list[Target]:
    """The versions `args` asks for: torch rows, given interpreters, or Lightning releases at a row."""
    if args.along == "lightning":
        if getattr(args, "env", None):
            raise BadInput("--env bisects over interpreters, not along lightning")
        return lightning_targets(args.torch, args.first, args.last, args.device, args.envdir)
    if args.torch:
        raise BadInput("--torch holds a row fixed along lightning: add --along lightning")
    return torch_targets(args.first, args.last, args.device, getattr(args, "env", ()), args.envdir)


def held_at(args, targets: list[Target]) -> str:
    """Along Lightning, the torch row every release runs at (' at torch 2.5.1'); else ''."""
    spec = targets[0].spec
    return f" at torch {spec.torch}" if args.along == "lightning" and spec is not None else ""


def span(args, targets: list[Target]) -> str:
    """What a run goes across: 'torch 2.1.2 to 2.15.0', or 'lightning 2.4.0 to 2.6.6 at torch 2.5.1'."""
    fixed = held_at(args, targets)
    return f"{args.along} {targets[0].version} to {targets[-1].version}{fixed}, {len(targets)} version(s)"


