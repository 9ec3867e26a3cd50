"""Turn `nox -l --json -t cpu` / `-t cuda` listings into the nightly's job matrix.

    python .github/scripts/matrix.py CPU_JSON CUDA_JSON [--only ONLY_JSON]

Prints `matrix=[{"session": ..., "runner": [labels]}, ...]`, `count=N` and `expect=SESSION ...` (the
sessions whose results the report must find) for $GITHUB_OUTPUT.
The runner labels come from $CPU_RUNNER and $GPU_RUNNER: a JSON array of labels, a JSON string,
or one bare label. An empty $GPU_RUNNER leaves the CUDA sessions out (no GPU runner yet).
--only keeps the sessions that listing also has (the dispatch input's tag).
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


def names(path: str) -> list[str]:
    with open(path, encoding="utf-8") as handle:
        return [entry["session"] for entry in json.load(handle)]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("cpu")
    parser.add_argument("cuda")
    parser.add_argument("--only")
    args = parser.parse_args(argv)
    only = set(names(args.only)) if args.only else None
    cpu_runner = labels(os.environ.get("CPU_RUNNER") or "ubuntu-latest")
    gpu = os.environ.get("GPU_RUNNER", "").strip()
    matrix = [{"session": name, "runner": cpu_runner} for name in names(args.cpu)]
    cuda = names(args.cuda)
    if gpu:
        matrix += [{"session": name, "runner": labels(gpu)} for name in cuda]
    elif cuda:
        print(f"::notice::GPU_RUNNER is empty: {len(cuda)} CUDA sessions left out", file=sys.stderr)
    if only is not None:
        matrix = [entry for entry in matrix if entry["session"] in only]
    if not matrix:
        print("::error::no session selected", file=sys.stderr)
        return 1
    print("matrix=" + json.dumps(matrix, separators=(",", ":")))
    print(f"count={len(matrix)}")
    print("expect=" + " ".join(entry["session"] for entry in matrix))  # the sessions the report expects
    return 0


if __name__ == "__main__":
    sys.exit(main())
