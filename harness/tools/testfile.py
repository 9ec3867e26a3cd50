"""A test file run by pytest in a row's venv, each test's outcome by name: for the findings' regression
tests held to the table (harness.report.regressions, which is handed these two)."""

from __future__ import annotations

import getpass
import os
import pathlib
import re
import shutil
import subprocess
import xml.etree.ElementTree as ElementTree

from harness.core import matrix, outputs, venvs
from harness.core.errors import BadInput

PRECOMPILED_HEADERS = "precompiled_headers"  # torch._inductor.codecache._HEADER_DIR's folder
FILE_TIMEOUT = 900  # seconds for one test file (the slowest, finding 5's, takes about 60 s on 2 cores)


def row_python(spec: matrix.Session, python: str | None) -> pathlib.Path:
    """The interpreter that holds the row's torch: PYTHON, else the session's venv."""
    chosen = pathlib.Path(python).absolute() if python else venvs.venv_python(spec.name)
    if not chosen.exists():
        raise BadInput(f"{spec.name}: no venv at {venvs.venv_of(chosen)} (run `nox -s {spec.name}` first, or "
                       f"give --python)")
    done = subprocess.run([str(chosen), "-c", "import torch; print(torch.__version__)"], capture_output=True,
                          text=True, env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    version = done.stdout.strip().split("+")[0]
    if done.returncode != 0 or (spec.torch and version != spec.torch):
        said = version or (done.stderr.strip().splitlines() or ["no torch"])[-1]
        raise BadInput(f"{spec.name}: {chosen} has torch {said}, the row pins {spec.torch}")
    return chosen


def share_precompiled_headers(temporary: pathlib.Path, work: pathlib.Path) -> None:
    """Inductor's precompiled headers (torch 2.8 on) in one folder for every file run under `work`, the
    rest of each file's temporary directory its own. Torch keeps them in the temporary directory outside
    its cache directory, global by design: a header is named by the hash of torch's preprocessed headers,
    its compile command and the compiler, and built only where it is missing. Built for each file, it cost
    5-15 s of the 20-40 s a file that compiles takes (152 MB each, torch 2.15)."""
    shared = work / PRECOMPILED_HEADERS
    shared.mkdir(exist_ok=True)
    where = temporary / f"torchinductor_{_sanitized_user()}"  # torch's default_cache_dir() under TMPDIR
    where.mkdir()
    (where / PRECOMPILED_HEADERS).symlink_to(shared, target_is_directory=True)


def _sanitized_user() -> str:
    """The user name as torch's default_cache_dir() writes it into the folder's name."""
    try:
        name = getpass.getuser()
    except (KeyError, ModuleNotFoundError, OSError):
        name = f"uid_{os.getuid()}"
    return re.sub(r'[\\/:*?"<>|]', "_", name)


def run_file(python: pathlib.Path, test_file: pathlib.Path, work: pathlib.Path) -> dict[str, str] | str:
    """Each test of `test_file` by name: passed, failed or skipped; a string where the file could not
    be collected (what it said)."""
    here = work / test_file.stem
    here.mkdir(parents=True)
    shutil.copy2(test_file, here / test_file.name)
    report = here / "junit.xml"
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "PYTEST_ADDOPTS")}
    caches = here / "caches"
    env.update(TORCHINDUCTOR_CACHE_DIR=str(caches / "inductor"), TRITON_CACHE_DIR=str(caches / "triton"),
               TMPDIR=str(caches))
    caches.mkdir()
    share_precompiled_headers(caches, work)
    code, printed = outputs.run([str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={report}",
                                 f"--rootdir={here}", test_file.name], timeout=FILE_TIMEOUT, cwd=here, env=env)
    if code is None:
        return f"ran past {FILE_TIMEOUT} s"
    if not report.is_file():
        return (printed.strip().splitlines() or [f"pytest exit {code}"])[-1][:200]
    found: dict[str, str] = {}
    for case in ElementTree.parse(report).getroot().iter("testcase"):
        # a collection error: a testcase named after the module, with no class
        error = case.find("error")
        if error is not None and (not case.get("classname") or case.get("name") == test_file.stem):
            said = [line[1:].strip() for line in (error.text or "").splitlines() if line.startswith("E ")]
            return (said[-1] if said else error.get("message") or "a collection error")[:200]
        status = ("failed" if case.find("failure") is not None or case.find("error") is not None
                  else "skipped" if case.find("skipped") is not None else "passed")
        found[case.get("name", "")] = status  # JUnit XML's testcase always has its name
    return found or (printed.strip().splitlines() or ["no test collected"])[-1][:200]
