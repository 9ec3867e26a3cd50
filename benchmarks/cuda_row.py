"""A CUDA row measured on a GPU machine whose environment is already there, in one run. Prints figures;
asserts nothing. For the device tool (no registry: the session's wheels carried in) or any GPU box:

    python benchmarks/cuda_row.py --session cuda13_torch211 --out DIR [--alone 24] [--cpu-cells]

1. the session's cases (`python -m harness run SESSION`: its pin check, its workers, its cuda cells), into
   DIR/results: pytest's time, the worker count and why, the outcomes;
2. `--alone N` cells of it, chosen across families and outcomes, each run again alone (a fresh pytest and
   worker, the one case), into DIR/alone: the cells whose outcome differs from the session's run;
3. `--cpu-cells`: the row's CPU session on this machine (a GPU visible), into DIR/cpu-here, against the
   committed table's CPU row: what the CPU cells would add to a CUDA session.
Then `nox -s report -- DIR/results results` (or copy DIR/results/SESSION.* into results/) shows the row.
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import os
import pathlib
import subprocess
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # the checkout, for `harness`

from harness.core import matrix, paths, records, sessions, timings  # noqa: E402


def harness_run(session: str, results: pathlib.Path, *args: str, workers: str | None = None) -> tuple[int, float]:
    env = {k: v for k, v in os.environ.items() if k != sessions.SESSION_ENV}
    env[paths.RESULTS_ENV] = str(results)
    if workers:
        env[sessions.WORKERS_ENV] = workers
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "harness", "run", session, *args], cwd=paths.ROOT, env=env)
    return done.returncode, time.monotonic() - start


def cases_of(path: pathlib.Path) -> dict[str, dict]:
    return {r["case"]: r for r in records.read(path) if r["kind"] == "case"}


def spread(cases: dict[str, dict], count: int) -> list[dict]:
    """`count` records, families in turn and within a family its outcomes in turn, so that every family
    comes before any comes twice, and each one's outcomes alike."""
    by_family = collections.defaultdict(lambda: collections.defaultdict(list))
    for record in sorted(cases.values(), key=lambda r: r["case"]):
        by_family[record["family"]][record["outcome"]].append(record)
    chosen = []
    while len(chosen) < count and any(any(groups.values()) for groups in by_family.values()):
        for family in sorted(by_family):
            groups = [g for _, g in sorted(by_family[family].items()) if g]
            if groups and len(chosen) < count:
                turn = sum(1 for r in chosen if r["family"] == family) % len(groups)
                chosen.append(groups[turn].pop(0))
    return chosen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--session", default="cuda13_torch211")
    parser.add_argument("--out", type=pathlib.Path, default=pathlib.Path(os.environ.get("OUT", "cuda-row")))
    parser.add_argument("--alone", type=int, default=24)
    parser.add_argument("--cpu-cells", action="store_true")
    args = parser.parse_args()
    spec = matrix.find(args.session)
    out = args.out.resolve()
    code, seconds = harness_run(spec.name, out / "results")
    path = paths.results_path(spec.name, out / "results")
    if not path.is_file():  # the command said why (a pin that does not match, no GPU): nothing to measure
        raise SystemExit(f"{spec.name}: exit {code} after {seconds:.0f} s, no results written")
    back = records.read(path)
    environment, end, cases = back[0], timings.read(path), cases_of(path)
    print(f"{spec.name}: exit {code}, {seconds:.0f} s through the command, {end.get('seconds')} s of pytest; "
          f"workers {environment.get('workers')}; GPU {environment.get('gpu')}, driver {environment.get('gpu_driver')}, "
          f"CUDA {environment.get('cuda')}, torch {environment.get('torch')}")
    print("  outcomes: " + ", ".join(f"{n} {o}" for o, n in collections.Counter(
        r["outcome"] for r in cases.values()).most_common()))
    harness_messages = [r["case"] for r in cases.values() if "harness" in (r.get("message") or "")]
    print(f"  records whose message names the harness: {len(harness_messages)} {harness_messages[:5]}")

    if args.alone:
        chosen = spread(cases, args.alone)

        def alone(index_record):
            index, record = index_record
            harness_run(spec.name, out / "alone" / str(index), record["nodeid"], workers="1")
            return record, cases_of(paths.results_path(spec.name, out / "alone" / str(index))).get(record["case"])

        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, (os.cpu_count() or 2) // 2)) as pool:
            pairs = list(pool.map(alone, enumerate(chosen)))
        differ = [(r["case"], r["outcome"], a and a["outcome"]) for r, a in pairs if not a or a["outcome"] != r["outcome"]]
        families = sorted({r["family"] for r, _ in pairs})
        print(f"alone: {len(pairs) - len(differ)} of {len(pairs)} cells ({', '.join(families)}) give the session's "
              f"outcome when run alone; differ: {differ}")

    if args.cpu_cells:
        row = next(s for s in matrix.load() if s.device == "cpu" and s.torch == spec.torch and s.label == spec.label
                   and not s.lightning_of)
        code, seconds = harness_run(row.name, out / "cpu-here", workers=str(max(1, (os.cpu_count() or 2) // 2)))
        here = cases_of(paths.results_path(row.name, out / "cpu-here"))
        table = cases_of(paths.results_path(row.name))
        ran = [c for c, r in here.items() if (r.get("params") or {}).get("device") != "cuda"]
        differ = [(c, table[c]["outcome"], here[c]["outcome"]) for c in ran
                  if c in table and table[c]["outcome"] != here[c]["outcome"]]
        print(f"{row.name} on this machine: {len(ran)} CPU cells in {seconds:.0f} s; {len(differ)} differ from the "
              f"committed table: {differ[:20]}")


if __name__ == "__main__":
    main()
