"""Reduction: the smallest script that still fails as the matrix records on the failing version and
passes on the passing one. Cheap predicates in-process; one real reduction in the main job's venv."""

import re
import subprocess
import sys
import textwrap
import time
import traceback

import pytest

from harness.core import matrix, pytestrun
from harness.tools import scriptrun
from harness.tools.reduce import command as reduce
from harness.tools.reduce import tensors as reduce_tensors
from harness.tools.repro import collector
from harness.tools.repro import script as repro_script
from tests.conftest import CHECKOUT_VENVS, ROOT
from tests.test_sweep import USER_SCRIPT

pytestmark = [CHECKOUT_VENVS,  # runs or builds the checkout's session venvs (tests/conftest.py)
              pytest.mark.filterwarnings("ignore::SyntaxWarning")]  # candidates compiled in-process
CASE = "empty_init/copy_copy_in_compiled_fn_under_mode[cpu-eager-graphbreaks-pass_through]"


class VersionRunner:
    """Runs a candidate in this process with `VERSION` set, as a venv of that torch would, and
    `COMPILING` false where it runs without torch.compile."""

    def __init__(self, version):
        self.version, self.runs = version, 0

    def run(self, path, timeout, without_compile=False):
        self.runs += 1
        scope = {"VERSION": self.version, "COMPILING": not without_compile, "__name__": "__main__"}
        try:
            exec(compile(path.read_text(), str(path), "exec"), scope)
            return scriptrun.classify(0, "", 0.0)
        except Exception:
            return scriptrun.classify(1, traceback.format_exc(), 0.0)


# A semantic bug of "version 15": compiled and eager differ; on 12 they agree, and without compile too.
SEMANTIC = textwrap.dedent("""\
    import math
    TABLE = {n: math.factorial(n) for n in range(6)}

    def unrelated(a, b):
        return [a * b for _ in range(3)]

    def eager(x):
        return x * 2

    def compiled(x):
        return x * 2 + (1 if VERSION >= 13 and COMPILING else 0)

    unrelated(1, 2)
    x = 6
    assert compiled(x) == eager(x), f"compiled {compiled(x)}, eager {eager(x)}"
    print("done")
    """)
SIGNATURE = reduce.Signature("AssertionError", reduce.message_pattern("compiled 13, eager 12"))


def reduction(passing=True, deadline=60.0):
    test = reduce.Interestingness(SIGNATURE, VersionRunner(15), VersionRunner(12) if passing else None,
                                  deadline=time.monotonic() + deadline, timeout=10, out=sys.stdout)
    assert test(SEMANTIC)
    return test, *reduce.minimize(SEMANTIC, test)


def test_the_reduction_keeps_the_figure_and_passes_where_the_bug_is_fixed():
    test, reduced, finished = reduction()
    assert finished
    assert reduce.line_count(reduced) < reduce.line_count(SEMANTIC)
    assert "unrelated" not in reduced and "math" not in reduced
    assert "VERSION" in reduced and "assert" in reduced  # the comparison, and what differs
    assert SIGNATURE.shown_by(VersionRunner(15).run(_file(reduced), 10))
    assert VersionRunner(12).run(_file(reduced), 10).outcome == "pass"


def test_without_a_passing_version_the_differential_check_keeps_the_compile():
    test, reduced, finished = reduction(passing=False)
    assert finished and test.passing is None
    assert "COMPILING" in reduced and "assert" in reduced  # what differs under compile: it cannot go
    assert SIGNATURE.shown_by(VersionRunner(15).run(_file(reduced), 10))
    assert VersionRunner(15).run(_file(reduced), 10, without_compile=True).outcome == "pass"


def test_a_script_that_fails_without_compile_too_is_not_interesting():
    fails_anyway = SEMANTIC.replace('print("done")', 'raise AssertionError("compiled or not, it fails")')
    test = reduce.Interestingness(reduce.Signature("AssertionError", "compiled"), VersionRunner(15), None,
                                  deadline=time.monotonic() + 60, timeout=10, out=sys.stdout)
    assert SIGNATURE.shown_by(VersionRunner(15).run(_file(SEMANTIC), 10))
    assert not test(fails_anyway)
    assert test.why.startswith("it does not show a compile bug: it fails without torch.compile too (fail")


def test_a_zero_size_tensor_or_a_renamed_name_is_refused_without_a_run():
    zero = "import torch\nx = torch.randn(8, 0)\n" + SEMANTIC
    test = reduce.Interestingness(SIGNATURE, VersionRunner(15), VersionRunner(12), deadline=time.monotonic() + 60,
                                  timeout=10, out=sys.stdout, start=SEMANTIC)
    assert not test(zero) and not test(SEMANTIC.replace("unrelated(1, 2)", "unique_name_0 = unrelated(1, 2)"))
    assert test.failing.runs == 0
    # where the starting script had a zero-size tensor, it may be the bug: candidates may keep one
    allowed = reduce.Interestingness(SIGNATURE, VersionRunner(15), VersionRunner(12), deadline=time.monotonic() + 60,
                                     timeout=10, out=sys.stdout, start=zero)
    assert allowed.refused(zero) == "" and allowed.failing.runs == 0


