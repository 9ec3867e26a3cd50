"""One case across the matrix's torch versions: `python -m harness bisect CASE_ID`.

Every torch row between --from and --to (by version; the CPU session of each row, or one CUDA
session with --device cuda) runs the case in its own session venv `.nox/<session>` (missing ones
are built with `nox -s SESSION --install-only`, or skipped with --no-build) through pytest and
the harness plugin, exactly as the matrix runs it, and the outcome is read from the results file.
One line per version, then each boundary where the outcome changes from one version that ran to
the next: the same comparison as the regression table's transitions (harness/report.py).

`--env VERSION=PYTHON` (repeatable) replaces the matrix rows with given interpreters (any
environment with torch and pytest), e.g. to bisect over hand-made venvs.

Exit status: 0 when the case ran on at least one version, 1 when it ran on none, 2 for an
unknown case id (the closest ids are listed) or session.
"""

from __future__ import annotations

import dataclasses
import pathlib
import re
import subprocess
import sys
import tempfile

from harness import records, repro

NOT_RUN = ("no environment", "build failed")


@dataclasses.dataclass
class Target:
    version: str  # torch version the row pins (or the --env label)
    session: str  # --session-name for pytest: the matrix session, or bisect-<label>
    shown: str  # the session column
    python: pathlib.Path | None
    spec: object = None  # matrix.Session, None for --env


@dataclasses.dataclass
class Result:
    target: Target
    outcome: str  # a record outcome, or "no environment" / "build failed"
    exc_type: str | None = None
    message: str | None = None
    upstream: list = dataclasses.field(default_factory=list)
    torch: str | None = None

    @property
    def ran(self) -> bool:
        return self.outcome not in NOT_RUN


def version_key(text: str) -> tuple:
    """'2.4.1' -> (2, 4, 1); a local or pre-release part is ignored ('2.15.0+cu132')."""
    parts = re.match(r"\d+(?:\.\d+)*", text.strip())
    if not parts:
        raise ValueError(f"not a version: {text!r}")
    return tuple(int(p) for p in parts.group().split("."))


def in_range(version: str, first: str | None, last: str | None) -> bool:
    """`version` between `first` and `last`, each compared on as many parts as it gives
    (--from 2.4 includes 2.4.1; --to 2.5 includes 2.5.1)."""
    key = version_key(version)
    if first and key[:len(version_key(first))] < version_key(first):
        return False
    if last and key[:len(version_key(last))] > version_key(last):
        return False
    return True


def plan(first=None, last=None, device="cpu", envs=(), envdir=None) -> list[Target]:
    """What to run, oldest torch first."""
    if envs:
        targets = []
        for entry in envs:
            label, sep, python = entry.partition("=")
            if not sep or not label or not python:
                raise ValueError(f"--env wants VERSION=PYTHON, got {entry!r}")
            python = pathlib.Path(python).expanduser()
            venv = python.parent.parent.name if python.parent.name == "bin" else str(python)
            targets.append(Target(label, f"bisect-{re.sub(r'[^0-9A-Za-z.]+', '_', label)}", venv, python))
        try:
            targets.sort(key=lambda t: version_key(t.version))
        except ValueError:
            pass  # labels that are not versions: the order given
        return [t for t in targets if _safe_in_range(t.version, first, last)]
    from harness import matrix

    envdir = pathlib.Path(envdir) if envdir else repro.default_envdir()
    chosen = {}
    for spec in matrix.load():
        if spec.device != device or spec.nightly or not in_range(spec.torch, first, last):
            continue
        # One session per torch row: on CUDA, the registry's default wheel where there is one.
        if spec.torch not in chosen or (chosen[spec.torch].index and not spec.index):
            chosen[spec.torch] = spec
    specs = sorted(chosen.values(), key=lambda s: version_key(s.torch))
    return [Target(s.torch, s.name, s.name, repro.venv_python(envdir, s.name), s) for s in specs]


def _safe_in_range(version, first, last) -> bool:
    try:
        return in_range(version, first, last)
    except ValueError:
        return True


def compile_cache_env(target: Target) -> dict:
    """A session venv's own inductor and Triton caches, as its nox session uses them."""
    if target.spec is None or target.python is None:
        return {}
    root = target.python.parent.parent
    return {"TORCHINDUCTOR_CACHE_DIR": str(root / "inductor-cache"), "TRITON_CACHE_DIR": str(root / "triton-cache"),
            "TORCHINDUCTOR_FX_GRAPH_CACHE": "1"}


