import contextlib
import fcntl
import os
import pathlib
import shutil
import signal
import subprocess
import sys

import pytest

from harness.core.paths import ROOT
from harness.core.pytestrun import COMPILE_CACHES_ENV
from harness.plugin.compilecaches import BUILDS

# Python keeps compiled bytecode beside a module unless told not to, and some machines tell it not to
# (PYTHONDONTWRITEBYTECODE). Then every process the suite starts (nested sessions and their workers,
# scripts, bisect's interpreters: hundreds) compiles torch's thousands of modules from source again,
# 10-20 s of CPU each. The suite's processes write bytecode and read it back; nothing they run or
# measure differs but the time.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False
# The sessions the suite runs hold a handful of cases each, beside the suite's own workers: one worker each,
# unless a test says otherwise (a session's own choice is tested in tests/test_run_command.py).
os.environ.setdefault("HARNESS_WORKERS", "1")
# Tests stop the runs they start with SIGINT, as a user's Ctrl-C would. A suite started as a shell's
# background job (`bash .ci/run &`) has SIGINT ignored, which every process it starts would inherit.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

try:
    import torch
except ImportError:  # the README's tools venv: the tests that need no torch (the workflows under act) still run
    torch = None

if torch is not None:
    # Loaded once here, before any pytester run: pytester's in-process runs drop the modules they
    # imported, and torch, inductor and Triton's extension modules abort when imported twice.
    # One tiny inductor compile pulls in everything a compile needs.
    torch.compile(torch.sin, backend="inductor")(torch.ones(2))
    torch._dynamo.reset()

pytest_plugins = ["pytester", "tests.standin_gpu.fixtures"]

# The tests that run or build the checkout's session venvs (.nox: nox sessions, repro, reduce, bisect,
# explore) spread over the suite's workers. Two of them must never build one venv at once, nor share the
# compile caches' worker links of one venv (harness.plugin.compilecaches: a second run would point the
# first one's link at its own cases): the venvs they share are built once, under a lock, before the first
# of them runs (checkout_venvs), and each test's sessions keep their compile caches under its own
# tmp_path (nested_compile_caches, which nox's sessions and bisect heed: runsession.compile_caches_of).
CHECKOUT_VENVS = pytest.mark.usefixtures("checkout_venvs", "nested_compile_caches")
# The sessions whose venvs in the checkout's .nox more than one test runs; a venv one test alone uses is
# built by that test.
SHARED_SESSIONS = ("cpu_torch215", "cpu_torch25", "cpu_torch25_lightning_newest")


def copy_project(target: pathlib.Path) -> pathlib.Path:
    """The noxfile, harness and cases in `target`: a project whose files a test may change."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for folder in ("cases", "harness"):
        shutil.copytree(ROOT / folder, target / folder, ignore=ignore)
    for name in ("noxfile.py", "pyproject.toml"):
        shutil.copy2(ROOT / name, target / name)
    return target


def project_with_families(target: pathlib.Path, families: dict[str, str]) -> pathlib.Path:
    """A copy of the project (copy_project) whose case families are `families` (name -> the source of its
    cases/test_NAME.py) and no other: a full session of it takes seconds."""
    project = copy_project(target)
    for path in (project / "cases").glob("test_*.py"):
        path.unlink()
    for name, source in families.items():
        (project / "cases" / f"test_{name}.py").write_text(source)
    return project


def run_nox(project: pathlib.Path, *args, results=None, env=None, timeout=3600):
    """Real nox on `project`'s noxfile, with the checkout's session venvs (.nox)."""
    environ = {**os.environ, **(env or {})}
    environ.pop("HARNESS_SESSION", None)
    if results is not None:
        environ["HARNESS_RESULTS_DIR"] = str(results)
    return subprocess.run([sys.executable, "-m", "nox", "-f", str(project / "noxfile.py"), "--envdir",
                           str(ROOT / ".nox"), *args], cwd=project, capture_output=True, text=True,
                          timeout=timeout, env=environ)


def _link_or_copy(source: str, target: str) -> None:
    """Torch writes a cache file whole under a new name and renames it into place (or writes it only
    where it is missing), so a link is never written through."""
    try:
        os.link(source, target)
    except OSError:  # another file system
        shutil.copy2(source, target)


@pytest.fixture(scope="session")
def checkout_venvs(tmp_path_factory):
    """The checkout's session venvs that tests share (SHARED_SESSIONS), built or checked by real nox
    (`--install-only`) once per pytest process, one process at a time (an flock: the suite's xdist
    workers wait for the first)."""
    envdir = ROOT / ".nox"
    envdir.mkdir(exist_ok=True)
    results = tmp_path_factory.mktemp("checkout-venvs-results")
    with open(envdir / ".suite-venvs.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        done = subprocess.run([sys.executable, "-m", "nox", "-f", str(ROOT / "noxfile.py"), "--envdir", str(envdir),
                               "--install-only", "-s", *SHARED_SESSIONS], cwd=ROOT, capture_output=True, text=True,
                              timeout=3600, env={**{k: v for k, v in os.environ.items() if k != "HARNESS_SESSION"},
                                   "HARNESS_RESULTS_DIR": str(results)})
    assert done.returncode == 0, f"building the shared session venvs failed: {done.stderr[-3000:]}"
    return envdir


@contextlib.contextmanager
def warm_compile_caches(folder: pathlib.Path, tmp_path_factory):
    """The compile caches of the sessions a test runs (harness.plugin.compilecaches), under `folder`:
    each case compiles into a directory of its own, empty when the test starts. Only the worker's
    warm-up (harness.plugin.warmup: the same small compile in every run, 8-10 s cold on this machine,
    paid by dozens of nested sessions) is served warm: from what the first such run of this pytest
    process left, as a re-run of a real session is served it from its venv. The C++ builds that cases
    share (named by their source and compile command) are shared by every such run of the pytest
    process, as a session's cases share them."""
    root = folder / "compile-caches"
    root.mkdir()
    shared_builds = tmp_path_factory.getbasetemp() / "shared-builds"
    shared_builds.mkdir(exist_ok=True)
    (root / BUILDS).symlink_to(shared_builds, target_is_directory=True)
    template = tmp_path_factory.getbasetemp() / "warm-up-compile-caches"  # a folder per worker name
    if template.is_dir():  # hard links: the warm-up's precompiled header alone is 152 MB (torch 2.15)
        shutil.copytree(template, root / "warm-up", symlinks=True, copy_function=_link_or_copy)
    yield root
    for warmed in (root / "warm-up").glob("*"):
        if not (template / warmed.name).exists():
            template.mkdir(exist_ok=True)
            staged = template / f".{warmed.name}.{os.getpid()}"
            shutil.copytree(warmed, staged, symlinks=True, copy_function=_link_or_copy)
            staged.rename(template / warmed.name)


@pytest.fixture
def nested_compile_caches(tmp_path, tmp_path_factory, monkeypatch):
    """The compile caches of the sessions a test runs, under its own tmp_path (warm_compile_caches)."""
    with warm_compile_caches(tmp_path, tmp_path_factory) as root:
        monkeypatch.setenv(COMPILE_CACHES_ENV, str(root))
        yield root
