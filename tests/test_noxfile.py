"""The noxfile, run as users run it: real nox, real venvs, real torch."""

import json
import os
import subprocess
import sys

import pytest

from harness.core import envcheck, installs, matrix, paths, records, venvs
from tests.conftest import CHECKOUT_VENVS, ROOT

pytestmark = CHECKOUT_VENVS  # runs or builds the checkout's session venvs (tests/conftest.py)

MAIN = matrix.main_session()  # the newest row's CPU session: what the tests session's venv holds
MAIN_CUDA = next(s for s in matrix.load() if s.device == "cuda" and s.torch == MAIN.torch and not s.label)


def nox(*args, env=None, timeout=1200):
    return subprocess.run(
        [sys.executable, "-m", "nox", "-f", str(ROOT / "noxfile.py"), *args],
        cwd=ROOT, capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})},
    )


def listed(*args):
    result = nox("-l", "--json", *args)
    assert result.returncode == 0, result.stderr
    return {entry["session"]: entry for entry in json.loads(result.stdout)}


def test_json_listing_of_cpu_and_cuda_is_the_whole_matrix_with_descriptions_and_tags():
    sessions = listed("-t", "cpu", "cuda")
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
        ("registry", lambda name: matrix.find(name).index is None),
    ],
)
def test_tags_select_groups(tag, check):
    sessions = listed("-t", tag)
    assert sessions and all(check(name) for name in sessions)


def test_the_lightning_tag_lists_the_lightning_axis_from_the_table():
    axis = listed("-t", "lightning")
    assert set(axis) == {s.name for s in matrix.load() if s.lightning_of} and "cpu_torch25_lightning_newest" in axis
    for name, entry in axis.items():
        spec = matrix.find(name)
        assert f"Lightning {spec.lightning} (the newest that supports this torch; only the cases that use " \
               "Lightning)" in entry["description"]
    assert set(listed("-t", "cpu")) >= set(axis)  # the nightly's CPU matrix runs them too


@pytest.mark.slow
def test_a_lightning_session_runs_only_the_cases_that_use_lightning(tmp_path):
    name = "cpu_torch25_lightning_newest"
    selection = ("plain_checkpoint and eager and fullgraph"
                 " or init_module_around_compiled_init_call and eager and full_init")
    result = nox("-s", name, "--", "cases/test_checkpoint.py", "cases/test_empty_init.py", "-k", selection,
                 env={paths.RESULTS_ENV: str(tmp_path)})
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    back = records.read(tmp_path / f"{name}.jsonl")
    cases = [r["case"] for r in back if r["kind"] == "case"]
    assert cases and all(c.startswith("empty_init/init_module_around_compiled_init_call[") for c in cases), cases
    # The same selection without the Lightning axis's own takes a checkpoint case too: the row's session runs it.
    collected = subprocess.run([str(venvs.venv_python(name)), "-m", "pytest", "--collect-only", "-q",
                                "-p", "no:cacheprovider", "cases/test_checkpoint.py", "-k", selection],
                               cwd=ROOT, capture_output=True, text=True)
    assert "test_checkpoint.py::test_plain_checkpoint[" in collected.stdout, collected.stdout[-2000:]
    assert back[0]["lightning"] == matrix.find(name).lightning and back[0]["identity"]["lightning_of"] == "cpu_torch25"


def test_plain_nox_runs_the_main_job_only():
    marked = [line.split()[1] for line in nox("-l").stdout.splitlines() if line.startswith("* ")]
    assert marked == [MAIN.name]  # `*`: what plain `nox` selects


def test_plain_listing_has_one_line_per_session():
    result = nox("-l")
    assert result.returncode == 0
    assert "- cpu_torch213 [cpu,registry] -> Run the cases on CPU with torch 2.13.0, Lightning 2.6.6" in result.stdout
    assert "- tests -> Run the harness's own test suite" in result.stdout


@pytest.mark.skipif(bool(envcheck.host_gpus()), reason="this machine has a GPU")
def test_cuda_session_without_gpu_stops_clearly(tmp_path):
    result = nox("-s", "cuda12_torch25", "--envdir", str(tmp_path / "envs"), env={paths.RESULTS_ENV: str(tmp_path)})
    assert result.returncode != 0
    assert "runs CUDA cases but this machine has no GPU" in result.stderr
    assert not list(tmp_path.glob("*.jsonl"))


