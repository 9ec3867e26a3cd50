"""A plain script run in an interpreter and classified by how it ended, fresh or forked from a warm process."""

import sys
import textwrap

import pytest

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
