"""Check a proposed fix of a finding against an installed torch, without changing that install.

    python results/reductions/fixes/check.py PYTHON NAME [--nearby TEST_FILE [-k EXPR]]

PYTHON is an interpreter with the torch the fix is written against (a session venv's, e.g.
.nox/cpu_torch215/bin/python); NAME a finding's script name without `.py` (results/reductions/NAME.py,
its fix fixes/NAME.diff and its regression test fixes/test_NAME.py). The torch package is copied as
hard links into a temporary folder and the diff applied there with GNU patch, which writes each file
it changes anew (checked: a patched file never shares its inode with the install's). Then the
finding's script and its regression test run on the install as it is and on the patched copy, each
run with inductor's and Triton's caches of its own; with --nearby, a torch test file (from the
pytorch repository at the installed version) runs on both too, and the tests whose outcome differs
are named. The fix holds when the script and the test fail before and pass after, and no nearby
test that passed before fails after. Needs only the standard library, GNU patch and, for --nearby,
pytest in PYTHON's environment.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parent
REDUCTIONS = HERE.parent


def torch_folder(python: str) -> tuple[pathlib.Path, str]:
    """Where PYTHON's torch package lies, and its version."""
    done = subprocess.run([python, "-c", "import os, torch; print(os.path.dirname(torch.__file__)); print(torch.__version__)"],
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": ""})
    if done.returncode != 0:
        said = done.stderr.strip().splitlines()
        sys.exit(f"error: {python} cannot import torch: {said[-1] if said else f'exit {done.returncode}'}")
    folder, version = done.stdout.split()[-2:]
    return pathlib.Path(folder), version


def patched_copy(torch_dir: pathlib.Path, diff: pathlib.Path, into: pathlib.Path) -> list[str]:
    """`torch_dir` as hard links under `into`/torch with `diff` applied; the files the diff changed."""
    shutil.copytree(torch_dir, into / "torch", copy_function=os.link, symlinks=True)
    changed = re.findall(r"^\+\+\+ b/(\S+)", diff.read_text(encoding="utf-8"), flags=re.MULTILINE)
    # --fuzz=0: every line of context as the diff has it (a hunk may sit at other line numbers)
    done = subprocess.run(["patch", "-p1", "--forward", "--fuzz=0", "--no-backup-if-mismatch", "-i", str(diff)], cwd=into,
                          capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"error: {diff.name} does not apply to the torch of {torch_dir}: {done.stdout.strip()} {done.stderr.strip()}")
    for name in changed:
        if os.stat(into / name).st_ino == os.stat(torch_dir.parent / name).st_ino:
            sys.exit(f"error: patch changed {name} in place, which is the install's own file: stopped")
    return changed


def run(python: str, argv: list[str], overlay: pathlib.Path | None, caches: pathlib.Path) -> subprocess.CompletedProcess:
    caches.mkdir(parents=True)
    env = {**os.environ, "PYTHONPATH": str(overlay) if overlay else "", "TORCHINDUCTOR_CACHE_DIR": str(caches / "inductor"),
           "TRITON_CACHE_DIR": str(caches / "triton")}
    return subprocess.run([python, *argv], capture_output=True, text=True, env=env, timeout=3600)


def pytest_outcomes(output: str) -> dict[str, str]:
    """test id -> PASSED/FAILED/ERROR/SKIPPED/XFAIL/XPASS, from pytest's -rA summary lines."""
    found = {}
    for line in output.splitlines():
        # a skip is summarised as `SKIPPED [count] location: reason`, by where it was skipped
        match = re.match(r"^(SKIPPED) \[\d+\] (.+)$", line) or \
            re.match(r"^(PASSED|FAILED|ERROR|XFAIL|XPASS) (\S+)", line)
        if match:
            found[match[2]] = match[1]
    return found


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("python")
    parser.add_argument("name")
    parser.add_argument("--nearby", help="a torch test file to run before and after the fix (pytest)")
    parser.add_argument("-k", dest="keyword", help="pytest -k for --nearby")
    args = parser.parse_args(argv)
    diff, test, script = HERE / f"{args.name}.diff", HERE / f"test_{args.name}.py", REDUCTIONS / f"{args.name}.py"
    for path in (diff, test, script):
        if not path.is_file():
            parser.error(f"no such file: {path}")
    torch_dir, version = torch_folder(args.python)
    with tempfile.TemporaryDirectory(prefix="fix-check-") as temp:
        work = pathlib.Path(temp)
        changed = patched_copy(torch_dir, diff, work / "overlay")
        print(f"torch {version} at {torch_dir}; {diff.name} changes {', '.join(changed)}")
        verdict = True
        for label, argv_ in (("script", [str(script)]), ("regression test", [str(test)])):
            slug = label.replace(" ", "-")  # a cache path g++ is given: no spaces
            before = run(args.python, argv_, None, work / f"{slug}-before")
            after = run(args.python, argv_, work / "overlay", work / f"{slug}-after")
            ok = before.returncode != 0 and after.returncode == 0
            verdict &= ok
            print(f"{label}: exit {before.returncode} before, {after.returncode} after: {'as expected' if ok else 'NOT as expected'}")
            if not ok:
                print((after.stdout + after.stderr)[-3000:])
        if args.nearby:
            command = ["-m", "pytest", args.nearby, "-q", "-rA", "-p", "no:cacheprovider", *(["-k", args.keyword] if args.keyword else [])]
            before = pytest_outcomes(run(args.python, command, None, work / "nearby-before").stdout)
            after = pytest_outcomes(run(args.python, command, work / "overlay", work / "nearby-after").stdout)
            counts = {side: {o: list(r.values()).count(o) for o in sorted(set(r.values()))} for side, r in
                      (("before", before), ("after", after))}
            print(f"nearby tests ({pathlib.Path(args.nearby).name}): before {counts['before']}, after {counts['after']}")
            for test_id in sorted(before.keys() | after.keys()):
                if before.get(test_id) != after.get(test_id):
                    print(f"  {before.get(test_id)} -> {after.get(test_id)}: {test_id}")
            worse = [t for t in before if before[t] == "PASSED" and after.get(t) != "PASSED"]
            verdict &= not worse and bool(before)
        print("the fix holds" if verdict else "the fix does NOT hold")
        return 0 if verdict else 1


if __name__ == "__main__":
    sys.exit(main())
