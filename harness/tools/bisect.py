"""Where a case's outcome changes across torch versions: `python -m harness bisect CASE_ID`.

The case runs in the venv of a torch row's session as the matrix runs it (the session's own pytest
command, harness.sessions, on the case's node id) and its outcome is read from the results file.
Over N rows it runs the oldest and the newest, then halves the range between two versions whose
outcomes differ: about log2(N)+1 runs where the outcome changes once. A row's venv is built only
when the bisection needs that row (a built one near the middle is taken instead when there is one;
--no-build: only built ones). It names the versions it did not run; --all runs every version,
the only way to see more than one change.

`--along lightning --torch 2.5` bisects along Lightning releases at a fixed torch row instead: the
releases the registry lists from the row's era Lightning (--from) to the newest that supports its
torch (--to), each checked against its own metadata; each runs in the row's environment with that
Lightning: the row's sessions where they pin it and their venv is built, else one venv per row, built
once with the row's install steps, whose Lightning is switched to each release in turn (seconds): a
bisection along Lightning builds at most one environment.
`--env VERSION=PYTHON` (repeatable) bisects over given interpreters instead of the matrix's rows.
`--script SCRIPT` bisects a plain script instead of a case, classified as `sweep` classifies it
(harness.scriptrun: exit 0 pass, 125 skip, anything else fail).
Exit status: 0 when the case ran on at least one version, 1 when on none, 2 for an unknown case id
(the closest are listed), session or version range.
"""

from __future__ import annotations

import dataclasses
import pathlib
import re
import subprocess
import sys
import tempfile

from harness import matrix, records, repro, sessions


@dataclasses.dataclass
class Target:
    version: str  # torch version of the row (or the --env label; along Lightning, the Lightning release)
    session: str  # the matrix session, or bisect-<label>
    python: pathlib.Path | None
    spec: matrix.Session | None = None  # None for --env
    outside: bool = False  # an environment outside the table (along Lightning): built from `spec`, not by nox

    @property
    def built(self) -> bool:
        return self.python is not None and self.python.exists()


@dataclasses.dataclass
class Result:
    target: Target
    outcome: str
    message: str = ""


def version_key(text: str) -> tuple:
    """'2.4.1' -> (2, 4, 1); a local or pre-release part is ignored ('2.15.0+cu132')."""
    release = records.torch_version(text).release
    if release == (0,):
        raise ValueError(f"not a version: {text!r}")
    return release


def in_range(version: str, first: str | None, last: str | None) -> bool:
    """`version` between `first` and `last`, each compared on as many parts as it gives
    (--from 2.4 includes 2.4.1; --to 2.5 includes 2.5.1)."""
    key = version_key(version)
    if first and key[:len(version_key(first))] < version_key(first):
        return False
    return not (last and key[:len(version_key(last))] > version_key(last))


def plan(first=None, last=None, device="cpu", envs=(), envdir=None) -> list[Target]:
    """The versions in range, oldest first: one session per torch row (the plain row; on CUDA the
    registry's wheel where there is one), or the given interpreters."""
    if envs:
        targets = []
        for entry in envs:
            label, sep, python = entry.partition("=")
            if not sep or not label or not python:
                raise ValueError(f"--env wants VERSION=PYTHON, got {entry!r}")
            targets.append(Target(label, f"bisect-{re.sub(r'[^0-9A-Za-z.]+', '_', label)}",
                                  pathlib.Path(python).expanduser()))
        return sorted((t for t in targets if in_range(t.version, first, last)), key=lambda t: version_key(t.version))
    chosen: dict[str, matrix.Session] = {}
    for spec in matrix.load():
        if spec.device != device or spec.nightly or spec.label or not in_range(spec.torch, first, last):
            continue
        if spec.torch not in chosen or (chosen[spec.torch].index and not spec.index):
            chosen[spec.torch] = spec
    targets = [Target(s.torch, s.name, sessions.venv_python(s.name, envdir), s)
               for s in sorted(chosen.values(), key=lambda s: version_key(s.torch))]
    if not targets:
        raise ValueError(f"no {device} row of the matrix has a torch between {first or 'the oldest'} and "
                         f"{last or 'the newest'}")
    return targets


def row_of(torch: str, device: str = "cpu") -> matrix.Session:
    """The plain session of the one torch row that `torch` names (2.5 names 2.5.1)."""
    rows = [s for s in matrix.load() if s.device == device and not (s.nightly or s.label or s.index)
            and in_range(s.torch, torch, torch)]
    if not rows:
        raise ValueError(f"--torch {torch} names no {device} row of the matrix")
    if len(rows) > 1:
        raise ValueError(f"--torch {torch} names several {device} rows of the matrix: {', '.join(s.torch for s in rows)}")
    return rows[0]


