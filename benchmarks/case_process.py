"""What a case's own process costs, per case, under each way of isolating it. Prints figures; asserts nothing.

    python benchmarks/case_process.py [--session cpu_torch215] [--cases 6] [--op-db]

In the session's venv (built with nox if missing), each of `--cases` distinct small programs (a
compiled function, forward and backward, inductor, as a case runs one) runs in a process of its own:
  fork-warm     forked from a process warmed up with a compile (what a machine without a GPU does:
                harness.plugin.warmup, forking)
  fork-imports  forked from a process that only imported what a compile loads (what a machine with a
                GPU does: a compile there would initialise CUDA, harness.plugin.cudaguard)
  fresh         a new interpreter per case (`python -c`), which imports torch and compiles cold
Each program differs (a constant in its graph), so no case is served another's compiled code; each
mode gets a compile cache of its own, empty at its start. `--op-db`: each case also reads torch's
OpInfo database, as an op property's process does where the warm process could not read it (a GPU).
Times are wall seconds from the start of the case's process to its end; the median and the range.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # the checkout, for `harness`

from harness.core import matrix, pytestrun, venvs  # noqa: E402

PROGRAM = """
import torch
x = torch.randn(64, requires_grad=True)
torch.compile(lambda t: (torch.sin(t) * {k}).cos().sum(), backend="inductor")(x).backward()
"""
OP_DB = "from torch.testing._internal.common_methods_invocations import op_db\n"

# Runs in the session's venv: warms up as the harness does (or not), then times each case's process.
MEASURE = """
import json, os, sys, time
mode, count, op_db = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"
program, read_op_db = {program!r}, {op_db!r}
times = []
if mode == "fresh":
    import subprocess
    for k in range(count):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", (read_op_db if op_db else "") + program.format(k=k + 2)], check=True)
        times.append(time.perf_counter() - start)
else:
    from harness.plugin import cudaguard, warmup
    cudaguard.guard_warm_process()
    warmup.warm_up(forking=True, compile_kernels=mode != "fork-imports")
    import gc
    for k in range(count):
        gc.freeze()
        start = time.perf_counter()
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                if op_db:
                    exec(read_op_db)
                exec(program.format(k=k + 2))
            except BaseException as error:
                print(error, file=sys.stderr)
                code = 1
            os._exit(code)
        _, status = os.waitpid(pid, 0)
        times.append(time.perf_counter() - start)
        assert status == 0, f"case {{k}} failed"
print(json.dumps(times))
"""


def measure(python: pathlib.Path, mode: str, cases: int, op_db: bool) -> list[float]:
    with tempfile.TemporaryDirectory(prefix=f"case-process-{mode}-") as cache:
        env = pytestrun.clean_env(TORCHINDUCTOR_CACHE_DIR=cache, TRITON_CACHE_DIR=cache)
        done = subprocess.run([str(python), "-c", MEASURE.format(program=PROGRAM, op_db=OP_DB), mode, str(cases),
                               "1" if op_db else "0"], capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise SystemExit(f"{mode}: {done.stderr.strip().splitlines()[-1:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--session", default="cpu_torch215")
    parser.add_argument("--cases", type=int, default=6)
    parser.add_argument("--op-db", action="store_true")
    args = parser.parse_args()
    spec = matrix.find(args.session)
    python = venvs.ensure_venv(spec.name)
    print(f"{spec.name}: {args.cases} cases a mode" + (", each reading op_db" if args.op_db else ""))
    for mode in ("fork-warm", "fork-imports", "fresh"):
        times = measure(python, mode, args.cases, args.op_db)
        print(f"  {mode:13} median {statistics.median(times):6.2f} s a case  (min {min(times):.2f}, "
              f"max {max(times):.2f}; first {times[0]:.2f})")


if __name__ == "__main__":
    main()
