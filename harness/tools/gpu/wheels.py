"""The wheels a CUDA row needs beside the torch a GPU machine already has: the row's Lightning pins and the
session's tools (the `session` extra of pyproject.toml), derived from the matrix and the extra, never listed
by hand. Downloaded here, where a registry answers; installed there, only where what is installed does not
meet the requirement, into a folder of its own that goes first on PYTHONPATH (the machine's environment is
left as it was)."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename

from harness.core import envcheck, matrix, versions
from harness.core.errors import BadInput
from harness.core.installs import HARNESS_REQUIREMENTS

NOT_CARRIED = {"pip"}  # every Python environment has one; collect_env only runs it


def requirements(spec: matrix.Session) -> list[str]:
    """What the row's environment must hold beside torch: its Lightning pins, then the session's tools."""
    pins = [f"{name}=={spec.lightning}" for name in ("lightning", "pytorch-lightning")] if spec.lightning else []
    tools = [text for text in HARNESS_REQUIREMENTS if canonicalize_name(Requirement(text).name) not in NOT_CARRIED]
    return pins + tools


def download(spec: matrix.Session, python: str, dest: pathlib.Path) -> list[pathlib.Path]:
    """The wheels of requirements(spec) for CPython `python` (e.g. 3.12), without their dependencies (a
    GPU machine has torch and what Lightning needs of it), into `dest`."""
    if not python.replace(".", "").isdigit() or python.count(".") != 1:
        raise BadInput(f"--python {python!r}: a Python version such as 3.12")
    dest.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
               "--python-version", python, "--implementation", "cp", "--dest", str(dest), *requirements(spec)]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise BadInput(f"pip download failed: {(done.stderr.strip().splitlines() or ['?'])[-1]}")
    return sorted(dest.glob("*.whl"))


def _wheels_by_name(folder: pathlib.Path) -> dict[str, list[tuple[str, pathlib.Path]]]:
    found: dict[str, list[tuple[str, pathlib.Path]]] = {}
    for path in sorted(folder.glob("*.whl")):
        name, version, _, _ = parse_wheel_filename(path.name)
        found.setdefault(canonicalize_name(name), []).append((str(version), path))
    return found


def to_install(spec: matrix.Session, folder: pathlib.Path,
               have: dict | None = None) -> tuple[list[pathlib.Path], list[str]]:
    """(the carried wheels this environment needs: one per requirement it does not meet, what is still
    unmet after them). `have`: name -> installed version (default: this interpreter's)."""
    wanted = requirements(spec)
    have = have if have is not None else \
        {Requirement(text).name: versions.installed(Requirement(text).name) for text in wanted}
    wheels, missing = _wheels_by_name(folder), []
    chosen = []
    for text, requirement in envcheck.unmet_requirements(wanted, have):
        if requirement is None:
            missing.append(f"cannot read the requirement {text!r}")
            continue
        fits = [path for version, path in wheels.get(canonicalize_name(requirement.name), [])
                if requirement.specifier.contains(version, prereleases=True)]
        if fits:
            chosen.append(fits[-1])
        else:
            missing.append(f"{requirement.name} {have.get(requirement.name) or 'not installed'} (needs {text})")
    return chosen, missing


def install(spec: matrix.Session, folder: os.PathLike, site: os.PathLike) -> list[str]:
    """Install into `site` the carried wheels in `folder` that this environment needs, and put `site` first
    on this process's PYTHONPATH (its children inherit it). The names installed; BadInput naming what no
    carried wheel provides."""
    folder, site = pathlib.Path(folder), pathlib.Path(site)
    if not folder.is_dir():
        raise BadInput(f"--wheels {folder}: no such folder")
    chosen, missing = to_install(spec, folder)
    if missing:
        raise BadInput(f"{spec.name}: this environment does not meet {'; '.join(missing)}, "
                       f"and {folder} has no wheel for it")
    if chosen:
        done = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-index", "--no-deps",
                               "--no-compile", "--upgrade", "--target", str(site), *map(str, chosen)],
                              capture_output=True, text=True)
        if done.returncode != 0:
            why = (done.stderr.strip().splitlines() or ["?"])[-1]
            raise BadInput(f"installing {len(chosen)} carried wheel(s) failed: {why}")
    path = os.environ.get("PYTHONPATH", "")
    if str(site) not in path.split(os.pathsep):
        os.environ["PYTHONPATH"] = os.pathsep.join([str(site), *([path] if path else [])])
    return [path.name for path in chosen]
