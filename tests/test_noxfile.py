"""The noxfile, run as users run it: real nox, real venvs, real torch."""

import json
import os
import subprocess
import sys

import pytest

from harness import envcheck, matrix, records
from tests.conftest import ROOT


def nox(*args, env=None, timeout=1200):
    return subprocess.run(
        [sys.executable, "-m", "nox", "-f", str(ROOT / "noxfile.py"), *args],
        cwd=ROOT, capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})},
    )


def listed(*args):
    result = nox("-l", "--json", *args)
    assert result.returncode == 0, result.stderr
    return {entry["session"]: entry for entry in json.loads(result.stdout)}


def test_json_listing_is_the_whole_matrix_with_descriptions_and_tags():
    sessions = listed()
    assert set(sessions) == {s.name for s in matrix.load()}
    for name, entry in sessions.items():
        assert entry["description"].startswith("Run the cases on "), name
        assert entry["python"] and entry["tags"]


@pytest.mark.parametrize(
    ("tag", "check"),
    [
        ("cpu", lambda name: name.startswith("cpu_")),
        ("cuda", lambda name: name.startswith("cuda")),
        ("nightly", lambda name: name.endswith("_torch_nightly")),
    ],
)
def test_tags_select_groups(tag, check):
    sessions = listed("-t", tag)
    assert sessions and all(check(name) for name in sessions)


def test_plain_listing_has_one_line_per_session():
    result = nox("-l")
    assert result.returncode == 0
    assert "* cpu_torch213 [cpu] -> Run the cases on CPU with torch 2.13.0, Lightning 2.6.6" in result.stdout
    assert "- tests -> Run the harness's own test suite" in result.stdout


@pytest.mark.skipif(bool(envcheck.host_gpus()), reason="this machine has a GPU")
def test_cuda_session_without_gpu_stops_clearly(tmp_path):
    result = nox("-s", "cuda12_torch25", "--envdir", str(tmp_path / "envs"), env={records.RESULTS_ENV: str(tmp_path)})
    assert result.returncode != 0
    assert "runs CUDA cases but this machine has no GPU" in result.stderr
    assert not list(tmp_path.glob("*.jsonl"))


def test_unknown_session_is_an_error():
    result = nox("-s", "cpu_torch99")
    assert result.returncode != 0
    assert "Sessions not found: cpu_torch99" in result.stderr


def test_check_env_cli_refuses_drifted_pins():
    result = subprocess.run([sys.executable, "-m", "harness", "check-env", "cpu_torch21"],
                            cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1
    assert result.stderr.startswith("error: environment does not match session cpu_torch21: torch is")


def test_check_env_cli_unknown_session():
    result = subprocess.run([sys.executable, "-m", "harness", "check-env", "cpu_torch2_5"],
                            cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 2
    assert "unknown session 'cpu_torch2_5' (did you mean" in result.stderr


# A few fast cases of each kind keep this end-to-end run short.
E2E_SELECTION = "plain_checkpoint or compiled_fn_calls_compiled_fn"


@pytest.mark.slow
@pytest.mark.parametrize("name", ["cpu_torch25", "cpu_torch213"])
def test_session_end_to_end(tmp_path, name):
    """Build the session's venv from its pins, check it, run real cases, write results."""
    spec = matrix.find(name)
    result = nox("-s", name, "--envdir", str(tmp_path / "envs"), "--", "-k", E2E_SELECTION,
                 env={records.RESULTS_ENV: str(tmp_path / "results")})
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert f"{name}: torch {spec.torch}" in result.stdout + result.stderr  # check-env confirmed the pins
    back = records.read(tmp_path / "results" / f"{name}.jsonl")
    env, cases, end = back[0], [r for r in back if r["kind"] == "case"], back[-1]
    assert env["session"] == name and env["harness_session"] == name
    assert env["torch"].split("+")[0] == spec.torch
    assert env["lightning"] == env["pytorch_lightning"] == spec.lightning
    assert env["python"].startswith(spec.python)
    assert env["cuda"] and env["cuda"].split(".")[0] in ("12", "13")  # the registry's CUDA build
    assert f"torch=={spec.torch}" in {p.split("+")[0] for p in env["packages"]}
    assert env["collect_env"].startswith("PyTorch version:")
    assert cases and end["kind"] == "end"
    ran = [c for c in cases if c["outcome"] != "skip"]
    assert ran and any(c["params"].get("backend") == "inductor" and c["metrics"].get("graphs") for c in ran)
