"""Carrying results over: a case's record from the last run is reused when, and only when, nothing
it depends on has changed since.

What a case depends on is keyed per family (one case file): the exact set of distributions installed
in the session's environment (not the project's own), its interpreter, the machine facts compiled code
depends on (inductor's vector ISA and the C++ compiler it builds with, not the CPU model's name; the
GPU and its driver for a CUDA session), the options that change outcomes (time limit, reruns, memory
limit), and the project's sources: the family's file, the modules under cases/ that are not case
files (conftest.py, programs/), and every harness module that runs in a session (harness/core and
harness/plugin, the folders of that runtime). The keys of a run are kept in its environment record
(`reuse_keys`), and so is a digest of each of those sources (`reuse_sources`: the check that the
committed table was measured with the code at hand reads them, and says which file changed). Each
source is keyed by its content and its path from the checkout's root, so a fresh clone has the keys
of the run that made the table. A family whose key is unchanged has its records carried over, each
saying which run and commit measured it (`reused_from`). `error` records are never carried: those
cases run again (`flaky` ones are carried, attempts and all). A run that finished (its `end`
record) of the full session is a source; a run narrowed by pytest arguments neither reuses nor is
reused.

    python -m harness.plugin.reuse SESSION --plan PATH [--fresh]   (in the session's venv, before pytest)

writes the plan (the families and cases to run, the records to carry) to PATH; when nothing needs to
run, it writes the session's results file itself (and its JUnit file), and pytest need not start.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import importlib.metadata
import json
import os
import pathlib
import platform
import shutil
import subprocess
import sys

from harness.core import caseid, limits, matrix, outcomes, paths, records, resultsfile, timings
from harness.core.errors import BadInput
from harness.core.sources import family_files, family_sources, source_digests
from harness.plugin import junit
from harness.plugin.environment import git_commit, installed_packages

REUSE_FROM_ENV = "HARNESS_REUSE_FROM"  # a directory of results files to reuse from (default: the results dir)
FRESH_ENV = "HARNESS_FRESH"


def _digest(data) -> str:
    text = data if isinstance(data, (bytes, str)) else json.dumps(data, sort_keys=True)
    return hashlib.sha256(text.encode() if isinstance(text, str) else text).hexdigest()[:16]


def _first_output_line(command: list[str]) -> str | None:
    if not shutil.which(command[0]):
        return None
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return next(iter(done.stdout.strip().splitlines()), None)


VECTOR_ISA_FILE = "harness-vector-isa.json"  # in the venv: what pick_vec_isa answered, per machine


def _cpu_flags() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as cpuinfo:
            return next((line for line in cpuinfo if line.startswith(("flags", "Features"))), "")
    except OSError:
        return ""


def vector_isa() -> str:
    """The vector instruction set inductor's C++ backend compiles for on this machine, as torch picks
    it: what changes compiled CPU code, where the CPU model's name does not (hosted runners of one
    kind come with several CPU models of the same ISA). Read in the session's venv, where picking it
    costs about 11 s (torch's import and a test compile per ISA): kept in the venv for what it depends
    on (torch, the CPU's flags, the compiler, ATEN_CPU_CAPABILITY), so a venv restored on another
    machine asks torch again."""
    try:
        torch = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        torch = None
    inputs = _digest({"torch": torch, "machine": platform.machine(), "flags": _cpu_flags(), "compiler": compiler(),
                      "capability": os.environ.get("ATEN_CPU_CAPABILITY"), "cxx": os.environ.get("CXX")})
    cache = pathlib.Path(sys.prefix) / VECTOR_ISA_FILE
    try:
        known = json.loads(cache.read_text())
    except (OSError, ValueError):
        known = {}
    if not isinstance(known, dict):
        known = {}
    if isinstance(known.get(inputs), str):
        return known[inputs]
    isa = pick_vector_isa()
    if not isa.startswith("unknown"):
        try:  # another process may write it too: each writes whole files, the last one wins
            partial = cache.with_name(f"{cache.name}.{os.getpid()}")
            partial.write_text(json.dumps({**known, inputs: isa}))
            partial.replace(cache)
        except OSError as exc:  # a read-only venv: asked again next time
            print(f"harness: vector ISA not kept in {cache}: {exc}", file=sys.stderr)
    return isa


def pick_vector_isa() -> str:
    """What torch's own pick_vec_isa answers (imports torch and inductor)."""
    try:
        try:
            from torch._inductor.cpu_vec_isa import pick_vec_isa  # torch >= 2.5
        except ImportError:
            from torch._inductor.codecache import pick_vec_isa
        return str(pick_vec_isa()) or "none"  # an invalid ISA (no SIMD) prints as ""
    except Exception as exc:  # an old torch without it, a broken compiler: still a key, never a crash
        return f"unknown ({type(exc).__name__})"


def compiler() -> str | None:
    """The C++ compiler inductor builds with (CXX, else g++), by its version line."""
    return _first_output_line([os.environ.get("CXX", "g++"), "--version"])


def machine(spec: matrix.Session) -> dict:
    """What compiled code depends on besides the environment: the architecture, inductor's vector
    ISA and the compiler (not the CPU model); the GPU and its driver for a CUDA session."""
    facts = {"machine": platform.machine(), "vector_isa": vector_isa(), "compiler": compiler()}
    if spec.device == "cuda":
        facts["gpu"] = _first_output_line(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"])
    return facts


def options(spec: matrix.Session) -> dict:
    """The options of a session's run that change outcomes."""
    return {"case_timeout": limits.case_timeout(spec.case_timeout), "reruns": limits.case_reruns(),
            "memory_limit": limits.memory_limit(), "env": dict(spec.env)}


def family_keys(spec: matrix.Session, root: pathlib.Path = paths.ROOT, sources: dict | None = None) -> dict[str, str]:
    """The reuse key of each family, computed in the session's environment (`sources`: source_digests()):
    the sources it reaches by imports (harness.core.sources.family_sources), with what every family shares."""
    sources = source_digests(root) if sources is None else sources
    shared = {"distributions": installed_packages(), "python": platform.python_implementation() + " " +
              platform.python_version(), "machine": machine(spec), "options": options(spec)}
    return {family: _digest({**shared, "sources": {path: sources.get(path) for path in reached}})
            for family, reached in family_sources(root).items()}


def source(directory: pathlib.Path, session: str) -> list[dict]:
    """The records of the session's last run in `directory` if it can be reused from: it ended (its end
    record), ran the full session and kept its keys; else nothing. A run that stopped early is a source for
    what it recorded only (records.run_complete: plan() runs the rest)."""
    path = paths.results_path(session, directory)
    if not path.is_file():
        return []
    try:
        found = records.read(path)
    except records.ResultsError as error:
        print(f"harness: nothing reused from {path}, which cannot be read: {error}", file=sys.stderr)
        return []
    return found if found and found[-1]["kind"] == "end" and found[0].get("reuse_keys") else []


def plan(spec: matrix.Session, directory: pathlib.Path, fresh: bool = False, root: pathlib.Path = paths.ROOT) -> dict:
    """Which families and cases run, and which records are carried over. A family runs whole where its key
    changed, or where the last run did not record every case it collected (pytest then leaves out the
    cases whose record is carried, harness.plugin: the rest run); a case whose record is never carried
    (the harness's `error`, a file that could not be collected) runs again."""
    sources = source_digests(root)
    keys = family_keys(spec, root, sources)
    previous = [] if fresh else source(directory, spec.name)
    previous_keys = previous[0].get("reuse_keys", {}) if previous else {}
    complete = bool(previous) and records.run_complete(previous[-1])
    origin = previous[0].get("reused_from") or {"started": previous[0].get("started"),
                                                 "git_commit": previous[0].get("git_commit")} if previous else None
    carried, run = [], []
    for family, path in family_files(root).items():
        relative = path.relative_to(root).as_posix()
        if keys[family] != previous_keys.get(family):
            run.append(relative)
            continue
        again = []
        for record in (r for r in previous if r["kind"] == "case" and r.get("family") == family):
            if record["outcome"] in outcomes.NOT_CARRIED:
                again.append(record["nodeid"])
            else:
                carried.append({**record, "reused_from": record.get("reused_from") or origin})
        run += [relative] if not complete or relative in again else again
    return {"session": spec.name, "keys": keys, "sources": sources, "run": run, "carried": carried,
            "exitstatus": exit_status(carried), "previous_environment": previous[0] if previous else None,
            "previous_complete": complete}


def leave_as_measured(path: pathlib.Path) -> None:
    """A run that measured nothing, where the last run is its own results file: that file stays as it is,
    byte for byte (its records say when and at which commit they were measured; rewriting them would
    change the committed table for a run that did no work). Its JUnit file is written where missing."""
    junit_path = path.with_suffix(".xml")
    if not junit_path.exists():
        junit.write(junit_path, records.read(path))


def carry_everything(the_plan: dict, path: pathlib.Path) -> None:
    """The results file of a run that ran nothing: its environment as the reused run measured it,
    this run's start and commit, and every record carried over."""
    previous = the_plan["previous_environment"]
    reused_from = previous.get("reused_from") or {"started": previous.get("started"),
                                                  "git_commit": previous.get("git_commit")}
    now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    writer = resultsfile.ResultsWriter(path)
    writer.write({**{k: v for k, v in previous.items() if k != "schema"}, "started": now,
                  "git_commit": git_commit(), "reuse_keys": the_plan["keys"], "reuse_sources": the_plan["sources"],
                  "reused_from": reused_from})
    counts: dict[str, int] = {}
    for record in the_plan["carried"]:  # the times of the run that measured them stay out (harness.core.timings)
        writer.write({k: v for k, v in timings.split(record)[0].items() if k != "schema"})
        counts[record["outcome"]] = counts.get(record["outcome"], 0) + 1
    writer.write(records.end_record(exit_status(the_plan["carried"]), counts, len(the_plan["carried"])))
    writer.close()
    junit.write(path.with_suffix(".xml"), writer.records())


def exit_status(carried: list[dict]) -> int:
    """What pytest would have exited with: 1 when a case has an outcome that fails a session."""
    return int(any(r["outcome"] in outcomes.HARD for r in carried))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.plugin.reuse")
    parser.add_argument("session")
    parser.add_argument("--plan", required=True, metavar="PATH", help="where the plan goes (JSON)")
    parser.add_argument("--fresh", action="store_true", help="reuse nothing (the keys are still kept)")
    args = parser.parse_args(argv)
    try:
        spec = matrix.find(args.session)
        fresh = args.fresh or os.environ.get(FRESH_ENV, "") not in ("", "0")
        the_plan = plan(spec, pathlib.Path(os.environ.get(REUSE_FROM_ENV) or paths.results_dir()), fresh)
    except BadInput as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    pathlib.Path(args.plan).write_text(json.dumps(the_plan, default=str))
    run = ", ".join(t if caseid.is_nodeid(t) else caseid.family_of(t) for t in the_plan["run"]) or "nothing"
    unfinished = the_plan["previous_environment"] is not None and not the_plan["previous_complete"]
    print(f"{spec.name}: {len(the_plan['carried'])} records reused"
          + (" (fresh run)" if fresh else "")
          + (" (the last run did not record every case it collected: what it missed runs)" if unfinished else "")
          + f"; to run: {run}", file=sys.stderr)
    if not the_plan["run"]:
        target = paths.results_path(spec.name)
        source_dir = pathlib.Path(os.environ.get(REUSE_FROM_ENV) or paths.results_dir())
        if paths.results_path(spec.name, source_dir).resolve() == target.resolve():
            leave_as_measured(target)
        else:
            carry_everything(the_plan, target)
    return 0


if __name__ == "__main__":
    sys.exit(main())
