"""`python -m harness gpu ...`, the steps of a CUDA row on a GPU machine, tried here without one: the wheels
derived from a row's pins, the preflight against the stand-in GPU (tests/standin_gpu: torch's own code runs,
the driver finds no device) and without any, and a row cut off at its budget or stopped from outside, then
cells of it alone."""

import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from harness.core import matrix, paths, pytestrun, records
from harness.tools.gpu import preflight, wheels
from tests import standin_gpu
from tests.conftest import ROOT

MAIN = matrix.main_session()  # what this venv holds
CUDA = next(s for s in matrix.load() if s.device == "cuda" and s.torch == MAIN.torch)


GPU = [sys.executable, "-m", "harness", "gpu"]


def step_environment(env=None) -> dict:
    """This one, less what the suite's session sets (a step chooses its runs' workers), then `env`."""
    environ = {k: v for k, v in os.environ.items() if k not in (pytestrun.SESSION_ENV, pytestrun.WORKERS_ENV)}
    return {**environ, **(env or {})}


def gpu_command(*args, env=None, timeout=900):
    started = time.monotonic()
    done = subprocess.run([*GPU, *map(str, args)], cwd=ROOT, capture_output=True, text=True,
                          env=step_environment(env), timeout=timeout)
    return done, time.monotonic() - started


def test_a_rows_wheels_are_its_lightning_pins_and_the_sessions_tools_and_only_the_missing_ones_go_in(tmp_path):
    spec = matrix.find("cuda13_torch211")
    wanted = wheels.requirements(spec)
    assert wanted[:2] == ["lightning==2.6.4", "pytorch-lightning==2.6.4"]
    assert "hypothesis==6.168.5" in wanted and not any(text.startswith("pip") for text in wanted)
    for name in ("lightning-2.6.4-py3-none-any.whl", "lightning-2.6.6-py3-none-any.whl",
                 "pytorch_lightning-2.6.4-py3-none-any.whl", "hypothesis-6.168.5-py3-none-any.whl"):
        (tmp_path / name).write_bytes(b"")  # which to install is read from the names
    image = {"lightning": "2.6.6", "pytorch-lightning": "2.6.6", "pytest": "8.4.1", "pytest-timeout": "2.4.0",
             "pytest-xdist": "3.8.0", "packaging": "25.0", "hypothesis": "6.140.2", "expecttest": None}
    chosen, missing = wheels.to_install(spec, tmp_path, image)
    assert [p.name for p in chosen] == ["lightning-2.6.4-py3-none-any.whl", "pytorch_lightning-2.6.4-py3-none-any.whl",
                                        "hypothesis-6.168.5-py3-none-any.whl"]
    assert missing == ["expecttest not installed (needs expecttest>=0.3,<1)"]


def test_gpu_wheels_downloads_them_for_the_gpu_machines_python(tmp_path):
    done, _ = gpu_command("wheels", CUDA.name, "--python", "3.12", "--dest", tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    names = sorted(p.name.split("-")[0].lower() for p in tmp_path.glob("*.whl"))
    assert names == ["expecttest", "hypothesis", "lightning", "packaging", "pytest", "pytest_timeout", "pytest_xdist",
                     "pytorch_lightning"], names
    assert all("cp311" not in p.name for p in tmp_path.glob("*.whl"))


def test_the_preflight_on_the_stand_in_gpu_says_no_go_for_its_reasons_in_time(tmp_path, standin_libraries):
    env = standin_gpu.environment(standin_libraries, tmp_path / "cuda.log", tool=True)
    done, took = gpu_command("preflight", CUDA.name, "--work", tmp_path / "work", env=env)
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    lines = done.stdout.strip().splitlines()
    assert lines[0] == ("ok  facts: GPU 0: Stand-in GPU, driver 580.00, 81559 MiB, MIG Disabled; "
                        "CUDA_VISIBLE_DEVICES unset")
    assert lines[1].startswith("NO  pins: error: environment does not match session") and \
        "torch.cuda.is_available() is False" in lines[1]  # the driver finds no device: torch's own runtime says so
    by_check = {line.split(":")[0]: line for line in lines[2:-1]}
    assert re.match(r"ok  collection: \d+ cases collected by the session's command", by_check["ok  collection"])
    assert by_check["NO  forked children"].startswith("NO  forked children: 0 of ") and \
        "RuntimeError: No CUDA GPUs are available" in by_check["NO  forked children"]
    assert lines[-1].startswith(f"NO-GO for {CUDA.name} after ") and \
        lines[-1].endswith("s: pins, forked children (above)")
    assert took < preflight.PREFLIGHT_SECONDS + 15, took
    calls = standin_gpu.driver_calls(tmp_path / "cuda.log")
    assert calls and not any(c.inherited for c in calls)  # no child inherited a driver its parent initialised


@pytest.mark.parametrize("where, says", [
    ("no_gpu", "NO  facts: no nvidia-smi on PATH: no NVIDIA driver here"),
    ("mig", "NO  facts: GPU 0: Stand-in GPU, driver 580.00, 81559 MiB, MIG Enabled; CUDA_VISIBLE_DEVICES unset: MIG is "
            "on, and NVML cannot count MIG devices for the harness's guard"),
])
def test_the_preflight_stops_at_the_facts_where_the_machine_cannot_do(tmp_path, standin_libraries, where, says):
    if where == "no_gpu":
        env = {"PATH": os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep)
                                       if not os.path.exists(os.path.join(p, "nvidia-smi")))}
    else:
        env = {**standin_gpu.environment(standin_libraries, tmp_path / "cuda.log", tool=True), "STANDIN_MIG": "Enabled"}
    done, took = gpu_command("preflight", CUDA.name, env=env)
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stdout.splitlines() == [says, f"NO-GO for {CUDA.name} after 0 s: facts (above)"], done.stdout
    assert took < 30


