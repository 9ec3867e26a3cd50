"""Turn `nox -l --json` listings into the nightly's job matrices, or name the newest CPU session.

    python .github/scripts/matrix.py CPU_JSON CUDA_JSON [--only ONLY_JSON]
    python .github/scripts/matrix.py --newest-cpu LATEST_JSON

The first prints, for $GITHUB_OUTPUT, `cpu=` and `cuda=` (JSON job matrices: [{"session", "runner"}])
and `cpu_sessions=` and `cuda_sessions=` (the sessions each report must find). The CPU and CUDA
sessions are two jobs, so that the CPU report never waits on a GPU runner. Runner labels come from
$CPU_RUNNER and $GPU_RUNNER: a JSON array of labels, a JSON string, or one bare label. The CUDA
sessions run only where a GPU runner is declared: an empty $GPU_RUNNER leaves them out.
--only keeps the sessions that listing also has (a tag chosen for the run).

The second prints the session of `nox -l --json -t latest` that runs on CPU (`session=NAME`): the
newest row, read from the matrix table, never written into a workflow.
"""

from __future__ import annotations

import argparse
import json
import os
import sys


def labels(value: str) -> list[str]:
    value = value.strip()
    if value[:1] in '["':
        parsed = json.loads(value)
        return [parsed] if isinstance(parsed, str) else [str(label) for label in parsed]
    return [value]


def listing(path: str) -> list[dict]:
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


def names(path: str) -> list[str]:
    return [entry["session"] for entry in listing(path)]


def newest_cpu(path: str) -> str:
    found = [entry["session"] for entry in listing(path) if "cpu" in entry.get("tags", [])]
    if len(found) != 1:
        raise SystemExit(f"::error::expected one CPU session tagged latest, found {found or 'none'}")
    return found[0]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("cpu", nargs="?")
    parser.add_argument("cuda", nargs="?")
    parser.add_argument("--only")
    parser.add_argument("--newest-cpu", metavar="LATEST_JSON")
    args = parser.parse_args(argv)
    if args.newest_cpu:
        print(f"session={newest_cpu(args.newest_cpu)}")
        return 0
    if not (args.cpu and args.cuda):
        parser.error("CPU_JSON and CUDA_JSON are required")
    only = set(names(args.only)) if args.only else None
    keep = (lambda name: name in only) if only is not None else (lambda name: True)
    cpu_runner = labels(os.environ.get("CPU_RUNNER") or "ubuntu-latest")
    gpu = os.environ.get("GPU_RUNNER", "").strip()
    cpu = [{"session": name, "runner": cpu_runner} for name in names(args.cpu) if keep(name)]
    cuda_names = [name for name in names(args.cuda) if keep(name)]
    cuda = [{"session": name, "runner": labels(gpu)} for name in cuda_names] if gpu else []
    if cuda_names and not gpu:
        print(f"::notice::no GPU runner declared (repository variable NIGHTLY_GPU_RUNNER): {len(cuda_names)} CUDA "
              "sessions left out", file=sys.stderr)
    if not cpu and not cuda and not cuda_names:
        print("::error::no session selected", file=sys.stderr)
        return 1
    if not cpu and not cuda:
        # a manual run of the CUDA sessions where no GPU runner is declared: nothing can run, and
        # that is no failure of the matrix (the notice above says why); every job after this skips
        print("::notice::nothing to run here: the sessions chosen are CUDA sessions and no GPU runner is declared",
              file=sys.stderr)
    print("cpu=" + json.dumps(cpu, separators=(",", ":")))
    print("cuda=" + json.dumps(cuda, separators=(",", ":")))
    print("cpu_sessions=" + " ".join(entry["session"] for entry in cpu))
    print("cuda_sessions=" + " ".join(entry["session"] for entry in cuda))
    return 0


if __name__ == "__main__":
    sys.exit(main())
