"""Where a CPU session's torch comes from (harness.venvs.torch_wheel): PyTorch's CPU-only build
when its index is reachable and lists the pin, else the registry's default build, and the venv and
the results say which. Real nox against a PEP 503 index served on 127.0.0.1 from a directory of
wheels (the CPU wheel this machine has on disk)."""

import contextlib
import functools
import http.server
import os
import pathlib
import shutil
import subprocess
import sys
import threading

import pytest

from benchmarks.speed import venv_bytes
from harness.core import installs, matrix, paths, records, venvs
from tests.conftest import ROOT

SESSION = "cpu_torch213"
VENV_LIMIT = 1.5e9  # bytes: the CPU build's venv, against 4.6 GB for the registry's CUDA build


def local_cpu_wheel(spec: matrix.Session) -> pathlib.Path | None:
    """A CPU wheel of the session's torch on this machine (pip's find-links directories)."""
    tag = "cp" + spec.python.replace(".", "")
    for directory in filter(None, [*os.environ.get("PIP_FIND_LINKS", "").split(), "/opt/wheels"]):
        found = sorted(pathlib.Path(directory).glob(f"torch-{spec.torch}+cpu-{tag}-*.whl"))
        if found:
            return found[0]
    return None


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):  # noqa: D401 - a request line per file is noise in the test's output
        pass