@pytest.mark.parametrize("source, zero", [
    ("torch.randn(8, 0)", True), ("torch.zeros((4, 0), dtype=torch.float32)", True), ("torch.full((0,), 1.0)", True),
    ("torch.randint(0, 5, (3, 0))", True), ("x.reshape(0, -1)", True), ("x.new_zeros(0)", True),
    ("torch.tensor([[]])", True), ("torch.arange(0)", True), ("torch.empty(size=(2, 0))", True),
    ("torch.randn(8, 1)", False), ("torch.randint(0, 5, (3,))", False), ("torch.full((2,), 0)", False),
    ("torch.tensor([0.0, 1.0])", False), ("torch.arange(0, 4)", False), ("x.view(-1)", False), ("x.sum(0)", False),
    ("torch.ones(n)", False),
])
def test_a_zero_size_is_read_from_the_size_arguments(source, zero):
    assert reduce_tensors.zero_size(f"import torch\ny = {source}\n") is zero


def test_candidate_runs_are_cached_and_the_time_limit_keeps_the_best():
    test = reduce.Interestingness(SIGNATURE, VersionRunner(15), VersionRunner(12), deadline=time.monotonic() + 60,
                                  timeout=10, out=sys.stdout)
    assert test(SEMANTIC) and test(SEMANTIC)
    assert (test.failing.runs, test.passing.runs) == (1, 1)
    test.deadline = time.monotonic() - 1
    reduced, finished = reduce.minimize(SEMANTIC, test)
    assert not finished and reduced in (SEMANTIC, reduce.tidy(SEMANTIC))  # the start: nothing smaller was found
    # Past the limit a cached answer stops the reduction too: a loop of cached candidates (the reducer
    # shrinking a number, a rewrite making it plain again) once ran past the limit for ever.
    test.deadline = time.monotonic() - 1  # (minimize granted its last check more time)
    with pytest.raises(reduce.BudgetSpent):
        test(SEMANTIC)