def plan_lightning(torch: str | None, first=None, last=None, device="cpu", envdir=None) -> list[Target]:
    """Along Lightning at the row `torch` names: the releases from `first` (default: the row's era
    Lightning) to `last` (default: the newest that supports its torch) that the registry lists and
    whose own metadata admits the row's torch and Python, oldest first."""
    from harness import lightning

    if not torch:
        raise ValueError("--along lightning needs --torch VERSION (the row to hold fixed)")
    era = row_of(torch, device)
    axis = {s.lightning: s for s in matrix.load() if s.lightning_of == era.name}
    first, last = first or era.lightning, last or next(iter(axis), era.lightning)
    releases = lightning.candidates(era.torch, era.python, first, last, era.extra)
    if not releases:
        raise ValueError(f"no Lightning release from {first} to {last} supports torch {era.torch} on Python "
                         f"{era.python}")
    shared = sessions.lightning_venv(era, envdir) / "bin" / "python"
    targets = []
    for release in releases:
        session = era if release == era.lightning else axis.get(release)
        python = sessions.venv_python(session.name, envdir) if session else None
        outside = python is None or not python.exists()  # runs in the row's one venv along Lightning
        if session is None:  # the row's pins with this Lightning
            session = dataclasses.replace(era, name=f"{era.name}_lightning{release.replace('.', '_')}",
                                          lightning=release, label=None)
        # the case's own node id runs, whatever the session selects
        targets.append(Target(release, session.name, shared if outside else python,
                              dataclasses.replace(session, lightning_of=None, label=None), outside))
    return targets


def environment(target: Target, envdir, build: bool) -> tuple[pathlib.Path | None, bool]:
    """(the python `target` runs in, ready, or None where --no-build leaves it unbuilt; whether it was
    built now). Along Lightning, a release without a built session venv runs in the row's one venv,
    its Lightning switched to the release's (harness.sessions.with_lightning)."""
    if target.outside:
        if not target.python.exists() and not build:
            return None, False
        return sessions.with_lightning(target.spec, target.python.parent.parent)
    if target.built:
        return target.python, False
    python = sessions.ensure_venv(target.session, envdir, build=build)
    return python, python is not None


def run_case(target: Target, nodeid: str, case_id: str) -> Result:
    """The case in the target's interpreter with the session's own pytest command."""
    spec = target.spec or next(s for s in reversed(matrix.load()) if s.device == "cpu" and not s.nightly)
    with tempfile.TemporaryDirectory(prefix="harness-bisect-") as tmp:
        command = [str(target.python), *sessions.pytest_args(
            spec, [nodeid, "-q", "-p", "no:cacheprovider", "--results-dir", tmp, "--session-name", target.session])]
        env = repro.clean_env(**(sessions.compile_cache_env(target.python.parent.parent) if target.spec else {}))
        try:
            done = subprocess.run(command, cwd=sessions.ROOT, env=env, capture_output=True, text=True,
                                  errors="replace", timeout=spec.case_timeout + 600)
        except subprocess.TimeoutExpired:
            return Result(target, "timeout", "no result in time")
        _, record = records.find_case(records.results_path(tmp, target.session), case_id)
    if record is None:
        tail = " | ".join(line for line in (done.stdout + done.stderr).splitlines() if line.strip())[-300:]
        return Result(target, "error", f"pytest exit {done.returncode}, no record: {tail}")
    message = (record.get("exc_type") or "").rsplit(".", 1)[-1]
    message = f"{message}: {record.get('message')}" if message and record.get("message") else record.get("message") or ""
    if record.get("reference"):
        message += f"  [{record['reference']}]"
    return Result(target, record["outcome"], message)


