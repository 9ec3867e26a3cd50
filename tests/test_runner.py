"""Where cases run: attempts, per-case limits and torch state, with real torch and real compile."""

import os
import sys

import pytest

from harness.core import matrix, pytestrun, records
from harness.core.sources import family_files
from tests import committed_row
from tests.conftest import ROOT

SESSION = matrix.find("cpu_torch215")

FLIPS = '''
import os
import pathlib

import pytest


def test_flips(case):
    # fails on its first run, passes on the second
    marker = pathlib.Path(os.environ["FLIP_MARKER"])
    if not marker.exists():
        marker.write_text("ran once")
        raise AssertionError("first run fails")


def test_fails_every_time(case):
    raise AssertionError("always fails")


@pytest.mark.flaky(reruns=3)
def test_marked_flaky(case):
    raise AssertionError("always fails")
'''


def read_cases(path):
    return {r["params"]["variant"]: r for r in records.read(path) if r["kind"] == "case"}


@pytest.fixture
def subprocess_env(pytester, monkeypatch, tmp_path, nested_compile_caches):
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    monkeypatch.setenv("FLIP_MARKER", str(tmp_path / "flip"))
    monkeypatch.delenv("HARNESS_RERUNS", raising=False)
    return pytester


def session_run(pytester, *args):
    """The session's pytest command (harness.core.pytestrun, as the noxfile runs it) on the test dir."""
    out = pytester.path / "results"
    command = pytestrun.pytest_args(SESSION, [str(pytester.path), *args, f"--results-dir={out}",
                                             "--session-name=s"])
    return pytester.run(sys.executable, *command, timeout=600), out / "s.jsonl"


def test_a_failing_case_runs_again_and_reruns_show(subprocess_env):
    pytester = subprocess_env
    pytester.makepyfile(test_flips=FLIPS)
    result, path = session_run(pytester, "-p", "no:rerunfailures")
    cases = read_cases(path)
    assert [a["outcome"] for a in cases["flips"]["attempts"]] == ["fail", "pass"]
    assert cases["flips"]["outcome"] == "flaky"
    assert cases["flips"]["attempts"][0]["message"] == "first run fails"
    assert [a["outcome"] for a in cases["fails_every_time"]["attempts"]] == ["fail", "fail"]
    assert cases["fails_every_time"]["outcome"] == "fail"
    assert len(cases["marked_flaky"]["attempts"]) == 4  # its marker asks for 3 reruns
    result.stdout.fnmatch_lines(["R.RFRRRF*", "*2 failed, 1 passed*5 rerun*"])  # each retried attempt: R


def test_reruns_are_configurable(subprocess_env, monkeypatch):
    pytester = subprocess_env
    pytester.makepyfile(test_flips=FLIPS)
    _, path = session_run(pytester, "--case-reruns=0", "-k", "flips or fails_every_time")
    cases = read_cases(path)
    assert cases["flips"]["outcome"] == "fail" and "attempts" not in cases["flips"]
    monkeypatch.setenv("HARNESS_RERUNS", "2")
    _, path = session_run(pytester, "-k", "fails_every_time")
    assert len(read_cases(path)["fails_every_time"]["attempts"]) == 3


def test_loads_next_to_pytest_rerunfailures_and_takes_its_option(subprocess_env):
    pytest.importorskip("pytest_rerunfailures")  # the harness's test session installs it
    pytester = subprocess_env
    pytester.makepyfile(test_flips=FLIPS)
    result, path = session_run(pytester, "-p", "rerunfailures", "--reruns=2", "-k", "fails_every_time")
    assert "already used" not in result.stderr.str()
    attempts = read_cases(path)["fails_every_time"]["attempts"]
    assert [a["outcome"] for a in attempts] == ["fail", "fail", "fail"]


def test_timeout_per_case_marker(subprocess_env):
    pytester = subprocess_env
    pytester.makepyfile(test_slow='''
import time
import pytest

@pytest.mark.timeout(2)
def test_short_limit(case):
    time.sleep(30)

def test_session_limit_is_longer(case):
    time.sleep(3)
''')
    _, path = session_run(pytester)
    cases = read_cases(path)
    assert cases["short_limit"]["outcome"] == "timeout"
    assert cases["short_limit"]["message"].startswith("ran past its time limit of 2 s at test_slow.py:6")
    assert cases["session_limit_is_longer"]["outcome"] == "pass"


