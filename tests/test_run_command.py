"""`python -m harness run SESSION`: a session's cases in the environment at hand (this suite's venv holds
the main job's pins and tools), with the noxfile's steps; how many workers a session gets and why; a
CUDA session runs its cuda cells only. A GPU is stood in for by an `nvidia-smi` on PATH where only
its answers matter."""

import json
import os
import stat
import subprocess
import sys

import pytest

from harness.core import limits, matrix, paths, pytestrun, records
from tests.conftest import ROOT
from tests.test_isolation import case_records, run_session_command, session_env  # noqa: F401 (a fixture, used by name)

MAIN = matrix.main_session()  # what this venv holds
OLDER = next(s for s in matrix.load() if s.device == "cpu" and s.torch != MAIN.torch and not s.lightning_of)
CUDA = next(s for s in matrix.load() if s.device == "cuda" and s.torch == MAIN.torch)
H100 = ("#!/bin/sh\ncase \"$*\" in\n  *memory.total*) echo 81559 ;;\n"
        "  *) echo 'GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-0)' ;;\nesac\n")


def harness_run(*args, results, env=None):
    environ = {k: v for k, v in os.environ.items() if k not in (pytestrun.SESSION_ENV, pytestrun.WORKERS_ENV)}
    environ.update({paths.RESULTS_ENV: str(results), **(env or {})})
    return subprocess.run([sys.executable, "-m", "harness", "run", *args], cwd=ROOT, capture_output=True,
                          text=True, env=environ, timeout=1800)


@pytest.fixture
def fake_gpu_tools(tmp_path):
    """A PATH whose nvidia-smi answers as a machine with one H100 does."""
    folder = tmp_path / "bin"
    folder.mkdir()
    tool = folder / "nvidia-smi"
    tool.write_text(H100)
    tool.chmod(tool.stat().st_mode | stat.S_IEXEC)
    return f"{folder}{os.pathsep}{os.environ['PATH']}"


def test_a_narrowed_run_here_writes_the_sessions_records_and_junit(tmp_path, monkeypatch):
    done = harness_run(MAIN.name, "cases/test_checkpoint.py", "-k", "plain_checkpoint and inductor and fullgraph",
                       results=tmp_path)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert f"{MAIN.name}: torch {MAIN.torch}" in done.stdout  # the pin check ran, as nox's session runs it
    back = records.read(paths.results_path(MAIN.name, tmp_path))
    environment, cases, end = back[0], [r for r in back if r["kind"] == "case"], back[-1]
    assert environment["identity"]["session"] == MAIN.name
    monkeypatch.delenv(pytestrun.WORKERS_ENV, raising=False)
    chosen = pytestrun.choose_workers(MAIN)  # as the machine allows, what the command chose without $HARNESS_WORKERS
    assert environment["workers"] == {"count": chosen.count, "basis": chosen.basis}
    assert {r["case"]: r["outcome"] for r in cases} == {
        "checkpoint/plain_checkpoint[cpu-inductor-fullgraph]": "pass",
        "checkpoint/plain_checkpoint[cuda-inductor-fullgraph]": "skip"}
    assert end["kind"] == "end" and paths.results_path(MAIN.name, tmp_path).with_suffix(".xml").is_file()


def test_a_run_narrowed_to_fewer_cases_than_workers_starts_one_worker_a_case(tmp_path):
    """Each worker imports torch before it takes a case: a run naming one case by its node id starts one."""
    case = "cases/test_checkpoint.py::test_plain_checkpoint[cpu-fullgraph-eager]"
    done = harness_run(MAIN.name, case, results=tmp_path, env={pytestrun.WORKERS_ENV: "2"})
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    back = records.read(paths.results_path(MAIN.name, tmp_path))
    assert back[0]["workers"] == {"count": 1, "basis": "$HARNESS_WORKERS=2; as many as the cases the run names (1)"}
    assert [r["case"] for r in back if r["kind"] == "case"] == ["checkpoint/plain_checkpoint[cpu-eager-fullgraph]"]
    done = harness_run(MAIN.name, "cases/test_checkpoint.py", "-k", "plain_checkpoint and fullgraph-eager",
                       results=tmp_path, env={pytestrun.WORKERS_ENV: "2"})  # a file holds cases untold: as chosen
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert records.read(paths.results_path(MAIN.name, tmp_path))[0]["workers"] == {
        "count": 2, "basis": "$HARNESS_WORKERS=2"}


