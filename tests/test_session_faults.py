"""Faults of whole sessions, through the session's own command (real nox on a copy of the project with two
small families, the checkout's session venv): a run that was interrupted or killed is never a source of
reuse for what it did not record, a case that interrupts its worker costs nothing else, a case file that
cannot be collected is a record until it can, workers that die before running a case stop the session, a
stopped run leaves no earlier run's JUnit, bad arguments are one line, and pytest's configuration is in
the reuse key."""

import os
import pathlib

import pytest

from harness.core import records
from tests.conftest import CHECKOUT_VENVS, ROOT, project_with_families, run_nox
from tests.test_reuse import ALPHA, SESSION, cases

pytestmark = [CHECKOUT_VENVS, pytest.mark.slow]

# Cases that each stop something once (a marker in the results directory), then pass.
ONCE = '''
import os
import pathlib
import signal

import torch


def once(name):
    marker = pathlib.Path(os.environ["HARNESS_RESULTS_DIR"]) / name
    if marker.exists():
        return False
    marker.write_text("")
    return True


def parent_of(pid):
    return int(pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def test_a_first(case):
    case.check(torch.sin, torch.randn(3, requires_grad=True))


def test_b_stops(case):
    if once("stopped"):  # this case's process -> its worker -> the controller (pytest's own process)
        os.kill(parent_of(os.getppid()), signal.{signal})
    case.check(torch.cos, torch.randn(3, requires_grad=True))


def test_c_interrupts_its_worker(case):
    os.kill(os.getppid(), signal.SIGINT)
    case.check(torch.tan, torch.randn(3, requires_grad=True))
'''


@pytest.fixture
def project(tmp_path):
    return project_with_families(tmp_path / "project", {"alpha": ALPHA})


def session(project, results, *args, env=None):
    done = run_nox(project, "-s", SESSION, *(["--", *args] if args else []), results=results,
                   env={"HARNESS_RERUNS": "0", **(env or {})}, timeout=1200)
    return done.returncode, done.stdout + done.stderr


def end_of(results):
    return records.read(results / f"{SESSION}.jsonl")[-1]


@pytest.mark.parametrize("stop", ["SIGINT", "SIGKILL"])
def test_a_run_stopped_midway_leaves_no_green_row_and_the_next_run_records_what_it_missed(project, tmp_path, stop):
    results = tmp_path / "results"
    results.mkdir()
    (project / "cases" / "test_beta.py").write_text(ONCE.replace("{signal}", stop))
    (results / "stopped").write_text("")  # the first run stops nothing; c interrupts its own worker
    code, said = session(project, results)
    assert code == 0 and records.run_complete(end_of(results)), said[-3000:]
    assert len(cases(results)) == 6 and cases(results)["beta/c_interrupts_its_worker"]["outcome"] == "pass"
    junit = results / f"{SESSION}.xml"
    assert 'tests="6"' in junit.read_text()
    (results / "stopped").unlink()
    code, _ = session(project, results, "--fresh")  # alpha's 3 cases, then beta's in order: b stops the controller
    assert code != 0
    partial = cases(results)
    assert "beta/c_interrupts_its_worker" not in partial and len(partial) < 6, sorted(partial)
    if stop == "SIGINT":  # pytest wrote its end record, which says the run is not complete, and its own JUnit
        end = end_of(results)
        assert (end["kind"] == "end" and end["interrupted"] and end["missing"] >= 1
                and not records.run_complete(end)), end
        assert f'tests="{len(partial)}"' in junit.read_text()
    else:  # killed: no end record, and not the earlier run's JUnit file beside its results
        assert records.read(results / f"{SESSION}.jsonl")[-1]["kind"] == "case"
        assert not junit.exists()
    code, said = session(project, results)
    assert code == 0, said[-3000:]
    assert "to run: nothing" not in said, said[-3000:]
    measured = cases(results)
    assert len(measured) == 6 and {r["outcome"] for r in measured.values()} == {"pass"}, \
        {c: (r["outcome"], r["message"]) for c, r in measured.items()}
    assert records.run_complete(end_of(results))
    code, said = session(project, results)  # complete now: carried whole
    assert code == 0 and "6 records reused; to run: nothing" in said, said[-2000:]


BROKEN = {"broken_import": ("import torch_no_such_module\n",
                            "ModuleNotFoundError: No module named 'torch_no_such_module'"),
          "broken_syntax": ("def test_x(case:\n", "SyntaxError")}