def run_case(target: Target, case_id: str, test_path: str, timeout: float) -> Result:
    """Run the case with pytest and the harness plugin in the target's interpreter; the outcome
    is the one its results file records."""
    with tempfile.TemporaryDirectory(prefix="harness-bisect-") as tmp:
        command = [str(target.python), "-m", "pytest", test_path, "-p", "no:cacheprovider", "-q",
                   "--results-dir", tmp, "--session-name", target.session]
        try:
            done = subprocess.run(command, cwd=repro.ROOT, env=repro.clean_env(**compile_cache_env(target)),
                                  capture_output=True,
                                  text=True, errors="replace", timeout=timeout)
        except subprocess.TimeoutExpired:
            return Result(target, "timeout", message=f"no result after {timeout:.0f} s")
        environment, record = records.find_case(pathlib.Path(tmp) / f"{target.session}.jsonl", case_id)
        torch = environment.get("torch") if environment else None
    if record is None:
        shown = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()][-3:]
        output = " | ".join(shown)
        outcome = "crash" if done.returncode < 0 else "error"
        return Result(target, outcome, message=f"pytest exit {done.returncode}, no record: {output}", torch=torch)
    return Result(target, record["outcome"], record.get("exc_type"), record.get("message"),
                  record.get("upstream") or [], torch)


def boundaries(results: list[Result]) -> list[tuple[Result, Result]]:
    """Consecutive versions that ran and whose outcomes differ."""
    ran = [r for r in results if r.ran]
    return [(a, b) for a, b in zip(ran, ran[1:]) if a.outcome != b.outcome]


def describe(result: Result, width: int = 140) -> str:
    if not result.ran:
        return ""
    text = ""
    if result.exc_type:
        text = result.exc_type.rsplit(".", 1)[-1] + (f": {result.message}" if result.message else "")
    elif result.message:
        text = result.message
    if result.outcome in ("known", "fixed") and result.upstream:
        text = f"{text}  [{', '.join(result.upstream)}]" if text else f"[{', '.join(result.upstream)}]"
    return text if len(text) <= width else text[:width - 3] + "..."


def command(args) -> int:
    envdir = pathlib.Path(args.envdir) if args.envdir else repro.default_envdir()
    try:
        targets = plan(args.first, args.last, args.device, args.env, envdir)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if not targets:
        print("error: no torch version of the matrix is in that range", file=sys.stderr)
        return 2
    results: dict[int, Result] = {}

    def python_of(index: int) -> pathlib.Path | None:
        target = targets[index]
        if target.spec is None:
            return target.python if target.python.exists() else None
        try:
            return repro.ensure_env(target.session, envdir, build=not args.no_build)
        except repro.ReproError as exc:
            print(f"error: {exc}", file=sys.stderr)
            results[index] = Result(target, "build failed")
            return None

    # The case id is checked (and its test located) by collecting in the first environment there is.
    collected, first = None, len(targets)
    for index, target in enumerate(targets):
        target.python = python_of(index)
        if target.python is not None:
            collected, first = repro.collect(target.python, args.case), index  # UnknownCase: exit 2
            break
        results.setdefault(index, Result(target, "no environment"))
    test_path = f"{collected['case']['path']}::{collected['case']['name']}" if collected else None

    version_width = max(len(t.version) for t in targets)
    session_width = max(len(t.shown) for t in targets)
    outcome_width = max(len(o) for o in ("timeout", *NOT_RUN))
    print(f"bisect {args.case}: {len(targets)} version(s), torch {targets[0].version} to {targets[-1].version}",
          flush=True)
    for index, target in enumerate(targets):
        if index > first:
            target.python = python_of(index)
        if index not in results:
            if target.python is None:
                results[index] = Result(target, "no environment")
            else:
                timeout = (target.spec.case_timeout if target.spec else 600) + 300
                results[index] = run_case(target, args.case, test_path, timeout)
        result = results[index]
        line = f"torch {target.version:<{version_width}}  {target.shown:<{session_width}}  " \
               f"{result.outcome:<{outcome_width}}  {describe(result)}"
        print(line.rstrip(), flush=True)
    ordered = [results[i] for i in range(len(targets))]
    changes = boundaries(ordered)
    for before, after in changes:
        print(f"boundary: {before.target.version} ({before.outcome}) -> {after.target.version} ({after.outcome})")
    ran = [r for r in ordered if r.ran]
    if not ran:
        print("the case ran on no version", file=sys.stderr)
        return 1
    if not changes:
        print(f"no boundary: {ran[0].outcome} on every version that ran ({len(ran)})")
    return 0