def test_unknown_session_is_an_error():
    result = nox("-s", "cpu_torch99")
    assert result.returncode != 0
    assert "Sessions not found: cpu_torch99" in result.stderr


@pytest.mark.parametrize("target", ["tests/test_matrx.py", "tests/test_matrx.py::test_a_row"])
def test_a_mistyped_test_file_stops_the_tests_session_before_it_installs(tmp_path, target):
    # Under pytest-xdist, pytest's own "file or directory not found" never reaches the terminal.
    result = nox("-s", "tests", "--envdir", str(tmp_path / "envs"), "--", target, "-k", "row")
    assert result.returncode != 0
    assert "Session tests aborted: no such test file: " + target in result.stderr
    assert "uv pip install" not in result.stderr


PASSING_AND_FAILING = """
def test_passes(tmp_path):
    (tmp_path / "written").write_text("a passing test's file")

def test_fails(tmp_path):
    (tmp_path / "written").write_text("a failing test's file")
    assert False, "planted"
"""


def test_the_tests_session_removes_a_passing_tests_folder_and_keeps_a_failing_ones(tmp_path):
    # The suite's workflow tests leave a torch venv each in their folder: kept to the run's end, they
    # filled CI's disk (pytest's "could not create numbered dir" in every test after).
    planted, basetemp = tmp_path / "test_planted.py", tmp_path / "basetemp"
    planted.write_text(PASSING_AND_FAILING)
    result = nox("-R", "-s", "tests", "--", str(planted), "-n", "0", "-p", "no:cacheprovider",
                 f"--basetemp={basetemp}", f"--junitxml={tmp_path / 'junit.xml'}")
    assert result.returncode != 0 and "1 failed, 1 passed" in result.stdout, result.stdout[-3000:]
    assert not (basetemp / "test_passes0").exists(), sorted(p.name for p in basetemp.iterdir())
    assert (basetemp / "test_fails0" / "written").is_file(), sorted(p.name for p in basetemp.iterdir())


def test_a_mistyped_case_file_stops_a_case_session_before_it_installs(tmp_path):
    session = matrix.main_session().name
    result = nox("-s", session, "--envdir", str(tmp_path / "envs"), "--", "cases/test_nope.py::test_x")
    assert result.returncode != 0
    assert f"Session {session} aborted: no such case file: cases/test_nope.py::test_x" in result.stderr
    assert "uv pip install" not in result.stderr


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


@pytest.mark.slow
def test_install_only_builds_and_runs_nothing(tmp_path):
    result = nox("-s", MAIN.name, "--install-only", env={paths.RESULTS_ENV: str(tmp_path / "results")})
    assert result.returncode == 0, result.stderr[-3000:]
    assert not (tmp_path / "results").exists() or not list((tmp_path / "results").iterdir())


@pytest.mark.slow
@pytest.mark.skipif(bool(envcheck.host_gpus()), reason="this machine has a GPU")
def test_a_cuda_session_builds_checks_and_collects_without_a_gpu(tmp_path):
    result = nox("-s", MAIN_CUDA.name, "--", "--collect-only", "-q", env={paths.RESULTS_ENV: str(tmp_path / "results")})
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    output = result.stdout + result.stderr
    assert (f"{MAIN_CUDA.name}: torch {MAIN_CUDA.torch}" in output
            and f"(CUDA {MAIN_CUDA.cuda_major}." in output)  # the wheel's CUDA major, checked
    results = tmp_path / "results"  # tmp_path holds the test's compile caches too (tests/conftest.py)
    assert " tests collected" in output and not (results.exists() and list(results.iterdir()))  # nothing recorded