def test_a_case_file_that_cannot_be_collected_is_a_record_until_it_can(project, tmp_path):
    # Two files that cannot be collected, one that cannot import and one that does not parse: each is a
    # record of its own, beside the cases that can run.
    results = tmp_path / "results"
    for name, (source, _) in BROKEN.items():
        (project / "cases" / f"test_{name}.py").write_text(source)
    for _attempt in range(2):  # and again: an `error` is never carried over
        code, said = session(project, results)
        assert code != 0, said[-3000:]
        measured = cases(results)
        assert {c: r["outcome"] for c, r in measured.items()} == {
            "alpha/sin[eager]": "pass", "alpha/sin[aot_eager]": "pass", "alpha/sin[inductor]": "pass",
            **{f"{name}/collection-error": "error" for name in BROKEN}}, said[-3000:]
        for name, (_, reason) in BROKEN.items():
            error = measured[f"{name}/collection-error"]
            assert (error["message"].startswith(f"cannot collect cases/test_{name}.py: ")
                    and reason in error["message"]), error
        junit = (results / f"{SESSION}.xml").read_text()
        assert 'errors="2"' in junit and junit.count("collection-error") == 2, junit[:500]
        assert "INTERNALERROR" not in said
    for name in BROKEN:
        (project / "cases" / f"test_{name}.py").write_text(ALPHA)
    code, said = session(project, results)
    assert code == 0 and not [c for c in cases(results) if c.endswith("collection-error")], said[-2000:]


DIES_AT_START = '''


def pytest_sessionstart(session):
    if hasattr(session.config, "workerinput"):  # every worker, before it runs a case
        import os

        os._exit(3)
'''


def test_workers_that_die_before_running_a_case_stop_the_session_with_one_line(project, tmp_path):
    with open(project / "cases" / "conftest.py", "a") as conftest:
        conftest.write(DIES_AT_START)
    code, said = session(project, tmp_path / "results")
    assert code != 0
    stops = [line for line in said.splitlines() if "workers in a row died before running a case" in line]
    assert stops, said[-3000:]
    assert "harness: 3 workers in a row died before running a case" in stops[0]
    left = [p for p in pathlib.Path("/proc").glob("[0-9]*/cmdline")
            if str(project).encode() in _read(p) and b"xdist" in _read(p)]
    assert not left, [_read(p) for p in left]


def _read(path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:
        return b""


@pytest.mark.parametrize("args, says", [
    (["--timeout", "-1"], "--timeout '-1': a number of seconds, 0 or more"),
    (["--memory-limit=abc"], "memory limit 'abc': expected N% of this machine's memory"),
    (["cases/nope.py"], "no such case file: cases/nope.py"),
    (["--case-reruns", "x"], "--case-reruns 'x': a number of reruns, 0 or more"),
], ids=["timeout", "memory", "no_file", "reruns"])
def test_bad_session_arguments_are_one_line_before_anything_runs(project, tmp_path, args, says):
    results = tmp_path / "results"
    code, said = session(project, results, *args)
    assert code != 0 and says in said, said[-2000:]
    assert not results.exists() or not list(results.iterdir())
    import subprocess
    import sys

    environ = {k: v for k, v in os.environ.items() if k != "HARNESS_SESSION"}
    done = subprocess.run([sys.executable, "-m", "harness", "run", SESSION, *args], cwd=ROOT, capture_output=True,
                          text=True, env={**environ, "HARNESS_RESULTS_DIR": str(results)}, timeout=300)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and lines[0].startswith(f"error: {says}"), done.stderr


WARNS = '''
import warnings

import torch


def test_warns(case):
    warnings.warn("a deprecation, as torch gives them", DeprecationWarning)
    case.check(torch.sin, torch.randn(3, requires_grad=True))
'''


def test_pytests_configuration_is_in_the_reuse_key(project, tmp_path):
    results = tmp_path / "results"
    (project / "cases" / "test_beta.py").write_text(WARNS)
    assert session(project, results)[0] == 0
    assert "4 records reused; to run: nothing" in session(project, results)[1]
    pyproject = project / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace('[tool.pytest.ini_options]\n',
                                                       '[tool.pytest.ini_options]\nfilterwarnings = ["error"]\n'))
    code, said = session(project, results)
    assert "0 records reused; to run: alpha, beta" in said, said[-2000:]
    assert code != 0 and cases(results)["beta/warns"]["outcome"] in ("fail", "error"), cases(results)["beta/warns"]