LEAKY = '''
import torch
from torch.overrides import TorchFunctionMode


class PassThrough(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


def test_leaves_state_behind(case):
    torch.compile(torch.sin, backend="eager")(torch.randn(2))
    torch._dynamo.config.cache_size_limit = 1
    torch.set_grad_enabled(False)
    PassThrough().__enter__()


def test_starts_clean(case):
    assert torch._dynamo.config.cache_size_limit != 1
    assert torch.is_grad_enabled()
    assert torch._C._len_torch_function_stack() == 0
    from torch._dynamo.utils import counters
    assert not counters["stats"]
'''

REVERSE = '''
def pytest_collection_modifyitems(items):
    items.reverse()
'''


@pytest.mark.parametrize("order", ["forward", "reverse"])
def test_cases_do_not_leak_into_each_other(pytester, tmp_path, order):
    pytester.makepyfile(test_leaky=LEAKY, reverse_order=REVERSE)
    pytester.syspathinsert()
    out = tmp_path / "results"
    args = ["-p", "reverse_order"] if order == "reverse" else []
    pytester.runpytest("-p", "harness.plugin", *args, f"--results-dir={out}", "--session-name=s")
    cases = read_cases(out / "s.jsonl")
    assert cases["starts_clean"]["outcome"] == "pass"
    assert cases["leaves_state_behind"]["outcome"] == "pass"
    assert set(cases["leaves_state_behind"]["leaked"]) == {"a torch function mode", "grad mode", "torch._dynamo.config"}


def test_real_cases_give_the_same_outcomes_in_either_order(subprocess_env, tmp_path):
    # Every family's cases but inductor's and CUDA's, in reverse order, against the same cases in their own
    # order: the committed row of this torch where the checkout would measure it the same (a session's
    # run through nox, its cases spread over its workers), else a forward run here.
    pytester = subprocess_env
    pytester.makepyfile(reverse_order=REVERSE)
    selected = "not inductor and not cuda"

    def run(order, *extra):
        out = tmp_path / order
        pytester.runpytest_subprocess(
            "-p", "harness.plugin", *extra, str(ROOT / "cases"), "-k", selected,
            f"--rootdir={ROOT}", f"--results-dir={out}", "--session-name=s", timeout=1200)
        return {r["case"]: r["outcome"] for r in records.read(out / "s.jsonl") if r["kind"] == "case"}

    committed = committed_row.fresh_outcomes(matrix.main_session().name, family_files())  # the tests venv's torch
    forward = run("forward") if committed is None else {
        case: outcome for case, outcome in committed.items() if "inductor" not in case and "cuda" not in case}
    reverse = run("reverse", "-p", "reverse_order")
    assert forward and set(reverse) == set(forward), set(reverse) ^ set(forward)
    assert not (differ := committed_row.disagreements(reverse, forward)), differ


def test_memory_limit_applies_while_cases_run_only(pytester, tmp_path):
    import resource

    before = resource.getrlimit(resource.RLIMIT_DATA)
    pytester.makepyfile(test_limit='''
import resource

def test_limit_is_set(case):
    soft, _ = resource.getrlimit(resource.RLIMIT_DATA)
    assert soft == 6 * 2 ** 30
''')
    result = pytester.runpytest("-p", "harness.plugin", "--memory-limit=6G", f"--results-dir={tmp_path}",
                                "--session-name=s")
    result.assert_outcomes(passed=1)
    assert resource.getrlimit(resource.RLIMIT_DATA) == before


def test_a_run_inside_this_process_leaves_its_temporary_directory_and_cache_variables_as_they_were(pytester, tmp_path,
                                                                                                  monkeypatch):
    """While cases run, TMPDIR and the compile caches' variables name the case's own directory; after
    the run, a process that ran it (pytester's, a notebook's) writes its temporary files where it did."""
    import tempfile

    from harness.plugin.compilecaches import CACHE_DIRS

    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.delenv("TRITON_CACHE_DIR", raising=False)
    monkeypatch.setattr(tempfile, "tempdir", None)
    before = {variable: os.environ.get(variable) for variable in CACHE_DIRS}
    pytester.makepyfile(test_tmp='''
import os
import tempfile

def test_tmp_is_the_cases_own(case):
    assert "compile-caches" in tempfile.gettempdir() and "compile-caches" in os.environ["TRITON_CACHE_DIR"]
''')
    result = pytester.runpytest("-p", "harness.plugin", f"--results-dir={tmp_path / 'out'}", "--session-name=s")
    result.assert_outcomes(passed=1)
    assert {variable: os.environ.get(variable) for variable in CACHE_DIRS} == before
    assert tempfile.gettempdir() == str(tmp_path)
