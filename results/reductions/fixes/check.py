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

    python results/reductions/fixes/check.py PYTHON NAME --upstream DIR [-k EXPR]

checks the one patch instead (fixes/NAME.patch: the fix, and the regression test added to the upstream
test file of its neighbours; `python -m harness findings --upstream DIR` writes it). DIR holds stored
copies of upstream files as DIR/COMMIT/PATH. The patch's torch/ part is applied to the copy of torch, its
test part to a copy of the stored test file, and that file runs before and after the fix: the fix holds
when the script and every test the patch adds fail before and pass after, and no other test of the file
that passed before fails after.

    python results/reductions/fixes/check.py PYTHON NAME --aten DIR

checks a fix in ATen's C++ instead (fixes/NAME.aten.diff, against a source file of pytorch/pytorch its
header names, stored as DIR/COMMIT/PATH): a wheel ships no C++ source to patch, so the stored file is built
against PYTHON's torch headers as an extension whose kernels replace the ones the wheel registered for the
ops findings.toml names (`aten_fix`: `kernels`, the dispatch key), loaded before the script and the
regression test run. Built twice: the file as stored (the control: rebuilding alone must not fix it) and
with the diff applied. The fix holds when the script and the test fail without the extension and with
the control, and pass with the fix.
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


def apply_patch(diff: pathlib.Path, cwd: pathlib.Path, what: str) -> None:
    """GNU patch applies `diff` under `cwd`, each line of its context as the diff has it (--fuzz=0; a hunk may sit
    at other line numbers); where it does not apply, one line saying so (`what`: what it was applied to) and exit."""
    done = subprocess.run(["patch", "-p1", "--forward", "--fuzz=0", "--no-backup-if-mismatch", "-i", str(diff)],
                          cwd=cwd, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"error: {what}: {done.stdout.strip()} {done.stderr.strip()}")


def patched_copy(torch_dir: pathlib.Path, diff: pathlib.Path, into: pathlib.Path) -> list[str]:
    """`torch_dir` as hard links under `into`/torch with `diff` applied; the files the diff changed."""
    shutil.copytree(torch_dir, into / "torch", copy_function=os.link, symlinks=True)
    changed = re.findall(r"^\+\+\+ b/(\S+)", diff.read_text(encoding="utf-8"), flags=re.MULTILINE)
    apply_patch(diff, into, f"{diff.name} does not apply to the torch of {torch_dir}")
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


def split_patch(patch: pathlib.Path, into: pathlib.Path) -> tuple[pathlib.Path, pathlib.Path, str, str, list[str]]:
    """NAME.patch as its torch/ diff and its test diff (files under `into`), the test file's path and the
    commit of the stored copy it is against (from the patch's header), and the tests it adds."""
    text = patch.read_text(encoding="utf-8")
    header = re.search(r"^(test/\S+) as at ([0-9a-f]{7,40})\.$", text, flags=re.MULTILINE)
    start = text.find("\n--- a/test/")
    if not header or start < 0 or not text.startswith("Against "):
        sys.exit(f"error: {patch.name} is not a finding's upstream patch (no header naming its test file and commit)")
    fix_part, test_part = text[text.index("--- a/torch/"):start + 1], text[start + 1:]
    (into / "fix.diff").write_text(fix_part, encoding="utf-8")
    (into / "test.diff").write_text(test_part, encoding="utf-8")
    added = re.findall(r"^\+    def (test\w*)\(", test_part, flags=re.MULTILINE)
    return into / "fix.diff", into / "test.diff", header[1], header[2], added


def with_test_added(stored: pathlib.Path, test_diff: pathlib.Path, test_file: str, tree: pathlib.Path) -> pathlib.Path:
    """A copy of the stored upstream test file, at its path under `tree`, with the patch's test part applied."""
    target = tree / test_file
    target.parent.mkdir(parents=True)
    shutil.copyfile(stored, target)
    apply_patch(test_diff, tree, f"the test part does not apply to {stored}")
    return target


def catalogue_entry(name: str) -> dict:
    """findings.toml's entry of the finding whose script is NAME.py, {} where there is none (tomllib: Python 3.11)."""
    import tomllib

    catalogue = tomllib.loads((REDUCTIONS / "findings.toml").read_text(encoding="utf-8"))
    return next((f for f in catalogue.get("finding", []) if f.get("script") == f"{name}.py"), {})


def works_tests(name: str) -> list[str]:
    """The finding's tests of what a fix must keep working (findings.toml: `tests`, "works" or "works since X")."""
    try:
        finding = catalogue_entry(name)
    except ImportError:  # Python before 3.11: every added test is held to fail before the fix
        return []
    return [test for test, kind in finding.get("tests", {}).items() if str(kind).startswith("works")]