@pytest.mark.slow
def test_install_variables_are_recorded_and_a_change_rebuilds_and_a_file_after_the_dashes_narrows(tmp_path):
    # An envdir of 88 characters: nox hashes the venv's name (a venv path over 87), as in a deep
    # checkout or a CI workspace; the harness's tools still find the venv by the session's name.
    envs, results = tmp_path / ("e" * max(1, 87 - len(str(tmp_path)))), tmp_path / "results"
    first = nox("-s", MAIN.name, "--envdir", str(envs), "--", "cases/test_checkpoint.py", "-k",
                "plain_checkpoint and eager", env={paths.RESULTS_ENV: str(results)})
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    cases = [r for r in records.read(results / f"{MAIN.name}.jsonl") if r["kind"] == "case"]
    assert cases and all(r["case"].startswith("checkpoint/plain_checkpoint[") and "eager" in r["case"] for r in cases)
    assert (results / f"{MAIN.name}.xml").is_file()
    assert "The virtualenv name was hashed" in first.stderr, (len(str(envs)), first.stderr[-2000:])
    assert venvs.ensure_venv(MAIN.name, envs, build=False) == venvs.venv_python(MAIN.name, envs)
    assert subprocess.run([venvs.venv_python(MAIN.name, envs), "-c", "import torch"], check=False).returncode == 0
    marker = "UV_EXCLUDE_NEWER=2100-01-01T00:00:00Z"  # changes nothing that resolves today, but could
    second = nox("-s", MAIN.name, "--envdir", str(envs), "--", "-k", "plain_checkpoint and eager",
                 env={paths.RESULTS_ENV: str(results), "UV_EXCLUDE_NEWER": "2100-01-01T00:00:00Z"})
    assert second.returncode == 0, second.stderr[-3000:]
    assert f"installing with {marker} from the environment" in second.stderr
    assert "pins changed: rebuilding the environment" in second.stderr
    environment = records.read(results / f"{MAIN.name}.jsonl")[0]
    assert environment["install_environment"] == {**installs.install_environment(),  # what the shell sets already
                                                  "UV_EXCLUDE_NEWER": "2100-01-01T00:00:00Z"}


# A few fast cases of each kind keep this end-to-end run short.
E2E_SELECTION = "plain_checkpoint or compiled_fn_calls_compiled_fn"


@pytest.mark.slow
@pytest.mark.parametrize("name", ["cpu_torch25"])
def test_session_end_to_end(tmp_path, name):
    """Build the session's venv from its pins, check it, run real cases, write results."""
    spec = matrix.find(name)
    result = nox("-s", name, "--envdir", str(tmp_path / "envs"), "--", "-k", E2E_SELECTION,
                 env={paths.RESULTS_ENV: str(tmp_path / "results")})
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert f"{name}: torch {spec.torch}" in result.stdout + result.stderr  # check-env confirmed the pins
    back = records.read(tmp_path / "results" / f"{name}.jsonl")
    env, cases, end = back[0], [r for r in back if r["kind"] == "case"], back[-1]
    assert env["session"] == name and env["harness_session"] == name
    assert env["torch"].split("+")[0] == spec.torch
    assert env["lightning"] == env["pytorch_lightning"] == spec.lightning
    assert env["python"].startswith(spec.python)
    if env["torch_wheel"]["build"] == venvs.CPU_BUILD:  # PyTorch's CPU index was reachable
        assert env["torch"] == f"{spec.torch}+cpu" and env["cuda"] is None
    else:  # the registry's CUDA build, which runs on CPU
        assert env["torch_wheel"]["build"] == venvs.REGISTRY_BUILD
        assert env["cuda"] and env["cuda"].split(".")[0] in ("12", "13")
    assert f"torch=={spec.torch}" in {p.split("+")[0] for p in env["packages"]}
    assert env["collect_env"].startswith("PyTorch version:")
    assert cases and end["kind"] == "end"
    ran = [c for c in cases if c["outcome"] != "skip"]
    assert ran and any(c["params"].get("backend") == "inductor" and c["metrics"].get("graphs") for c in ran)


def test_explore_without_a_session_is_an_error():
    result = nox("-s", "explore")
    assert result.returncode != 0
    assert "name a matrix session first" in result.stderr + result.stdout


@pytest.mark.slow
def test_explore_draws_the_asked_examples_into_results_explore(tmp_path):
    result = nox("-s", "explore", "--", MAIN.name, "--examples", "2",
                 "cases/test_checkpoint.py::test_property_checkpoint[cpu-graphbreaks-eager]",
                 env={paths.RESULTS_ENV: str(tmp_path)})
    assert result.returncode in (0, 1), result.stdout[-3000:] + result.stderr[-3000:]
    assert not (tmp_path / f"{MAIN.name}.jsonl").exists()  # the table's records are left alone
    cases = [r for r in records.read(tmp_path / "explore" / f"{MAIN.name}.jsonl") if r["kind"] == "case"]
    assert [r["case"] for r in cases] == ["checkpoint/property_checkpoint[cpu-eager-graphbreaks]"]
    summary = cases[0]["metrics"]["property"]
    assert summary["mode"] == "explore" and summary["max_examples"] == 2, summary
