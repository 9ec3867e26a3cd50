"""How big the report is, and how long it takes to build, for the committed table and for the table
with a CUDA line beside every CPU row. Prints figures; asserts nothing.

    python benchmarks/report_size.py [--results results]

The CUDA line is synthetic, for size only, never written into results/: each CPU session is mirrored
into a `cuda12_` session of the same torch whose CUDA cases carry their CPU twin's record (its
outcome, message, figures), in a temporary directory. The page (report.html) embeds the grid only;
each cell's record is in report-cells/SESSION.js beside it (harness.report.page).
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
import tempfile
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # the checkout, for `harness`

from harness.core import paths, records, resultsfile  # noqa: E402
from harness.report import render  # noqa: E402


def mirror_cuda(table: pathlib.Path, into: pathlib.Path) -> int:
    """Write into `into` the table's files and a cuda12 twin of each plain CPU session; how many twins."""
    made = 0
    for path in paths.results_files(table):
        found = records.read(path)
        (into / path.name).write_text(path.read_text(encoding="utf-8"), encoding="utf-8")
        environment = found[0]
        name = environment["session"]
        if not name.startswith("cpu_torch") or environment["identity"]["label"]:
            continue
        twin_name = "cuda12_" + name[len("cpu_"):]
        writer = resultsfile.ResultsWriter(into / f"{twin_name}{paths.RESULTS_SUFFIX}")
        identity = {**environment["identity"], "session": twin_name, "device": "cuda", "line": "cuda12",
                    "plain": twin_name}
        writer.write({**environment, "session": twin_name, "identity": identity, "gpu": "synthetic"})
        cases = {r["case"]: r for r in found[1:] if r["kind"] == "case"}
        for case in cases:
            twin = cases.get(case.replace("[cuda-", "[cpu-", 1))
            if "[cuda-" not in case or twin is None:
                continue
            writer.write({**twin, "case": case, "params": {**twin.get("params", {}), "device": "cuda"}})
        writer.write(records.end_record(exitstatus=0, counts={}, reused=0, seconds=1))
        writer.close()
        made += 1
    return made


def measure(directory: pathlib.Path, out: pathlib.Path) -> dict:
    start = time.monotonic()
    data = render.build([directory], previous_source="not compared here")
    built = time.monotonic() - start
    render.write(data, out)
    cells = sorted((out / "report-cells").glob("*.js"))
    return {"sessions": len(data["sessions"]), "cases shown": len(data["cases"]) - len(data["folded"]),
            "build s": round(built, 1), "report.html MB": round((out / "report.html").stat().st_size / 1e6, 2),
            "report-cells MB (all)": round(sum(p.stat().st_size for p in cells) / 1e6, 2),
            "largest cells file MB": round(max(p.stat().st_size for p in cells) / 1e6, 2),
            "report.json MB": round((out / "report.json").stat().st_size / 1e6, 2)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", default=str(paths.ROOT / "results"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="report-size-") as scratch:
        scratch = pathlib.Path(scratch)
        print("committed table:", json.dumps(measure(pathlib.Path(args.results), scratch / "cpu")))
        (scratch / "with-cuda").mkdir()
        twins = mirror_cuda(pathlib.Path(args.results), scratch / "with-cuda")
        print(f"with {twins} synthetic CUDA sessions:",
              json.dumps(measure(scratch / "with-cuda", scratch / "with-cuda-out")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
