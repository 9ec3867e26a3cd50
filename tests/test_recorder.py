"""The results file: what a killed run leaves, and bad input that must not touch earlier results."""

import os
import signal
import subprocess
import sys
import time

import pytest

from harness.core import matrix, pytestrun, records
from harness.report import render
from tests.conftest import ROOT

SESSION = matrix.main_session()


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
    command = pytestrun.pytest_args(SESSION, [str(pytester.path), f"--results-dir={out}", "--session-name=killed"])
    process = subprocess.Popen(
        [sys.executable, *command], cwd=pytester.path, env={**os.environ, "PYTHONPATH": str(ROOT)},
        start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
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
    data = render.build([out])
    assert data["sessions"][0]["complete"] is False and data["sessions"][0]["finished"] is False


def test_unwritable_results_dir_is_one_clear_line(pytester, tmp_path):
    pytester.makepyfile(test_one="def test_one(case):\n    pass\n")
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    result = pytester.runpytest("-p", "harness.plugin", f"--results-dir={blocker / 'sub'}", "--session-name=s")
    assert result.ret != 0
    result.stderr.fnmatch_lines(["ERROR: cannot write results to *a-file/sub: *"])


def test_unknown_case_is_an_error_and_keeps_earlier_results(pytester, tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    pytester.makepyfile(test_family="def test_after(case):\n    pass\n")
    out = tmp_path / "results"
    out.mkdir()
    (out / "s.jsonl").write_text("earlier results\n")
    earlier_logs = out / "logs" / "s" / "20261126T010000-1"
    earlier_logs.mkdir(parents=True)
    (earlier_logs / "gw0.log").write_text("printed")
    command = pytestrun.pytest_args(SESSION, ["test_family.py::test_aftr", f"--results-dir={out}",
                                             "--session-name=s"])
    result = pytester.run(sys.executable, *command, timeout=300)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stdout.fnmatch_lines(["ERROR: unknown case test_family.py::test_aftr"])
    assert (out / "s.jsonl").read_text() == "earlier results\n"
    # this run recorded nothing and leaves no logs of its own; the earlier run's stay
    assert [f.name for f in (out / "logs" / "s").iterdir()] == [earlier_logs.name]


def test_an_earlier_runs_logs_go_once_no_record_names_them(tmp_path):
    from harness.plugin import workerlog
    logs = tmp_path / "logs" / "cpu_torch215"
    earlier, carried, current = (logs / run for run in ("20261126T010000-1", "20261126T020000-2", "20261127T010000-3"))
    for folder in (earlier, carried, current):
        folder.mkdir(parents=True)
        (folder / "gw0.log").write_text("printed")
    removed = workerlog.prune(current, [None, str(carried / "gw0.log")])  # a carried record names its run's log
    assert removed == [earlier] and carried.is_dir() and current.is_dir() and not earlier.exists()