@contextlib.contextmanager
def served_index(wheels: list[pathlib.Path], root: pathlib.Path):
    """A PEP 503 simple index of `wheels` on 127.0.0.1; yields its URL."""
    project = root / "simple" / "torch"
    project.mkdir(parents=True)
    links = []
    for wheel in wheels:
        (project / wheel.name).symlink_to(wheel)
        links.append(f'<a href="{wheel.name.replace("+", "%2B")}">{wheel.name}</a>')
    (project / "index.html").write_text("<!DOCTYPE html><html><body>" + "".join(links) + "</body></html>")
    handler = functools.partial(QuietHandler, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/simple"
    finally:
        server.shutdown()


def test_the_cpu_build_when_the_index_lists_it(tmp_path, monkeypatch):
    spec = matrix.find(SESSION)
    with served_index([tmp_path / f"torch-{spec.torch}+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"], tmp_path) as url:
        monkeypatch.setenv(venvs.CPU_INDEX_ENV, url)
        assert venvs.torch_wheel(spec) == {"build": "cpu", "index": url}
        other = matrix.find("cpu_torch212")  # not in this index: the registry's build, and why
        assert venvs.torch_wheel(other) == {
            "build": "registry default", "index": None,
            "reason": f"{url} has no CPU wheel of torch {other.torch} for Python 3.11"}


def test_the_registry_build_when_the_index_is_unreachable(monkeypatch):
    monkeypatch.setenv(venvs.CPU_INDEX_ENV, "http://127.0.0.1:9/simple")  # the discard port: refused
    wheel = venvs.torch_wheel(matrix.find(SESSION))
    assert wheel["build"] == "registry default" and wheel["index"] is None
    assert wheel["reason"].startswith("http://127.0.0.1:9/simple is not reachable")


def test_the_registry_build_when_asked_for(monkeypatch):
    monkeypatch.setenv(venvs.TORCH_BUILD_ENV, "registry")
    assert venvs.torch_wheel(matrix.find(SESSION)) == {"build": "registry default", "index": None,
                                                           "reason": "HARNESS_TORCH_BUILD=registry"}


def test_cuda_and_nightly_sessions_take_what_their_row_says(monkeypatch):
    monkeypatch.setenv(venvs.CPU_INDEX_ENV, "http://127.0.0.1:9/simple")
    assert venvs.torch_wheel(matrix.find("cuda13_torch213")) == {"build": "registry default", "index": None}
    nightly = matrix.find("cpu_torch_nightly")
    assert venvs.torch_wheel(nightly) == {"build": nightly.index, "index": nightly.index_url}


@pytest.mark.slow
def test_a_cpu_session_from_the_local_index_is_small_and_runs_its_cases(tmp_path):
    spec = matrix.find(SESSION)
    wheel = local_cpu_wheel(spec)
    if wheel is None:
        pytest.skip(f"no CPU wheel of torch {spec.torch} for Python {spec.python} on this machine")
    envs, results = tmp_path / "envs", tmp_path / "results"
    with served_index([wheel], tmp_path / "index") as url:
        # The README's command, narrowed to one case (its inductor cell is what the assertions need) to stay short.
        done = subprocess.run(
            [sys.executable, "-m", "nox", "-f", str(ROOT / "noxfile.py"), "-s", SESSION, "--envdir", str(envs),
             "--", "cases/test_checkpoint.py", "-k", "plain_checkpoint"],
            cwd=ROOT, capture_output=True, text=True, timeout=3000,
            env={**os.environ, venvs.CPU_INDEX_ENV: url, paths.RESULTS_ENV: str(results)})
    assert done.returncode in (0, 1), done.stdout[-3000:] + done.stderr[-3000:]  # 1: a case failed, a finding
    assert f"torch: the cpu build from {url}" in done.stderr
    size = venv_bytes(envs / SESSION)
    print(f"{SESSION} venv from the CPU index: {size / 1e9:.2f} GB")
    assert size < VENV_LIMIT
    back = records.read(results / f"{SESSION}.jsonl")
    environment, cases = back[0], [r for r in back if r["kind"] == "case"]
    assert environment["torch"] == f"{spec.torch}+cpu" and environment["cuda"] is None
    assert environment["torch_wheel"] == {"build": "cpu", "index": url}
    assert cases and back[-1]["kind"] == "end"
    assert any(c["params"].get("backend") == "inductor" and c["outcome"] != "skip" for c in cases)
    shutil.rmtree(envs)


def test_every_session_installs_in_the_steps_its_wheel_asks_for(monkeypatch):
    spec = matrix.find("cpu_torch25_lightning_newest")
    cpu = venvs.install_steps(spec, {"build": venvs.CPU_BUILD, "index": "http://127.0.0.1:9/simple"})
    assert cpu == [["--index-url", "http://127.0.0.1:9/simple", "--no-deps", "torch==2.5.1"],
                   [*spec.requirements, *installs.HARNESS_REQUIREMENTS]]  # no command mixes two indexes
    assert venvs.install_steps(spec, {"build": venvs.REGISTRY_BUILD, "index": None}) == [
        [*spec.requirements, *installs.HARNESS_REQUIREMENTS]]
    cuda = matrix.find("cuda11_torch25")
    assert [step[:3] for step in venvs.install_steps(cuda, {"build": cuda.index, "index": cuda.index_url})] == [
        ["--index-url", cuda.index_url, "torch==2.5.1"],
        ["torch==2.5.1", "lightning==2.4.0", "pytorch-lightning==2.4.0"]]


@pytest.mark.slow
def test_an_environment_outside_the_table_is_built_with_its_rows_steps(tmp_path, monkeypatch):
    # What a bisection along Lightning builds: a row's pins with another Lightning release.
    import dataclasses

    monkeypatch.setenv(venvs.TORCH_BUILD_ENV, "registry")  # the registry's wheel, as the table was measured
    row = matrix.find("cpu_torch212")
    spec = dataclasses.replace(row, name="cpu_torch212_lightning2_6_6", lightning="2.6.6", label=None)
    python = venvs.ensure_venv(spec, tmp_path)
    assert python == venvs.venv_python(spec.name, tmp_path) and python.exists()
    found = subprocess.run([str(python), "-c", "import importlib.metadata as m; print(*(m.version(d) for d in "
                            "('torch', 'lightning', 'pytorch-lightning')))"], capture_output=True, text=True)
    assert found.stdout.split() == ["2.12.1", "2.6.6", "2.6.6"], found.stderr
    assert installs.installed_torch_wheel(venvs.venv_of(python))["build"] == venvs.REGISTRY_BUILD
    assert (venvs.venv_of(python) / venvs.STAMP).read_text() == venvs.pins_stamp(
        spec, {"build": venvs.REGISTRY_BUILD, "index": None})
    assert venvs.ensure_venv(spec, tmp_path) == python  # built once
    # Along Lightning the venv is built once and its Lightning switched in place, checked against the pins.
    older = dataclasses.replace(spec, lightning="2.6.5")
    assert venvs.with_lightning(older, venvs.venv_of(python)) == (python, False)
    found = subprocess.run([str(python), "-c", "import importlib.metadata as m; print(*(m.version(d) for d in "
                            "('torch', 'lightning', 'pytorch-lightning')))"], capture_output=True, text=True)
    assert found.stdout.split() == ["2.12.1", "2.6.5", "2.6.5"], found.stderr
    assert (venvs.venv_of(python) / venvs.STAMP).read_text() == venvs.pins_stamp(
        older, {"build": venvs.REGISTRY_BUILD, "index": None})
    assert venvs.with_lightning(spec, venvs.venv_of(python)) == (python, False)
    shutil.rmtree(tmp_path / spec.name)
