"""Where a case's outcome changes across torch versions: `python -m harness bisect CASE_ID`.

The case runs in the venv of a torch row's session as the matrix runs it (the session's own pytest
command, harness.core.pytestrun, on the case's node id) and its outcome is read from the results file.
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
(harness.tools.scriptrun: exit 0 pass, 125 skip, anything else fail). The versions come from
harness.tools.targets, which sweep shares.
Exit status: 0 when the case ran on at least one version, 1 when on none, 2 for an unknown case id
(the closest are listed), session or version range.
"""

from __future__ import annotations

import dataclasses
import sys
import tempfile

from harness.core import matrix, outputs, paths, pytestrun, records, runsession, venvs
from harness.tools.repro import collector
from harness.tools.targets import Target, environment, run_script, span, targets_of


@dataclasses.dataclass
class Result:
    target: Target
    outcome: str
    message: str = ""


def run_case(target: Target, nodeid: str, case_id: str) -> Result:
    """The case in the target's interpreter with the session's own pytest command."""
    spec = target.spec or next(s for s in reversed(matrix.load()) if s.device == "cpu" and not s.nightly)
    with tempfile.TemporaryDirectory(prefix="harness-bisect-") as tmp:
        command = [str(target.python), *pytestrun.pytest_args(
            spec, [nodeid, "-q", "-p", "no:cacheprovider", "--results-dir", tmp, "--session-name", target.session])]
        caches = {}
        if target.spec:
            venv = venvs.venv_of(target.python)
            caches = {**pytestrun.case_cache_env(target.spec, venv),
                      pytestrun.COMPILE_CACHES_ENV: runsession.compile_caches_of(venv, target.session)}
        env = pytestrun.clean_env(**caches)
        code, printed = outputs.run(command, timeout=spec.case_timeout + 600, cwd=paths.ROOT, env=env)
        if code is None:
            return Result(target, "timeout", "no result in time")
        _, record = records.find_case(paths.results_path(target.session, tmp), case_id)
    if record is None:
        tail = " | ".join(line for line in printed.splitlines() if line.strip())[-300:]
        return Result(target, "error", f"pytest exit {code}, no record: {tail}")
    message = (record.get("exc_type") or "").rsplit(".", 1)[-1]
    message = (f"{message}: {record.get('message')}" if message and record.get("message")
               else record.get("message") or "")
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
        self.nodeid: str | None = None

    def runnable(self, index: int) -> bool:
        return self.targets[index].built or (self.build and self.targets[index].spec is not None)

    def run(self, index: int) -> Result:
        target = self.targets[index]
        python, built = environment(target, self.envdir, build=True)
        assert python is not None  # environment() leaves a target unbuilt only without build
        target.python = python
        if built:
            self.built.append(target.version)
        if self.script is not None:
            run = run_script(target, self.script, self.timeout, None)
            result = self.results[index] = Result(target, run.outcome, f"{run.exit}: {run.message}" if run.message
                                                  else run.exit)
        else:
            case_id = self.case_id
            assert case_id is not None  # a bisection runs a case or a script (harness.__main__.bisect)
            if self.nodeid is None:  # the case's node id, from the first environment that runs
                self.nodeid = collector.collect(target.python, [case_id])["cases"][case_id]["nodeid"]
            result = self.results[index] = run_case(target, self.nodeid, case_id)
        print(f"{self.axis} {target.version:<8} {target.session:<16} {result.outcome:<10} "
              f"{result.message[:140]}".rstrip(), flush=True)
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
            middle = self.middle(low, high)
            if middle is None:
                continue
            self.run(middle)
            pending[:0] = [(a, b) for a, b in ((low, middle), (middle, high))
                           if self.results[a].outcome != self.results[b].outcome]


def command(args) -> int:
    targets = targets_of(args)
    script = getattr(args, "script", None)
    bisection = Bisection(targets, args.case, build=not args.no_build, envdir=args.envdir, script=script,
                          timeout=getattr(args, "timeout", 600.0), axis=args.along)
    print(f"bisect {script.name if script else args.case}: {span(args, targets)}", flush=True)
    bisection.search(every=args.all)
    ran = [bisection.results[i] for i in sorted(bisection.results)]
    for before, after in zip(ran, ran[1:], strict=False):  # each with the next
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
        print(f"error: the {'script' if script else 'case'} ran on no version (no environment built; "
              "drop --no-build to build them)", file=sys.stderr)
        return 1
    return 0