class Bisection:
    """Runs targets on demand, building a venv only when allowed and needed."""

    def __init__(self, targets: list[Target], case_id: str | None, build: bool, envdir, script=None, timeout=600.0,
                 axis: str = "torch"):
        self.targets, self.case_id, self.build, self.envdir, self.axis = targets, case_id, build, envdir, axis
        self.script, self.timeout = script, timeout  # --script: a plain script instead of a case
        self.results: dict[int, Result] = {}
        self.built: list[str] = []
        self.nodeid = None

    def runnable(self, index: int) -> bool:
        return self.targets[index].built or (self.build and self.targets[index].spec is not None)

    def run(self, index: int) -> Result:
        target = self.targets[index]
        target.python, built = environment(target, self.envdir, build=True)
        if built:
            self.built.append(target.version)
        if self.script is not None:
            from harness import sweep

            run = sweep.run_target(target, self.script, self.timeout, None)
            result = self.results[index] = Result(target, run.outcome, f"{run.exit}: {run.message}" if run.message
                                                  else run.exit)
        else:
            if self.nodeid is None:  # the case's node id, from the first environment that runs
                self.nodeid = repro.collect(target.python, [self.case_id])["cases"][self.case_id]["nodeid"]
            result = self.results[index] = run_case(target, self.nodeid, self.case_id)
        print(f"{self.axis} {target.version:<8} {target.session:<16} {result.outcome:<10} {result.message[:140]}".rstrip(),
              flush=True)
        return result

    def middle(self, low: int, high: int) -> int | None:
        """A version between `low` and `high` to run next: the middle, or a built one near it."""
        inside = [i for i in range(low + 1, high) if self.runnable(i)]
        if not inside:
            return None
        centre = (low + high) / 2
        near = [i for i in inside if self.targets[i].built and abs(i - centre) <= max(1, (high - low) / 6)]
        return min(near or inside, key=lambda i: abs(i - centre))

    def search(self, every: bool) -> None:
        runnable = [i for i in range(len(self.targets)) if self.runnable(i)]
        if every or len(runnable) <= 2:
            for index in runnable:
                self.run(index)
            return
        low, high = runnable[0], runnable[-1]
        if self.run(low).outcome == self.run(high).outcome:
            return  # no change between the ends (or an even number of them, which only --all shows)
        # Halve every interval whose ends differ: one change costs about log2(N) runs; a middle that
        # matches neither end (skip -> known -> fixed) leaves two intervals, each bisected.
        pending = [(low, high)]
        while pending:
            low, high = pending.pop(0)
            index = self.middle(low, high)
            if index is None:
                continue
            self.run(index)
            pending[:0] = [(a, b) for a, b in ((low, index), (index, high))
                           if self.results[a].outcome != self.results[b].outcome]


def targets_of(args) -> list[Target]:
    """The versions `args` asks for: torch rows, given interpreters, or Lightning releases at a row."""
    if args.along == "lightning":
        if getattr(args, "env", None):
            raise ValueError("--env bisects over interpreters, not along lightning")
        return plan_lightning(args.torch, args.first, args.last, args.device, args.envdir)
    if args.torch:
        raise ValueError("--torch holds a row fixed along lightning: add --along lightning")
    return plan(args.first, args.last, args.device, getattr(args, "env", ()), args.envdir)


def span(args, targets: list[Target]) -> str:
    """What a run goes across: 'torch 2.1.2 to 2.15.0', or 'lightning 2.4.0 to 2.6.6 at torch 2.5.1'."""
    fixed = f" at torch {targets[0].spec.torch}" if args.along == "lightning" else ""
    return f"{args.along} {targets[0].version} to {targets[-1].version}{fixed}, {len(targets)} version(s)"


def command(args) -> int:
    targets = targets_of(args)
    script = getattr(args, "script", None)
    bisection = Bisection(targets, args.case, build=not args.no_build, envdir=args.envdir, script=script,
                          timeout=getattr(args, "timeout", 600.0), axis=args.along)
    print(f"bisect {script.name if script else args.case}: {span(args, targets)}", flush=True)
    bisection.search(every=args.all)
    ran = [bisection.results[i] for i in sorted(bisection.results)]
    for before, after in zip(ran, ran[1:]):
        if before.outcome != after.outcome:
            print(f"boundary: {before.target.version} ({before.outcome}) -> {after.target.version} ({after.outcome})")
    if ran and all(r.outcome == ran[0].outcome for r in ran):
        print(f"no boundary: {ran[0].outcome} on every version that ran")
    skipped = [t.version for i, t in enumerate(targets) if i not in bisection.results]
    if skipped:
        print(f"not run: {', '.join(skipped)}" + ("" if args.all else " (a bisection sees the changes between versions "
                                                  "it ran; --all runs every version)"))
    print(f"ran {len(ran)} of {len(targets)} versions; built {len(bisection.built)} environment(s)"
          + (f": {', '.join(bisection.built)}" if bisection.built else ""))
    if not ran:
        print(f"error: the {'script' if script else 'case'} ran on no version (no environment built; drop --no-build to build them)",
              file=sys.stderr)
        return 1
    return 0
