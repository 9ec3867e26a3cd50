"""Bad input costs no download: an unknown case id, session or script, or an empty range, is
rejected with one line and exit 2 before any environment is built."""

import subprocess
import sys

import pytest

from harness.core import pytestrun, resultsfile
from harness.tools import preflight
from tests.conftest import ROOT


def harness(*args, timeout=600):
    return subprocess.run([sys.executable, "-m", "harness", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, env=pytestrun.clean_env())


@pytest.mark.parametrize("command", [
    ["bisect", "nonexistent_case"],
    ["repro", "nonexistent_case", "--session", "cpu_torch21"],
    ["reduce", "nonexistent_case", "--session", "cpu_torch21"],
])
def test_an_unknown_case_id_builds_nothing(tmp_path, command):
    done = harness(*command, "--envdir", str(tmp_path))
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.startswith("error: unknown case 'nonexistent_case'"), done.stderr
    assert "building the environment" not in done.stderr
    assert not any(tmp_path.iterdir())  # no venv


@pytest.mark.parametrize("command, error", [
    (["sweep", "missing.py"], "error: no such script: missing.py"),
    (["bisect", "--script", "missing.py"], "error: no such script: missing.py"),
    (["reduce", "--script", "missing.py", "--session", "cpu_torch215"], "error: no such script: missing.py"),
    (["sweep", "README.md"], "error: README.md is not Python"),
    (["sweep", "noxfile.py", "--from", "2.20"], "error: no cpu row of the matrix has a torch between 2.20"),
    (["sweep", "noxfile.py", "--from", "2.15", "--to", "2.12"], "error: no cpu row of the matrix"),
    (["sweep", "noxfile.py", "--from", "2.1x"], "error: not a version: '2.1x'"),
    (["sweep", "noxfile.py", "--memory-limit", "lots"], "error: memory limit 'lots': expected N%"),
    (["bisect", "--script", "noxfile.py", "--env", "two=python3"], "error: not a version: 'two'"),
    (["bisect", "checkpoint/plain_checkpoint[cpu-eager-fullgraph]", "--from", "2.20"], "error: no cpu row"),
    (["reduce", "--script", "noxfile.py", "--session", "cpu_torch99"], "error: unknown session 'cpu_torch99'"),
    (["reduce", "--script", "noxfile.py", "--session", "cpu_torch215", "--max-runs", "0"],
     "error: --max-runs must be a positive number of runs"),
    (["repro", "checkpoint/plain_checkpoint[cpu-eager-fullgraph]", "--session", "cpu_torch99"],
     "error: unknown session 'cpu_torch99'"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, command, error):
    done = harness(*command, "--envdir", str(tmp_path))
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.startswith(error) and done.stderr.count("\n") == 1, done.stderr
    assert not any(tmp_path.iterdir())


def test_an_id_in_the_results_at_hand_needs_no_collection(tmp_path, monkeypatch):
    writer = resultsfile.ResultsWriter(tmp_path / "cpu_torch215.jsonl")  # as a session writes it
    writer.write({"kind": "environment", "session": "cpu_torch215", "torch": "2.15.0"})
    writer.write({"kind": "case", "case": "a/b[c]", "family": "a", "params": {}, "outcome": "pass", "exc_type": None,
                  "message": "", "nodeid": "cases/test_a.py::test_b[c]"})
    writer.close()
    with open(tmp_path / "cpu_torch215.jsonl", "a") as damaged:  # then a line a killed run left half-written
        damaged.write('{"kind": "case", "ca')
    monkeypatch.setattr(preflight, "collecting_python", lambda *a: pytest.fail("collected"))
    assert preflight.check_case("a/b[c]", results=[tmp_path]) is None


def test_where_only_a_build_can_tell_it_says_so_first(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(preflight, "collecting_python", lambda *a: None)
    assert preflight.check_case("a/new[c]", results=[tmp_path]) is None
    assert "it is checked once the session's environment is built" in capsys.readouterr().err