@pytest.mark.parametrize("args, says", [
    (["preflight", MAIN.name], f"error: {MAIN.name} is not a CUDA session: the GPU preflight is for cuda* sessions"),
    (["preflight", "cuda13_torch99"], "error: unknown session 'cuda13_torch99' (did you mean "),
    (["row", MAIN.name, "--out", "OUT", "--case-timeout", "0"],
     "python -m harness gpu row: error: argument --case-timeout: '0' is not a number of seconds, 1 or more"),
])
def test_bad_input_is_one_line_and_touches_nothing(tmp_path, args, says):
    done, _ = gpu_command(*[str(tmp_path / "out") if a == "OUT" else a for a in args])
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(says), done.stderr
    assert list(tmp_path.iterdir()) == []


def _as_a_background_job():
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # what a shell's `cmd &` does without job control


def gpu_row(out, *args):
    """`python -m harness gpu row` started as a script's background job would be, SIGINT ignored (the
    caller stops or waits for it): the step's own runs must still stop at SIGINT."""
    return subprocess.Popen([*GPU, "row", MAIN.name, "--out", str(out), *map(str, args)], cwd=ROOT,
                            env=step_environment(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            preexec_fn=_as_a_background_job)


def test_a_row_cut_off_at_its_budget_says_so_and_leaves_no_process(tmp_path):
    # Where the budget falls (before pytest, or within a case) depends on this machine's load: what must
    # hold wherever it falls is asserted, not how far the row got.
    started = time.monotonic()
    process = gpu_row(tmp_path / "row", "--budget", 3)
    output, _ = process.communicate(timeout=300)
    took = time.monotonic() - started
    assert process.returncode == 1, output[-3000:]
    summary = (tmp_path / "row" / "summary.txt").read_text().splitlines()
    assert summary[0].endswith("; NOT COMPLETE; cut off at the budget") and summary[0] in output, summary
    assert took < 3 + 30, took  # stopped, not killed at the grace's end


@pytest.mark.usefixtures("nested_compile_caches")
def test_a_row_stopped_from_outside_keeps_what_it_recorded_and_its_cells_run_alone_give_its_outcomes(tmp_path):
    out = tmp_path / "row"
    results = paths.results_path(MAIN.name, out / "results")
    process = gpu_row(out, "--budget", 600, "--case-timeout", 120)
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and process.poll() is None:  # stopped (a loan's limit) once cases ran
        if results.is_file() and sum(r["kind"] == "case" and r["outcome"] != "skip"
                                     for r in records.read(results, passed_over=lambda t: None)) >= 2:
            break
        time.sleep(1)
    process.send_signal(signal.SIGTERM)
    output, _ = process.communicate(timeout=120)
    assert process.returncode == 1, output[-3000:]
    summary = (out / "summary.txt").read_text().splitlines()
    assert summary[0].endswith("; NOT COMPLETE; stopped from outside (SIGTERM)") and summary[0] in output, summary
    assert any(line.startswith("progress: ") for line in output.splitlines())
    back = records.read(results)
    end, cases = back[-1], [r for r in back if r["kind"] == "case"]
    assert end["kind"] == "end" and end["exitstatus"] == 2 and 2 <= len(cases) < 517, (end, len(cases))
    assert not [r for r in cases if "KeyboardInterrupt" in (r.get("message") or "")]  # the stop is no case's failure
    assert json.loads(results.read_text().splitlines()[0])["reuse_keys"]
    done, _ = gpu_command("alone", MAIN.name, "--row", out, "--out", tmp_path / "alone", "--count", 2, "--budget", 300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert done.stdout.startswith("alone: 2 of 2 cells ("), done.stdout
