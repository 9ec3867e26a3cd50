"""Planted faults: each is labelled right and costs nothing else (real xdist workers, real torch)."""

import os
import signal
import subprocess
import sys
import time

import pytest

from harness import records, report
from tests.conftest import ROOT

FAULTS = '''
import ctypes
import os
import pathlib

import torch


def test_before(case):
    case.check(torch.sin, torch.randn(3, requires_grad=True))


def test_abort(case):
    print("about to abort", flush=True)
    os.abort()


def test_segfault(case):
    print("about to read address zero", flush=True)
    ctypes.string_at(0)


def test_exit(case):
    print("leaving without a word", flush=True)
    os._exit(3)


def test_endless_loop(case):
    while True:
        pass


def test_flips(case):
    # fails on its first run, passes on the second
    marker = pathlib.Path(os.environ["FLIP_MARKER"])
    if not marker.exists():
        marker.write_text("ran once")
        raise AssertionError("first run fails")


def test_fails_twice(case):
    raise AssertionError("always fails")


def test_after(case):
    case.check(torch.cos, torch.randn(3, requires_grad=True))
'''

XDIST = ["-p", "harness.plugin", "-p", "xdist", "-n", "1", "--max-worker-restart=100", "--capture=tee-sys",
         "--timeout=20", "--timeout-method=thread"]


def read_cases(path):
    return {r["params"]["variant"]: r for r in records.read(path) if r["kind"] == "case"}


@pytest.fixture
def subprocess_env(pytester, monkeypatch, tmp_path):
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    monkeypatch.setenv("FLIP_MARKER", str(tmp_path / "flip"))
    return pytester


def test_every_fault_is_labelled_and_nothing_else_is_lost(subprocess_env, tmp_path):
    pytester = subprocess_env
    pytester.makepyfile(test_faults=FAULTS)
    out = tmp_path / "results"
    result = pytester.runpytest_subprocess(*XDIST, f"--results-dir={out}", "--session-name=faults", timeout=600)
    assert result.ret == 1
    cases = read_cases(out / "faults.jsonl")
    assert {name: r["outcome"] for name, r in cases.items()} == {
        "before": "pass", "abort": "crash", "segfault": "crash", "exit": "crash",
        "endless_loop": "timeout", "flips": "flaky", "fails_twice": "fail", "after": "pass",
    }
    assert cases["abort"]["message"] == "Fatal Python error: Aborted"
    assert "about to abort" in cases["abort"]["output_tail"]
    assert cases["segfault"]["message"] == "Fatal Python error: Segmentation fault"
    assert "about to read address zero" in cases["segfault"]["output_tail"]
    assert cases["exit"]["message"] == "worker died; last output: leaving without a word"
    assert "Timeout" in cases["endless_loop"]["message"]
    assert cases["abort"]["case"] == "faults/abort" and cases["abort"]["family"] == "faults"
    assert [a["outcome"] for a in cases["flips"]["attempts"]] == ["fail", "pass"]
    assert cases["flips"]["attempts"][0]["message"] == "first run fails"
    assert [a["outcome"] for a in cases["fails_twice"]["attempts"]] == ["fail", "fail"]
    assert records.read(out / "faults.jsonl")[-1]["kind"] == "end"


def test_reruns_are_configurable(subprocess_env, tmp_path):
    pytester = subprocess_env
    pytester.makepyfile(test_faults=FAULTS)
    out = tmp_path / "results"
    pytester.runpytest_subprocess("-p", "harness.plugin", "--reruns=0", "-k", "flips or fails_twice",
                                  f"--results-dir={out}", "--session-name=s", timeout=300)
    cases = read_cases(out / "s.jsonl")
    assert cases["flips"]["outcome"] == "fail" and "attempts" not in cases["flips"]


def test_timeout_per_case_marker(subprocess_env, tmp_path):
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
    out = tmp_path / "results"
    pytester.runpytest_subprocess(*XDIST, f"--results-dir={out}", "--session-name=s", timeout=300)
    cases = read_cases(out / "s.jsonl")
    assert cases["short_limit"]["outcome"] == "timeout"
    assert cases["session_limit_is_longer"]["outcome"] == "pass"


def test_sigkill_of_the_whole_run_keeps_every_finished_record(pytester, tmp_path):
    pytester.makepyfile(test_killed='''
import time

def test_one(case):
    pass

def test_two(case):
    pass

def test_hangs(case):
    time.sleep(600)
''')
    out = tmp_path / "results"
    process = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-p", "harness.plugin", *XDIST[2:], f"--results-dir={out}",
         "--session-name=killed", str(pytester.path)],
        cwd=pytester.path, env={**os.environ, "PYTHONPATH": str(ROOT)}, start_new_session=True,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    path = out / "killed.jsonl"
    deadline = time.time() + 300
    while time.time() < deadline:
        if path.exists() and path.read_text().count('"kind": "case"') >= 2:
            break
        time.sleep(0.5)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    back = records.read(path)
    assert [r.get("params", {}).get("variant") for r in back if r["kind"] == "case"] == ["one", "two"]
    assert back[-1]["kind"] == "case"  # no end record
    data = report.build([out])
    assert data["sessions"][0]["complete"] is False and data["sessions"][0]["finished"] is False


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
    pytester = subprocess_env
    pytester.makepyfile(reverse_order=REVERSE)
    outcomes = {}
    for order, extra in (("forward", []), ("reverse", ["-p", "reverse_order"])):
        out = tmp_path / order
        pytester.runpytest_subprocess(
            "-p", "harness.plugin", *extra, str(ROOT / "cases"), "-k", "not inductor and not cuda",
            f"--rootdir={ROOT}", f"--results-dir={out}", "--session-name=s", timeout=1200)
        outcomes[order] = {r["case"]: r["outcome"] for r in records.read(out / "s.jsonl") if r["kind"] == "case"}
    assert outcomes["forward"] and outcomes["forward"] == outcomes["reverse"]


def test_unwritable_results_dir_is_one_clear_line(pytester, tmp_path):
    pytester.makepyfile(test_one="def test_one(case):\n    pass\n")
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    result = pytester.runpytest("-p", "harness.plugin", f"--results-dir={blocker / 'sub'}", "--session-name=s")
    assert result.ret != 0
    result.stderr.fnmatch_lines(["ERROR: cannot write results to *a-file/sub: *"])


def test_unknown_case_is_an_error_and_keeps_earlier_results(subprocess_env, tmp_path):
    pytester = subprocess_env
    pytester.makepyfile(test_faults=FAULTS)
    out = tmp_path / "results"
    out.mkdir()
    (out / "s.jsonl").write_text("earlier results\n")
    result = pytester.runpytest_subprocess(*XDIST, "test_faults.py::test_aftr", f"--results-dir={out}",
                                           "--session-name=s", timeout=300)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stdout.fnmatch_lines(["ERROR: unknown case test_faults.py::test_aftr"])
    assert (out / "s.jsonl").read_text() == "earlier results\n"