def added_name(test_id: str, added: list[str]) -> str | None:
    """Which of the patch's tests `test_id` runs: by its name, or its name for one device where the file
    makes one test per device from a template (inductor's CommonTemplate: test_x_cpu, test_x_cuda)."""
    name = test_id.rsplit("::", 1)[-1].split("[")[0]
    return next((test for test in added if re.fullmatch(rf"{test}(_(cpu|cuda|gpu|xpu|mps))?", name)), None)


def check_upstream_patch(args, work: pathlib.Path, torch_dir: pathlib.Path, version: str, script: pathlib.Path) -> int:
    """The patch mode (--upstream): the script, then the patched upstream test file, before and after."""
    patch = HERE / f"{args.name}.patch"
    if not patch.is_file():
        sys.exit(f"error: no such file: {patch}")
    fix, test_diff, test_file, commit, added = split_patch(patch, work)
    stored = pathlib.Path(args.upstream) / commit / test_file
    if not stored.is_file():
        sys.exit(f"error: no stored copy of {test_file} at {commit} under {args.upstream}")
    changed = patched_copy(torch_dir, fix, work / "overlay")
    target = with_test_added(stored, test_diff, test_file, work / "upstream")
    print(f"torch {version} at {torch_dir}; {patch.name} changes {', '.join(changed)} and adds {', '.join(added)} "
          f"to {test_file} ({commit[:7]})")
    before = run(args.python, [str(script)], None, work / "script-before")
    after = run(args.python, [str(script)], work / "overlay", work / "script-after")
    verdict = before.returncode != 0 and after.returncode == 0
    print(f"script: exit {before.returncode} before, {after.returncode} after: {'as expected' if verdict else 'NOT as expected'}")
    command = ["-m", "pytest", str(target), "-q", "-rA", "-p", "no:cacheprovider", *(["-k", args.keyword] if args.keyword else [])]
    outcomes = {side: pytest_outcomes(run(args.python, command, overlay, work / f"tests-{side}").stdout)
                for side, overlay in (("before", None), ("after", work / "overlay"))}
    new = {test_id for test_id in outcomes["before"].keys() | outcomes["after"].keys() if added_name(test_id, added)}
    works = works_tests(args.name)
    for test_id in sorted(new):
        # a test of what the fix must keep working passes after it; any other meets the bug: fails before
        ok = outcomes["after"].get(test_id) == "PASSED" and (
            added_name(test_id, works) is not None or outcomes["before"].get(test_id) == "FAILED")
        verdict &= ok
        print(f"added {test_id.rsplit('::', 1)[-1]}: {outcomes['before'].get(test_id)} before, "
              f"{outcomes['after'].get(test_id)} after: {'as expected' if ok else 'NOT as expected'}")
    verdict &= all(any(added_name(test_id, [name]) for test_id in new) for name in added)
    others = {side: {t: o for t, o in found.items() if t not in new} for side, found in outcomes.items()}
    counts = {side: {o: list(r.values()).count(o) for o in sorted(set(r.values()))} for side, r in others.items()}
    print(f"its neighbours in {test_file}: before {counts['before']}, after {counts['after']}")
    for test_id in sorted(others["before"].keys() | others["after"].keys()):
        if others["before"].get(test_id) != others["after"].get(test_id):
            print(f"  {others['before'].get(test_id)} -> {others['after'].get(test_id)}: {test_id}")
    worse = [t for t, o in others["before"].items() if o == "PASSED" and others["after"].get(t) != "PASSED"]
    verdict &= not worse and bool(others["before"])
    print("the fix holds" if verdict else "the fix does NOT hold")
    return 0 if verdict else 1


# Where the stored source is older or newer than the wheel's headers, what it calls that they lack (the
# one-argument isIntegralType, which c10 dropped): declared before the file, said in the output.
ATEN_COMPAT = """#include <c10/core/ScalarType.h>
namespace c10 {
[[maybe_unused]] inline bool isIntegralType(ScalarType t) { return isIntegralType(t, /*includeBool=*/false); }
}
"""
LOADER = """import torch
torch.ops.load_library({library!r})
"""


def aten_fix(name: str) -> dict:
    """findings.toml's `aten_fix` of the finding whose script is NAME.py: the kernels it replaces."""
    finding = catalogue_entry(name)
    if "aten_fix" not in finding:
        sys.exit(f"error: findings.toml gives no aten_fix (kernels, dispatch_key) for {name}")
    return finding["aten_fix"]


