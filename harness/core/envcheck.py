"""Checks that an environment holds what its session pins, and that a CUDA session has a GPU."""

from __future__ import annotations

import shutil
import subprocess

from packaging.requirements import InvalidRequirement, Requirement

from harness.core import versions
from harness.core.errors import BadInput
from harness.core.installs import HARNESS_REQUIREMENTS
from harness.core.matrix import Session


class EnvironmentMismatch(BadInput):
    """The environment does not match its session's pins."""


def host_gpus() -> list[str]:
    """GPUs `nvidia-smi -L` lists; empty where there is no driver or no GPU."""
    if not shutil.which("nvidia-smi"):
        return []
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [line for line in out.stdout.splitlines() if line.startswith("GPU")] if out.returncode == 0 else []


def gpu_memory_gib() -> float | None:
    """The memory of the GPU that cases use (`cuda`, the first one), from `nvidia-smi`; None where
    there is none."""
    if not shutil.which("nvidia-smi"):
        return None
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=memory.total", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    first = (out.stdout.split() or [""])[0] if out.returncode == 0 else ""
    try:
        return float(first) / 1024  # MiB
    except ValueError:
        return None


def require_gpu(session: Session) -> None:
    if session.device == "cuda" and not host_gpus():
        raise EnvironmentMismatch(
            f"session {session.name} runs CUDA cases but this machine has no GPU "
            "(nvidia-smi lists none); run a cpu_* session instead"
        )


def installed(cuda: bool = True) -> dict:
    """What matters of the running interpreter's environment, without importing Lightning.
    Versions come from package metadata; only the CUDA facts (cuda=True) import torch."""
    found = {
        "torch": versions.installed("torch"),
        "lightning": versions.installed("lightning"),
        "pytorch-lightning": versions.installed("pytorch-lightning"),
    }
    if cuda:
        try:
            import torch
        except ImportError:  # no torch here (the project's own venv): a mismatch, not a traceback
            return {**found, "torch": None, "cuda": None, "cuda_available": False}
        found.update(torch=torch.__version__, cuda=torch.version.cuda, cuda_available=torch.cuda.is_available())
    return found


def normal_name(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def unmet_requirements(requirements, have: dict) -> list[tuple[str, Requirement | None]]:
    """Each of `requirements` (PEP 508 text) that the distributions `have` (name -> version, or None
    where missing) do not satisfy, with its parsed form (None: the text cannot be read). Markers that do
    not apply to this interpreter leave a requirement out."""
    have = {normal_name(name): version for name, version in have.items()}
    found: list[tuple[str, Requirement | None]] = []
    for text in requirements:
        try:
            wanted = Requirement(text)
        except InvalidRequirement:
            found.append((text, None))
            continue
        if wanted.marker is not None and not wanted.marker.evaluate():
            continue
        version = have.get(normal_name(wanted.name))
        if version is None or (wanted.specifier and not wanted.specifier.contains(version, prereleases=True)):
            found.append((text, wanted))
    return found


def unmet(requirements, have: dict) -> list[str]:
    """unmet_requirements, each as `NAME is VERSION (needs REQUIREMENT)`."""
    have_by_name = {normal_name(name): version for name, version in have.items()}
    return [f"cannot read the requirement {text!r}" if wanted is None else
            f"{wanted.name} is {have_by_name.get(normal_name(wanted.name)) or 'not installed'} (needs {text})"
            for text, wanted in unmet_requirements(requirements, have)]


def tools() -> dict:
    """The installed versions of the tools every session runs with (the `session` extra)."""
    return {Requirement(text).name: versions.installed(Requirement(text).name) for text in HARNESS_REQUIREMENTS}


def mismatches(session: Session, found: dict, gpu: bool = True) -> list[str]:
    problems = []
    if session.torch and not versions.same_release(found["torch"], session.torch):
        problems.append(f"torch is {found['torch'] or 'not installed'}, the session pins {session.torch}")
    if session.nightly and found["torch"] and not versions.is_prerelease(found["torch"]):
        problems.append(f"torch is {found['torch']}, the nightly session needs a pre-release")
    for dist in ("lightning", "pytorch-lightning"):
        if not versions.same_release(found[dist], session.lightning):
            problems.append(f"{dist} is {found[dist] or 'not installed'}, the session pins {session.lightning}")
    if session.cuda_major is not None:
        cuda = found["cuda"]
        if cuda is None or versions.release(cuda)[0] != session.cuda_major:
            problems.append(f"torch is built for CUDA {cuda or 'none (CPU build)'}, "
                            f"the session pins CUDA {session.cuda_major}")
        elif gpu and not found["cuda_available"]:
            problems.append("torch.cuda.is_available() is False: a CUDA session needs a working GPU")
    if "tools" in found:
        problems += unmet(HARNESS_REQUIREMENTS, found["tools"])
    return problems


def check(session: Session, gpu: bool = True) -> dict:
    """The installed versions; EnvironmentMismatch with every mismatch on one line. A CPU
    session pins no CUDA, so its check does not import torch. `gpu=False`: a CUDA session on a
    machine without a GPU, checked short of running kernels (the wheel's CUDA major still)."""
    found = {**installed(cuda=session.cuda_major is not None), "tools": tools()}
    problems = mismatches(session, found, gpu)
    if problems:
        raise EnvironmentMismatch(f"environment does not match session {session.name}: " + "; ".join(problems))
    return found