def test_a_budget_of_runs_stops_the_reduction_where_it_would_on_any_machine():
    # The budget is work (candidate runs), not time: two reductions with one budget give one script,
    # however slow each run is, and one stopped by it says so.
    def reduced_within(runs):
        test = reduce.Interestingness(SIGNATURE, VersionRunner(15), VersionRunner(12), deadline=None, timeout=10,
                                      out=sys.stdout, max_runs=runs)
        return test, *reduce.minimize(SEMANTIC, test)

    whole, reduced, finished = reduced_within(10_000)
    assert finished and whole.stopped_by is None
    needed = whole.runs
    short, first, stopped = reduced_within(needed // 2)
    assert not stopped and short.stopped_by == f"its budget of {needed // 2} runs"
    assert short.runs <= needed // 2 + 2  # the last check (the tidied script) may go past it
    assert reduced_within(needed // 2)[1] == first and reduce.line_count(first) >= reduce.line_count(reduced)
    cached = reduce.Interestingness(SIGNATURE, VersionRunner(15), VersionRunner(12), deadline=None, timeout=10,
                                    out=sys.stdout, max_runs=1)
    assert cached(SEMANTIC) and cached(SEMANTIC)  # an answer it has costs no run
    with pytest.raises(reduce.BudgetSpent, match="its budget of 1 runs"):
        cached(SEMANTIC.replace("x = 6", "x = 7"))


def test_a_recorded_failure_gives_the_signature():
    known = {"case": "c", "outcome": "known", "exc_type": "torch._dynamo.exc.InternalTorchDynamoError",
             "message": "NotImplementedError: checkpoint not implemented for <class 'x'> at 0x7f00",
             "reference": "o/r#1"}
    declared = [{"kind": "known", "ref": "o/r#1", "raises": ["InternalTorchDynamoError"],
                 "match": "checkpoint not impl"}]
    assert reduce.signature_of(known, declared) == reduce.Signature("InternalTorchDynamoError", "checkpoint not impl")
    failed = {**known, "outcome": "fail", "exc_type": "builtins.AssertionError", "reference": None,
              "message": "enabled=True: compiled {'sentinels_initialised': 2, 'rng_advanced': True}, eager {}"}
    signature = reduce.signature_of(failed, declared)
    assert signature.exception == "AssertionError"
    assert re.fullmatch(signature.pattern, failed["message"])  # the figure: both sides of the comparison
    assert not re.search(signature.pattern, failed["message"].replace("2", "1"))


def test_an_export_without_its_plumbing_raises_the_bug_itself():
    info = collector.collect(sys.executable, [CASE])["cases"][CASE]
    plain = reduce.strip_plumbing(repro_script.build_script(info))
    compile(plain, "plain.py", "exec")
    for plumbing in ("EXPECTED", "OUTCOME", "sys.exit", "traceback.print_exc", "__main__", "except Exception"):
        assert plumbing not in plain
    assert plain.rstrip().splitlines()[-1].startswith("test_copy_copy_in_compiled_fn_under_mode(case, device='cpu'")


_KEPT_FOLDERS = []  # a TemporaryDirectory that no one holds deletes its folder before the runner reads it


def _file(source):
    import pathlib
    import tempfile

    _KEPT_FOLDERS.append(tempfile.TemporaryDirectory())
    path = pathlib.Path(_KEPT_FOLDERS[-1].name) / "candidate.py"
    path.write_text(source)
    return path


def _reduce_script(tmp_path, source, *extra):
    script = tmp_path / "user_bug.py"
    script.write_text(source)
    out = tmp_path / "reduced.py"
    done = subprocess.run([sys.executable, "-m", "harness", "reduce", "--script", str(script), "--session",
                           matrix.main_session().name, "--no-build", "--out", str(out), *extra], cwd=ROOT,
                          capture_output=True, text=True, timeout=1800, env=pytestrun.clean_env())
    return done, script, out


@pytest.mark.slow
def test_a_real_reduction_in_the_session_venv(tmp_path):
    noise = "import json\nSETTINGS = json.loads('{\"lr\": 0.1}')\nprint('settings', SETTINGS)\n"
    done, script, out = _reduce_script(tmp_path, noise + USER_SCRIPT + "print('never reached')\n",
                                       "--time-limit", "300")
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    reduced = out.read_text()
    assert reduce.line_count(reduced) < reduce.line_count(script.read_text())  # the header line included
    assert "SETTINGS" not in reduced and "never reached" not in reduced
    assert "copy.copy" in reduced
    assert "cpu_torch215: fail (exit 1) AttributeError: 'NoneType' object has no attribute 'type'" in done.stdout
    assert "cpu_torch215 without torch.compile: pass (exit 0)" in done.stdout  # no --passing: the differential check


# A compile-only failure planted in a backend, among lines that do not matter; without torch.compile it runs.
PLANTED = textwrap.dedent("""\
    import json
    import torch
    SETTINGS = json.loads('{"scale": 0.5}')
    print('settings', SETTINGS)

    def refuse(gm, example_inputs):
        raise RuntimeError('planted: this backend refuses every graph')

    def f(x):
        y = torch.sin(x) * SETTINGS['scale']
        return y + 1

    print(torch.compile(f, backend=refuse)(torch.ones(3, 4)))
    """)


def test_the_differential_check_reduces_a_compile_only_failure(tmp_path):
    # a limit, not a target: a loaded machine needs it
    done, script, out = _reduce_script(tmp_path, PLANTED, "--time-limit", "400")
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    assert "the check: it passes on cpu_torch215 with torch.compile replaced by the identity" in done.stderr
    reduced = out.read_text()
    assert reduced.splitlines()[0].endswith("fails on cpu_torch215, passes there without torch.compile.")
    assert "SETTINGS" not in reduced and "print" not in reduced and "planted" in reduced
    assert not reduce_tensors.zero_size(reduced)  # the reducer shrinks 3 towards 0: a zero size is refused
    assert reduce.line_count(reduced) <= 6, reduced
    assert "cpu_torch215: fail (exit 1) torch._dynamo.exc.BackendCompilerFailed" in done.stdout
    assert "cpu_torch215 without torch.compile: pass (exit 0)" in done.stdout


def test_a_script_that_fails_without_compile_too_is_refused(tmp_path):
    fails_anyway = PLANTED.replace("backend=refuse", "backend='eager'") + "raise RuntimeError('not the compile')\n"
    done, _, out = _reduce_script(tmp_path, fails_anyway)
    assert done.returncode == 1, done.stdout + done.stderr[-3000:]
    assert "does not show a compile bug: it fails without torch.compile too" in done.stderr.splitlines()[-1]
    assert not out.exists()


def test_tidy_drops_the_constants_the_reducer_leaves():
    assert reduce.tidy("import torch\n0\ndef f():\n    0\nf()\n") == "import torch\n\ndef f():\n    pass\nf()\n"


def test_the_warm_runners_preload_what_the_script_imports():
    source = ("import torch, math\nfrom torch.utils.checkpoint import checkpoint\nfrom . import x\n"
              "need('lightning.fabric.X')\n")
    assert reduce.imported_modules(source) == ["lightning.fabric", "math", "torch", "torch.utils.checkpoint"]


def test_a_wrapped_failure_keeps_its_cause_in_the_pattern():
    output = ("Traceback (most recent call last):\n  File \"x.py\", line 3, in <module>\n"
              "torch._dynamo.exc.BackendCompilerFailed: backend='inductor' raised:\n"
              "RuntimeError: does not support RNG ops in recompute regions\n\nSet TORCHDYNAMO_VERBOSE=1\n")
    signature = reduce.script_signature(scriptrun.classify(1, output, 0.0))
    assert signature.exception == "BackendCompilerFailed"
    assert signature.shown_by(scriptrun.classify(1, output, 0.0))
    other = output.replace("does not support RNG ops in recompute regions", "some other inductor failure")
    assert not signature.shown_by(scriptrun.classify(1, other, 0.0))  # the cause, not the wrapper, is the bug
    plain = reduce.script_signature(scriptrun.classify(1, output.replace(" raised:\n", " raised: x\n"), 0.0))
    assert plain.pattern == r"backend='inductor'\ raised:\ x"