@pytest.mark.parametrize("session, env, says", [
    ("cpu_torch99", {}, "error: unknown session 'cpu_torch99' (did you mean "),
    (OLDER.name, {}, f"error: environment does not match session {OLDER.name}: torch is {MAIN.torch}"),
    (CUDA.name, {}, f"error: session {CUDA.name} runs CUDA cases but this machine has no GPU"),
    (MAIN.name, {pytestrun.WORKERS_ENV: "all"}, "error: $HARNESS_WORKERS is 'all': a number of workers, 1 or more"),
], ids=["unknown", "other_pins", "no_gpu", "bad_workers"])
def test_bad_input_stops_with_one_line_and_keeps_the_results_there(tmp_path, session, env, says):
    earlier = paths.results_path(session, tmp_path)
    earlier.write_text('{"an": "earlier run"}\n')
    done = harness_run(session, results=tmp_path,
                       env={**env, "PATH": "/usr/bin:/bin:" + os.path.dirname(sys.executable)})
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(says), done.stderr
    assert (earlier.read_text() == '{"an": "earlier run"}\n'
            and sorted(p.name for p in tmp_path.iterdir()) == [earlier.name])


def test_a_cuda_sessions_workers_fit_its_gpu_and_cores(monkeypatch, fake_gpu_tools):
    monkeypatch.setenv("PATH", fake_gpu_tools)
    monkeypatch.delenv(pytestrun.WORKERS_ENV, raising=False)
    cores = os.cpu_count()
    chosen = pytestrun.choose_workers(CUDA)
    assert chosen == pytestrun.Workers(min(cores, 81559 // 1024 // pytestrun.GPU_GIB_PER_WORKER),
                                      f"{cores} cores, 80 GiB of GPU memory at 4 GiB a worker")
    memory = limits.machine_memory_gib()
    assert pytestrun.choose_workers(MAIN) == pytestrun.Workers(  # a CPU session: cores and memory, as a CUDA one
        max(1, min(cores, int(memory // pytestrun.CPU_GIB_PER_WORKER))),
        f"{cores} cores, {memory:.0f} GiB of memory at {pytestrun.CPU_GIB_PER_WORKER} GiB a worker")
    monkeypatch.setenv(pytestrun.WORKERS_ENV, "12")
    assert pytestrun.choose_workers(CUDA) == pytestrun.Workers(12, "$HARNESS_WORKERS=12")
    command = pytestrun.pytest_args(CUDA)
    assert command[command.index("-n") + 1] == "12" and "--cuda-cases" in command
    assert pytestrun.run_env(CUDA, "/venv")[pytestrun.WORKERS_BASIS_ENV] == "$HARNESS_WORKERS=12"


DEVICES = """
import pytest
import torch


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_on(case, device):
    case.check(torch.sin, torch.randn(3))


def test_without_a_device(case):
    case.check(torch.sin, torch.randn(3))
"""


@pytest.mark.usefixtures("session_env")
def test_a_cuda_session_runs_its_cuda_cells_only(pytester):
    path = pytester.makepyfile(test_devices=DEVICES)
    run_session_command(pytester, path, session=CUDA)  # its options; recorded as $HARNESS_SESSION
    results_file = paths.results_path(os.environ[pytestrun.SESSION_ENV], pytester.path / "results")
    assert [r["case"] for r in case_records(results_file)] == ["devices/on[cuda]"]
    assert json.loads(results_file.read_text().splitlines()[0])["workers"]["count"] == 1


def test_ctrl_c_stops_the_run_and_pytest_writes_its_end_record(tmp_path):
    """Ctrl-C reaches the whole foreground process group: `python -m harness run` lets pytest end its cases
    and write its end record (it killed pytest mid-write before), and no case records the interrupt."""
    import signal
    import time

    environ = {k: v for k, v in os.environ.items() if k not in (pytestrun.SESSION_ENV, pytestrun.WORKERS_ENV)}
    environ[paths.RESULTS_ENV] = str(tmp_path)
    run = subprocess.Popen([sys.executable, "-m", "harness", "run", MAIN.name], cwd=ROOT, env=environ,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    path = paths.results_path(MAIN.name, tmp_path)
    deadline = time.monotonic() + 600
    while not (path.exists() and len(path.read_text().splitlines()) > 10) and time.monotonic() < deadline:
        time.sleep(0.5)
    os.killpg(run.pid, signal.SIGINT)
    assert run.wait(timeout=300) == 2
    back = records.read(path)
    assert back[-1]["kind"] == "end" and back[-1]["exitstatus"] == 2, back[-1]
    assert not [r for r in back if "KeyboardInterrupt" in (r.get("message") or "") + (r.get("exc_type") or "")]