def build_kernels(python: str, source: pathlib.Path, fix: dict, into: pathlib.Path) -> pathlib.Path:
    """`source` built against PYTHON's torch as a library that registers its kernels over the wheel's."""
    into.mkdir(parents=True)
    flags = subprocess.run([python, "-c", "import torch, torch.utils.cpp_extension as e; "
                            "print(int(torch._C._GLIBCXX_USE_CXX11_ABI)); print(e.library_paths()[0]); "
                            "print(*e.include_paths(), sep=chr(10))"], capture_output=True, text=True, check=True)
    abi, libraries, *includes = flags.stdout.strip().splitlines()
    register = into / "register.cpp"
    register.write_text("".join(f"#include <ATen/ops/{op}_native.h>\n" for op in fix["kernels"])
                        + "#include <torch/library.h>\n\n"
                        + f"TORCH_LIBRARY_IMPL(aten, {fix['dispatch_key']}, m) {{\n"
                        + "".join(f'  m.impl("{op}", TORCH_FN(at::native::{op}));\n' for op in fix["kernels"]) + "}\n")
    (into / "compat.h").write_text(ATEN_COMPAT)
    library = into / "kernels.so"
    # -Bsymbolic: the library's calls and TORCH_FN bind to its own kernels, never to libtorch's of one name
    command = ["g++", "-shared", "-fPIC", "-O1", "-std=c++20", f"-D_GLIBCXX_USE_CXX11_ABI={abi}",
               *(f"-I{path}" for path in includes), "-include", str(into / "compat.h"), str(source), str(register),
               f"-L{libraries}", "-ltorch", "-ltorch_cpu", "-lc10", "-Wl,-Bsymbolic", f"-Wl,-rpath,{libraries}",
               "-o", str(library)]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        said = [line for line in done.stderr.splitlines() if "error" in line]
        sys.exit(f"error: {source.name} does not build against this torch: {(said or [done.stderr[-500:]])[0]}")
    (into / "sitecustomize.py").write_text(LOADER.format(library=str(library)))
    return into


def check_aten_fix(args, work: pathlib.Path, version: str, script: pathlib.Path) -> int:
    """The ATen mode (--aten): the script and the regression test without, with the control and with the fix."""
    diff, test = HERE / f"{args.name}.aten.diff", HERE / f"test_{args.name}.py"
    for path in (diff, test):
        if not path.is_file():
            sys.exit(f"error: no such file: {path}")
    header = re.match(r"Against (\S+) as at ([0-9a-f]{7,40})\b", diff.read_text(encoding="utf-8"))
    if not header:
        sys.exit(f"error: {diff.name} does not say what it is against (its first line: Against PATH as at COMMIT)")
    path, commit = header[1], header[2]
    stored = pathlib.Path(args.aten) / commit / path
    if not stored.is_file():
        sys.exit(f"error: no stored copy of {path} at {commit} under {args.aten}")
    fix = aten_fix(args.name)
    for side in ("control", "fixed"):
        (work / side / path).parent.mkdir(parents=True)
        shutil.copyfile(stored, work / side / path)
    apply_patch(diff, work / "fixed", f"{diff.name} does not apply to {stored}")
    overlays = {"without": None, **{side: build_kernels(args.python, work / side / path, fix, work / f"{side}-build")
                                    for side in ("control", "fixed")}}
    print(f"torch {version}; {diff.name} changes {path} ({commit[:7]}), built with its kernels "
          f"{', '.join(fix['kernels'])} over the wheel's ({fix['dispatch_key']}); declared before it: "
          f"{ATEN_COMPAT.splitlines()[2].strip()}")
    verdict = True
    for label, argv_ in (("script", [str(script)]), ("regression test", [str(test)])):
        slug = label.replace(" ", "-")
        codes = {side: run(args.python, argv_, overlay, work / f"{slug}-{side}").returncode
                 for side, overlay in overlays.items()}
        ok = codes["without"] != 0 and codes["control"] != 0 and codes["fixed"] == 0
        verdict &= ok
        print(f"{label}: exit {codes['without']} without, {codes['control']} with the control, {codes['fixed']} with the "
              f"fix: {'as expected' if ok else 'NOT as expected'}")
    print("the fix holds" if verdict else "the fix does NOT hold")
    return 0 if verdict else 1


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("python")
    parser.add_argument("name")
    parser.add_argument("--nearby", help="a torch test file to run before and after the fix (pytest)")
    parser.add_argument("-k", dest="keyword", help="pytest -k for --nearby or --upstream")
    parser.add_argument("--upstream", help="stored upstream files, DIR/COMMIT/PATH: check fixes/NAME.patch instead")
    parser.add_argument("--aten", help="stored upstream files, DIR/COMMIT/PATH: check fixes/NAME.aten.diff instead")
    args = parser.parse_args(argv)
    if args.aten:
        _, version = torch_folder(args.python)
        with tempfile.TemporaryDirectory(prefix="fix-check-") as temp:
            return check_aten_fix(args, pathlib.Path(temp), version, REDUCTIONS / f"{args.name}.py")
    if args.upstream:
        torch_dir, version = torch_folder(args.python)
        with tempfile.TemporaryDirectory(prefix="fix-check-") as temp:
            return check_upstream_patch(args, pathlib.Path(temp), torch_dir, version, REDUCTIONS / f"{args.name}.py")
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
