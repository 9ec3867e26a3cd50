"""A user's script across the matrix's torch rows: `python -m harness sweep SCRIPT`.

The script runs in the venv of every row in the range (the rows `bisect` picks: one plain
session per torch version), each venv built with `nox -s SESSION --install-only` where it is
missing, unless --no-build (harness.tools.targets, shared with bisect). Each run is classified by
harness.tools.scriptrun (exit 0 pass, 125 skip,
3 known and 5 limitation as `repro`'s scripts use them, anything else fail with the code and the
last exception line; crash, timeout, out of memory as in sessions). The version table is printed
and written, as Markdown, to --out (default results/sweep/<script>.md).
Exit status: 0 when the script ran on at least one version, 1 when on none, 2 for bad input.
"""

from __future__ import annotations

import pathlib
import sys

from harness.core import paths, records, venvs
from harness.tools import preflight, scriptrun
from harness.tools.targets import Target, environment, held_at, run_script, span, targets_of


def table(script: pathlib.Path, rows: list[tuple[Target, scriptrun.ScriptRun | None]], axis: str = "torch",
          fixed: str = "") -> str:
    lines = [f"Sweep of `{script.name}`{fixed}", "", f"| {axis} | session | outcome | exit | seconds | message |",
             "|---|---|---|---|---|---|"]
    for target, result in rows:
        if result is None:
            lines.append(f"| {target.version} | {target.session} | not run | | | no environment (--no-build) |")
        else:
            message = result.message[:160].replace("|", "/")
            lines.append(f"| {target.version} | {target.session} | {result.outcome} | {result.exit} | "
                         f"{result.seconds:.1f} | {message} |")
    ran = [(t, r) for t, r in rows if r is not None]
    changes = [f"Changes between {axis} {a.version} ({ra.outcome}) and {b.version} ({rb.outcome})."
               for (a, ra), (b, rb) in zip(ran, ran[1:], strict=False) if ra.outcome != rb.outcome]
    return "\n".join(lines + ([""] + changes if changes else [])) + "\n"


def fails_the_same_way(run: scriptrun.ScriptRun, newest: scriptrun.ScriptRun) -> bool:
    """One bug along the versions, however torch wraps it: the exceptions one run's error names are the
    innermost of the other's. torch 2.1's `LoweringException: AssertionError:` is 2.15's
    `InductorError: LoweringException: AssertionError: ...` (inductor's InductorError came later). An
    older torch that lacks an API the script calls (`AttributeError: module 'torch' has no attribute`)
    fails another way, unless the newest's error is an AttributeError too: the rule reads exception
    names, not messages, whose wording changes between versions."""
    shorter, longer = sorted((run.chain, newest.chain), key=len)
    return bool(shorter) and longer[len(longer) - len(shorter):] == shorter


def write_issue(script: pathlib.Path, rows: list[tuple[Target, scriptrun.ScriptRun | None]], out: pathlib.Path) -> None:
    """The sweep as an issue in PyTorch's bug template: the versions it fails and passes on, its output
    and collect_env on the newest failing one, and what it gives there without torch.compile (the
    expectation where no version passes)."""
    from harness.tools.repro.command import collect_env
    from harness.tools.repro.issue import pytorch_bug_issue, script_title

    ran = [(t, r) for t, r in rows if r is not None]
    failed = [(t, r) for t, r in ran if r.outcome not in ("pass", "skip")]
    if not failed:
        print(f"no issue written: {script.name} fails on no version", file=sys.stderr)
        return
    newest, result = failed[-1]
    # The versions that fail the newest one's way (an older torch may lack an API the script calls)
    failing = [(t, r) for t, r in failed if fails_the_same_way(r, result)]
    passing = [t.version for t, r in ran if r.outcome == "pass"]
    otherwise = [(t.version, r.message[:80]) for t, r in failed if not fails_the_same_way(r, result)]
    eager = scriptrun.run(newest.python, script, without_compile=True, cache_dir=venvs.venv_of(newest.python))
    expected = (f"what torch {', '.join(passing)} gives: the script runs without error" if passing else
                "what the same script gives with torch.compile replaced by the identity (plain eager) on torch "
                f"{newest.version}: {eager.outcome}" + ("" if eager.outcome == "pass" else f" ({eager.message[:200]})"))
    text = pytorch_bug_issue(script_title(script.read_text(), f"torch.compile: {script.stem} fails"), script.name,
                             script.read_text(), [(t.version, r.error) for t, r in failing], passing, expected,
                             result.output, collect_env(newest.python), otherwise)
    records.write_atomically(out, text)
    print(f"wrote {out}", file=sys.stderr)


def default_out(script: pathlib.Path) -> pathlib.Path:
    return paths.results_subdir(paths.SWEEP) / f"{script.stem}.md"


def command(args) -> int:
    script = preflight.check_script(args.script)
    scriptrun.memory_limit_bytes(args.memory_limit)  # a malformed limit is bad input before any build
    targets = targets_of(args)  # an unknown row or an empty range: BadInput
    missing = sorted({str(venvs.venv_of(t.python).name) if t.outside else t.session for t in targets if not t.built})
    if missing and not args.no_build:
        print(f"sweep will build {len(missing)} environment(s): {', '.join(missing)}", file=sys.stderr, flush=True)
    print(f"sweep {script.name}: {span(args, targets)}", flush=True)
    rows: list[tuple[Target, scriptrun.ScriptRun | None]] = []
    for target in targets:
        python, _ = environment(target, args.envdir, build=not args.no_build)
        if python is None:
            rows.append((target, None))
            print(f"{args.along} {target.version:<8} {target.session:<16} not run (no environment; --no-build)",
                  flush=True)
            continue
        target.python = python
        result = run_script(target, script, args.timeout, args.memory_limit)
        rows.append((target, result))
        print(f"{args.along} {target.version:<8} {target.session:<16} {result.outcome:<10} {result.exit:<9} "
              f"{result.seconds:6.1f} s  {result.message[:120]}".rstrip(), flush=True)
    text = table(script, rows, args.along, held_at(args, targets))
    out = pathlib.Path(args.out) if args.out else default_out(script)
    out.parent.mkdir(parents=True, exist_ok=True)
    records.write_atomically(out, text)
    print(text, end="")
    print(f"wrote {out}", file=sys.stderr)
    if args.issue:
        write_issue(script, rows, out.with_suffix(".issue.md"))
    if all(result is None for _, result in rows):
        print("error: the script ran on no version (no environment built; drop --no-build to build them)",
              file=sys.stderr)
        return 1
    return 0
