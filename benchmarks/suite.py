"""The harness's own suite as CI runs it: `bash .ci/run` in a fresh clone of this checkout's HEAD, on this
machine. Prints its wall time, the CPU it took (user and system, over all its processes), pytest's summary
and time, and from the suite's JUnit file the test time summed by file and the slowest tests. Asserts
nothing; exits with the run's status.

    python benchmarks/suite.py [--keep DIR] [--top 15]

Run it with nothing else on the machine: the suite is CPU-bound (a worker a core), and whatever runs
beside it adds to its time. Target (#54): under 25 minutes on the 2-core development machine; the
developers' guide's bound is 30.
"""

from __future__ import annotations

import argparse
import collections
import pathlib
import re
import resource
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ElementTree

ROOT = pathlib.Path(__file__).resolve().parents[1]
JUNIT = pathlib.Path(".nox") / "tests" / "suite-junit.xml"  # where the tests session writes it (noxfile.py)
SUMMARY = re.compile(r"^=+ (.*(?:passed|failed|error).*) in ([0-9.]+)s")


def test_times(junit: pathlib.Path) -> list[tuple[float, str, str]]:
    """Each test of the JUnit file: (seconds, file, name), slowest first."""
    found = []
    for case in ElementTree.parse(junit).getroot().iter("testcase"):
        module = (case.get("classname") or "").split(".")
        found.append((float(case.get("time") or 0.0), module[1] if len(module) > 1 else module[0],
                      case.get("name") or ""))
    return sorted(found, reverse=True)


def run_suite(clone: pathlib.Path) -> dict:
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=clone, capture_output=True, text=True,
                            check=True).stdout.strip()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(["bash", ".ci/run"], cwd=clone, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    summary = [match for line in done.stdout.splitlines() if (match := SUMMARY.match(line))]
    return {"commit": commit, "returncode": done.returncode, "wall": wall, "user": after.ru_utime - before.ru_utime,
            "system": after.ru_stime - before.ru_stime, "tail": done.stdout[-3000:],
            "pytest": (summary[-1].group(1), float(summary[-1].group(2))) if summary else None,
            "tests": test_times(clone / JUNIT) if (clone / JUNIT).is_file() else []}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", default=None, help="clone into DIR (new) and keep it, for its logs and venvs")
    parser.add_argument("--top", type=int, default=15, help="how many files and tests to list")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="harness-suite-") as tmp:
        clone = pathlib.Path(args.keep).resolve() if args.keep else pathlib.Path(tmp) / "clone"
        figures = run_suite(clone)
    print(f"suite: bash .ci/run in a fresh clone of {figures['commit']}, exit {figures['returncode']}")
    print(f"  wall                      {figures['wall'] / 60:6.1f} min  (target < 25 min; the guide's bound 30)")
    print(f"  CPU, user / system        {figures['user'] / 60:6.1f} / {figures['system'] / 60:.1f} min")
    if figures["pytest"]:
        said, seconds = figures["pytest"]
        print(f"  pytest                    {seconds / 60:6.1f} min  ({said})")
    else:
        print("  pytest printed no summary; the run's last output:\n" + figures["tail"])
    tests = figures["tests"]
    if tests:
        by_file: collections.Counter[str] = collections.Counter()
        for seconds, module, _ in tests:
            by_file[module] += seconds
        print(f"  test time over the workers {sum(s for s, _, _ in tests):7.0f} s, {len(tests)} tests; by file:")
        for module, seconds in by_file.most_common(args.top):
            print(f"    {seconds:7.0f} s  {module}")
        print("  slowest tests:")
        for seconds, module, name in tests[:args.top]:
            print(f"    {seconds:7.0f} s  {module}::{name}")
    sys.exit(figures["returncode"])


if __name__ == "__main__":
    main()
