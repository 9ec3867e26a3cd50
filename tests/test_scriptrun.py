"""A plain script run in an interpreter and classified by how it ended, fresh or forked from a warm process."""

import sys
import textwrap

import pytest

from harness.core import venvs
from harness.tools import scriptrun

SCRIPTS = {
    "passes": ("print('fine')", "pass", "exit 0", ""),
    "skips": ("import sys; print('no GPU here'); sys.exit(125)", "skip", "exit 125", "no GPU here"),
    "known": ("import sys; print('OUTCOME: known (torch 2.15)'); sys.exit(3)", "known", "exit 3", ""),
    "limitation": ("import sys; sys.exit(5)", "limitation", "exit 5", ""),
    "chained": ("""
        try:
            {}['key']
        except KeyError as error:
            raise RuntimeError('compiled run failed:\\nsecond line') from error
        """, "fail", "exit 1", "RuntimeError: compiled run failed:"),
    "exits_2": ("import sys; print('bye'); sys.exit(2)", "fail", "exit 2", "exit 2; last output: bye"),
    "segfaults": ("import os, signal; os.kill(os.getpid(), signal.SIGSEGV)", "crash", "SIGSEGV", "Segmentation fault"),
    "eats_memory": ("x = bytearray(64 * 2**30)", "crash", "exit 1", "out of memory: MemoryError"),
    "hangs": ("import time; time.sleep(60)", "timeout", "timed out", "ran past its time limit of 3 s"),
}


@pytest.fixture(scope="module")
def scripts(tmp_path_factory):
    folder = tmp_path_factory.mktemp("scripts")
    for name, (code, *_) in SCRIPTS.items():
        (folder / f"{name}.py").write_text(textwrap.dedent(code))
    return folder


@pytest.mark.parametrize("name", SCRIPTS)
def test_a_fresh_run_is_classified_by_how_it_ended(scripts, name):
    _, outcome, exit, message = SCRIPTS[name]
    run = scriptrun.run(sys.executable, scripts / f"{name}.py", timeout=3, memory_limit="4G")
    assert (run.outcome, run.exit) == (outcome, exit), run.output
    assert message in run.message


def test_a_warm_run_is_classified_as_a_fresh_one(scripts):
    preloaded = scripts / "preloaded.py"
    preloaded.write_text("import sys\nassert 'colorsys' in sys.modules, 'not preloaded'\n")
    with scriptrun.WarmRunner(sys.executable, memory_limit="4G", preload=["colorsys"]) as warm:
        for name, (_, outcome, exit, message) in SCRIPTS.items():
            run = warm.run(scripts / f"{name}.py", timeout=3)
            assert (run.outcome, run.exit) == (outcome, exit), (name, run.output)
            assert message in run.message, name
        assert warm.run(preloaded).outcome == "pass"
    assert scriptrun.run(sys.executable, preloaded).message == "AssertionError: not preloaded"


def test_the_last_exception_is_the_one_that_ended_the_script():
    output = textwrap.dedent("""\
        Traceback (most recent call last):
          File "x.py", line 3, in <module>
        KeyError: 'key'

        The above exception was the direct cause of the following exception:

        Traceback (most recent call last):
          File "x.py", line 5, in <module>
            raise torch._dynamo.exc.Unsupported("no")
            ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
        torch._dynamo.exc.Unsupported: no
        """)
    assert scriptrun.exceptions(output) == [("KeyError", "'key'"), ("torch._dynamo.exc.Unsupported", "no")]


# Under torch.compile the fullgraph function's graph break raises; run eagerly, it is a no-op. The
# decorator forms, disable and nested_compile_region must still run without compile.
COMPILE_ONLY_FAILURE = textwrap.dedent("""\
    import torch

    @torch.compile(fullgraph=True)
    def decorated(x):
        torch._dynamo.graph_break()
        return x.sin()

    @torch.compile
    def bare(x):
        return x + 1

    called = torch.compile(lambda x: x * 2, backend="eager", dynamic=True)
    off = torch.compiler.disable(lambda x: x * 3)
    x = torch.ones(2, requires_grad=True)
    total = bare(x) + called(x) + off(x)
    if hasattr(torch.compiler, "nested_compile_region"):  # torch >= 2.8
        total = total + torch.compiler.nested_compile_region(lambda x: x * 5)(x)
    total.sum().backward()
    assert x.grad.tolist() == [11.0 if hasattr(torch.compiler, "nested_compile_region") else 6.0] * 2, x.grad
    decorated(x)
    print("ran without compile")
    """)


def _torch_pythons():
    """This venv's torch (the newest) and, slow, the oldest row's where its venv is built."""
    oldest = venvs.venv_python("cpu_torch21")
    return [pytest.param(sys.executable, id="this venv")] + (
        [pytest.param(str(oldest), id="cpu_torch21", marks=pytest.mark.slow)] if oldest.exists() else [])


@pytest.mark.parametrize("python", _torch_pythons())
def test_without_compile_the_script_runs_eagerly(tmp_path, python):
    script = tmp_path / "compile_only.py"
    script.write_text(COMPILE_ONLY_FAILURE)
    compiled = scriptrun.run(python, script, timeout=300)
    assert (compiled.outcome, compiled.exception.rsplit(".", 1)[-1]) == ("fail", "Unsupported"), compiled.output
    eager = scriptrun.run(python, script, timeout=300, without_compile=True)
    assert eager.outcome == "pass" and "ran without compile" in eager.output, eager.output


def test_a_warm_run_without_compile_is_told_apart_per_run(tmp_path):
    script = tmp_path / "compile_only.py"
    script.write_text(COMPILE_ONLY_FAILURE)
    with scriptrun.WarmRunner(sys.executable) as warm:
        assert warm.run(script, timeout=120, without_compile=True).outcome == "pass"
        compiled = warm.run(script, timeout=120)  # the patch lived in the last child only
        assert compiled.outcome == "fail" and compiled.exception.endswith("Unsupported"), compiled.output
