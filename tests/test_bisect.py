"""Bisect: one case across torch versions, run as the matrix runs it (pytest + plugin)."""

import pathlib
import subprocess
import sys

import pytest

from harness import bisect, matrix, repro
from tests.conftest import ROOT

CASE = "checkpoint/wrapper_always_passes_noop_context_fn[cpu-graphbreaks-eager]"
WARM = pathlib.Path("/tmp/warm")


def harness(*args, timeout=900):
    return subprocess.run([sys.executable, "-m", "harness", "bisect", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout, env=repro.clean_env())


def lines_of(stdout: str) -> dict:
    """'torch VERSION  SESSION  OUTCOME  ...' lines -> {version: (session, outcome)}."""
    found = {}
    for line in stdout.splitlines():
        if line.startswith("torch "):
            parts = line.split()
            outcome = " ".join(parts[3:5]) if parts[3:5] == ["no", "environment"] else parts[3]
            found[parts[1]] = (parts[2], outcome)
    return found


def test_version_ranges_compare_as_many_parts_as_given():
    assert bisect.in_range("2.4.1", "2.4", "2.5")
    assert bisect.in_range("2.5.1", "2.4", "2.5")
    assert not bisect.in_range("2.6.0", "2.4", "2.5")
    assert not bisect.in_range("2.10.0", "2.9.1", "2.9")
    assert bisect.version_key("2.15.0+cu132") == (2, 15, 0)
    targets = bisect.plan("2.4", "2.6", "cpu", envdir=pathlib.Path("/nonexistent"))
    assert [(t.version, t.session) for t in targets] == [("2.4.1", "cpu_torch24"), ("2.5.1", "cpu_torch25"),
                                                         ("2.6.0", "cpu_torch26")]
    cuda = bisect.plan("2.1", "2.1", "cuda", envdir=pathlib.Path("/nonexistent"))
    assert [t.session for t in cuda] == ["cuda12_torch21"]  # one per row: the registry's wheel


def test_boundaries_are_where_consecutive_runs_differ():
    def result(version, outcome):
        return bisect.Result(bisect.Target(version, "s", "s", None), outcome)

    runs = [result("2.1.2", "fail"), result("2.2.2", "no environment"), result("2.4.1", "known"),
            result("2.5.1", "known"), result("2.9.1", "pass")]
    assert [(a.target.version, b.target.version) for a, b in bisect.boundaries(runs)] == [
        ("2.1.2", "2.4.1"), ("2.5.1", "2.9.1")]


def test_runs_the_case_in_each_session_venv_and_skips_missing_ones(tmp_path):
    # A session venv under --envdir that is this interpreter (it holds the newest row's pins);
    # the other rows in range have no venv and --no-build skips them.
    newest = [s for s in matrix.load() if s.device == "cpu" and not s.nightly][-1]
    older = [s for s in matrix.load() if s.device == "cpu" and not s.nightly][-2]
    python = tmp_path / newest.name / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    python.chmod(0o755)
    done = harness(CASE, "--from", older.torch, "--to", newest.torch, "--no-build", "--envdir", str(tmp_path))
    assert done.returncode == 0, done.stdout + done.stderr
    lines = lines_of(done.stdout)
    assert lines[older.torch] == (older.name, "no environment")
    session, outcome = lines[newest.torch]
    assert session == newest.name
    # The same outcome as the exported script gives in this interpreter.
    collected = repro.collect(sys.executable, CASE)
    script = tmp_path / "case.py"
    script.write_text(repro.build_script(collected, script.name))
    assert repro.run_script(sys.executable, script)["outcome"] == outcome == "known"


def test_unknown_case_lists_the_closest_ids():
    done = harness(CASE.replace("eager", "eagr"), "--env", f"2.15={sys.executable}")
    assert done.returncode == 2
    assert f"  {CASE}" in done.stderr.splitlines()[2]
    assert "torch " not in done.stdout


def test_no_environment_at_all_is_exit_1(tmp_path):
    done = harness(CASE, "--from", "2.5", "--to", "2.5", "--no-build", "--envdir", str(tmp_path))
    assert done.returncode == 1
    assert lines_of(done.stdout) == {"2.5.1": ("cpu_torch25", "no environment")}


@pytest.mark.skipif(not all((WARM / v / "bin" / "python").exists() for v in ("v2.4.1", "v2.5.1")),
                    reason="needs the hand-made torch 2.4.1 and 2.5.1 venvs in /tmp/warm")
def test_finds_the_boundary_between_two_torch_versions():
    case = "autocast/eager_checkpoint_of_compiled_function_under_autocast[fullgraph-eager-cpu-bf16]"
    done = harness(case, "--env", f"2.5.1={WARM / 'v2.5.1/bin/python'}", "--env", f"2.4.1={WARM / 'v2.4.1/bin/python'}")
    assert done.returncode == 0, done.stderr
    assert lines_of(done.stdout) == {"2.4.1": ("v2.4.1", "fail"), "2.5.1": ("v2.5.1", "pass")}
    assert "boundary: 2.4.1 (fail) -> 2.5.1 (pass)" in done.stdout.splitlines()
