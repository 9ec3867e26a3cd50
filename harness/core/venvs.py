"""A session's environment, in one place for the noxfile, the tools, the benchmarks and the harness's
tests: where its venv is, what it installs and from where (the torch build), how it is built and
reused (its stamp), and an environment outside the table built as its row's session builds its own."""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import pathlib
import shutil
import subprocess
import sys

from harness.core import matrix, paths, versions
from harness.core.installs import (
    HARNESS_REQUIREMENTS,
    TORCH_WHEEL_FILE,
    install_environment,
    installed_torch_wheel,
)

STAMP = "harness-pins.json"


# --- where a CPU session's torch comes from ---------------------------------------------------------

# PyTorch's index of CPU-only wheels (0.7 GB installed, against 4.6 GB for the registry's CUDA build,
# which also runs on CPU). uv's `--torch-backend cpu` reaches the same wheels but cannot be pointed at
# a mirror; this variable can (a company mirror, the tests' index on 127.0.0.1).
CPU_INDEX = "https://download.pytorch.org/whl/cpu"
CPU_INDEX_ENV = "HARNESS_CPU_INDEX"
CPU_BUILD, REGISTRY_BUILD = "cpu", "registry default"
# `registry`: a CPU session takes the registry's build even where the CPU index has one (to compare
# like with like against a table measured on that build).
TORCH_BUILD_ENV = "HARNESS_TORCH_BUILD"


def cpu_index() -> str:
    return (os.environ.get(CPU_INDEX_ENV) or CPU_INDEX).rstrip("/")


def _index_lists(index: str, torch: str, python: str) -> str | None:
    """None when the PEP 503 index lists a CPU wheel of `torch` for `python`; else why not."""
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(f"{index}/torch/", timeout=15) as response:
            page = response.read().decode("utf-8", "replace")
    except (urllib.error.URLError, OSError, ValueError) as exc:
        return f"{index} is not reachable ({getattr(exc, 'reason', exc)})"
    tag = "cp" + python.replace(".", "")
    if not any(f"torch-{torch}{plus}cpu-{tag}-" in page for plus in ("+", "%2B", "%2b")):
        return f"{index} has no CPU wheel of torch {torch} for Python {python}"
    return None


def torch_wheel(spec: matrix.Session) -> dict:
    """Where the session's torch comes from, decided here and only here: a CPU session with a torch
    pin takes PyTorch's CPU-only build when the CPU index is reachable and lists it, else the
    registry's default build; every other session takes what its row says."""
    if spec.device != "cpu" or spec.nightly or spec.index_url or not spec.torch:
        return {"build": spec.index or REGISTRY_BUILD, "index": spec.index_url}
    if os.environ.get(TORCH_BUILD_ENV) == "registry":
        return {"build": REGISTRY_BUILD, "index": None, "reason": f"{TORCH_BUILD_ENV}=registry"}
    why_not = _index_lists(cpu_index(), spec.torch, spec.python)
    if why_not:
        return {"build": REGISTRY_BUILD, "index": None, "reason": why_not}
    return {"build": CPU_BUILD, "index": cpu_index()}


class SessionError(Exception):
    """A session's environment cannot be found or built."""


@functools.lru_cache(maxsize=None)
def uv() -> str:
    """uv's binary: the `uv` package's, else one on PATH."""
    try:
        import uv as uv_package

        return uv_package.find_uv_bin()
    except (ImportError, FileNotFoundError):
        found = shutil.which("uv")
        if not found:
            raise SessionError("uv is not installed here: `python -m pip install uv`") from None
        return found


# --- the venv ---------------------------------------------------------------------------------------

def _runs(command: str) -> bool:
    try:
        return subprocess.run([command, "-c", ""], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def find_interpreters(pythons) -> None:
    """Make `pythonX.Y` of every version the matrix names findable on PATH for nox and uv, which
    must not download CPython: where the one on PATH does not run (pyenv's shims answer only for
    the versions pyenv has activated), put an interpreter pyenv installed in front."""
    pyenv = pathlib.Path(os.environ.get("PYENV_ROOT") or pathlib.Path.home() / ".pyenv") / "versions"
    for version in sorted(set(pythons)):
        command = shutil.which(f"python{version}")
        if command and _runs(command):
            continue
        installed = sorted(pyenv.glob(f"{version}.*/bin/python{version}"))
        if installed:
            os.environ["PATH"] = f"{installed[-1].parent}{os.pathsep}{os.environ.get('PATH', '')}"


def venv_dir(session: str, envdir: os.PathLike | None = None) -> pathlib.Path:
    return pathlib.Path(envdir or paths.default_envdir()) / session


def python_in(venv: os.PathLike) -> pathlib.Path:
    """A venv's interpreter."""
    return pathlib.Path(venv) / "bin" / "python"


def venv_of(python: os.PathLike) -> pathlib.Path:
    """The venv an interpreter of python_in() belongs to (where its compile caches and stamps live)."""
    return pathlib.Path(python).parent.parent


def venv_python(session: str, envdir: os.PathLike | None = None) -> pathlib.Path:
    return python_in(venv_dir(session, envdir))


def pins_stamp(spec: matrix.Session, wheel: dict | None = None) -> str:
    """What a session's venv was built from (`wheel`: torch_wheel()'s choice, its reason aside); a
    venv whose stamp matches is reused as it is."""
    chosen = {k: v for k, v in (wheel or {}).items() if k != "reason"}
    return json.dumps({"requirements": spec.requirements, "index": spec.index_url, "python": spec.python,
                       "harness": HARNESS_REQUIREMENTS, "install_environment": install_environment(),
                       "torch_wheel": chosen}, sort_keys=True)


def nox_command() -> list[str]:
    if importlib.util.find_spec("nox") is not None:
        return [sys.executable, "-m", "nox"]
    found = shutil.which("nox")
    if found:
        return [found]
    raise SessionError("nox is not installed here: `python -m pip install nox uv`")


def install_steps(spec: matrix.Session, wheel: dict, tools=None) -> list[list[str]]:
    """The arguments of each install command that builds the session's venv, in order (the noxfile's
    `session.install`, or `uv pip install` for an environment outside the table); `tools`: what is
    installed beside the pins (default HARNESS_REQUIREMENTS; the harness's own test session gives
    the project itself). A PyTorch index is used alone for torch (and, but for the CPU index, what it
    needs), then the registry for the rest: no command ever mixes two indexes."""
    tools = HARNESS_REQUIREMENTS if tools is None else list(tools)
    pre = ["--pre"] if spec.nightly else []
    if wheel["build"] == CPU_BUILD:
        # torch alone from the CPU index; the registry then supplies what it needs and the rest, the
        # installed +cpu build satisfying the pin.
        return [["--index-url", wheel["index"], "--no-deps", spec.requirements[0]], [*spec.requirements, *tools]]
    if spec.index_url:
        torch_pin = spec.requirements[0]
        # torch stays pinned (a nightly as installed) while the registry supplies the rest.
        torch = [] if spec.nightly else [torch_pin]
        return [[*pre, "--index-url", spec.index_url, torch_pin], [*torch, *spec.requirements[1:], *tools]]
    return [[*pre, *spec.requirements, *tools]]


def describe_wheel(wheel: dict) -> str:
    """What a session logs of torch_wheel()'s choice."""
    return (f"torch: the {wheel['build']} build"
            + (f" from {wheel['index']}" if wheel["index"] else " from the registry")
            + (f" ({wheel['reason']})" if wheel.get("reason") else ""))


def install_pins(session, spec: matrix.Session) -> None:
    """Install the session's pins into the venv nox built for them (`session`: the nox session),
    reusing it while its stamp is unchanged (a nightly always looks for a newer wheel)."""
    venv = session.virtualenv
    stamp = pathlib.Path(venv.location) / STAMP
    wheel = torch_wheel(spec)
    wanted = pins_stamp(spec, wheel)
    if stamp.is_file():
        if stamp.read_text() == wanted and not spec.nightly:
            session.log(f"pins unchanged since this environment was built: reusing it (torch: {wheel['build']} build)")
            return
        session.log("pins changed: rebuilding the environment")
        venv.reuse_existing = False
        venv.create()
    session.log(describe_wheel(wheel))
    for step in install_steps(spec, wheel):
        session.install(*step)
    (pathlib.Path(venv.location) / TORCH_WHEEL_FILE).write_text(json.dumps(wheel))
    stamp.write_text(wanted)


def build_venv(spec: matrix.Session, envdir: os.PathLike | None = None,
               location: os.PathLike | None = None) -> pathlib.Path:
    """A venv for an environment outside the table (a row's pins with another Lightning, for a
    bisection along Lightning), built as its row's session builds its own: the same install steps
    (at `location`, default the envdir's folder of `spec.name`)."""
    location = pathlib.Path(location) if location else venv_dir(spec.name, envdir)
    wheel = torch_wheel(spec)
    find_interpreters([spec.python])
    print(f"building the environment {location} (torch: the {wheel['build']} build)", file=sys.stderr, flush=True)
    commands = [[uv(), "venv", "--quiet", "--allow-existing", "--python", f"python{spec.python}", str(location)]]
    commands += [[uv(), "pip", "install", "--quiet", "--python", str(python_in(location)), *step]
                 for step in install_steps(spec, wheel)]
    for command in commands:
        done = subprocess.run(command, cwd=paths.ROOT, stdout=sys.stderr, stderr=sys.stderr,
                              env={**os.environ, "UV_PYTHON_DOWNLOADS": "never"})
        if done.returncode != 0:
            raise SessionError(f"building {location} failed (exit {done.returncode}): {' '.join(command[:4])} ...")
    (location / TORCH_WHEEL_FILE).write_text(json.dumps(wheel))
    (location / STAMP).write_text(pins_stamp(spec, wheel))
    return python_in(location)


def lightning_venv(row: matrix.Session, envdir: os.PathLike | None = None) -> pathlib.Path:
    """Where a bisection or sweep along Lightning at `row` switches Lightning releases: one venv per row."""
    return venv_dir(matrix.derived_name(row, "lightning_axis"), envdir)


def with_lightning(spec: matrix.Session, location: os.PathLike) -> tuple[pathlib.Path, bool]:
    """(the python of the venv at `location` holding `spec`'s pins, whether it was built now). Built
    from the row's install steps when missing; else its Lightning is switched in place to `spec`'s
    (a pure-Python package: seconds, where a build takes a minute), so that a bisection along
    Lightning builds one environment whatever the number of releases. The switch is checked against
    the pins before anything runs in it."""
    location = pathlib.Path(location)
    python = python_in(location)
    if not python.exists():
        build_venv(spec, location=location)
        return python, True
    wheel = installed_torch_wheel(location) or torch_wheel(spec)
    wanted = pins_stamp(spec, wheel)
    stamp = location / STAMP
    if not (stamp.is_file() and stamp.read_text() == wanted):
        print(f"switching {location.name} to lightning {spec.lightning}", file=sys.stderr, flush=True)
        command = [uv(), "pip", "install", "--quiet", "--python", str(python), *install_steps(spec, wheel)[-1]]
        done = subprocess.run(command, cwd=paths.ROOT, stdout=sys.stderr, stderr=sys.stderr,
                              env={**os.environ, "UV_PYTHON_DOWNLOADS": "never"})
        if done.returncode != 0:
            raise SessionError(f"switching {location} to lightning {spec.lightning} failed (exit {done.returncode})")
        stamp.write_text(wanted)
    torch = spec.torch
    if torch is None:  # the nightly: no torch release to check (a row along Lightning is never the nightly)
        raise SessionError(f"{location} cannot be checked against {spec.name}'s pins: it pins no torch release")
    found = subprocess.run([str(python), "-c", "import importlib.metadata as m; print(*(m.version(d) for d in "
                            "('torch', 'lightning', 'pytorch-lightning')))"], capture_output=True, text=True)
    held = found.stdout.split()
    if len(held) != 3 or not all(versions.same_release(have, pin) for have, pin in
                                 zip(held, (torch, spec.lightning, spec.lightning), strict=True)):
        raise SessionError(f"{location} holds torch, lightning, pytorch-lightning {' '.join(held) or '(unreadable)'}"
                           f", not the pins torch {spec.torch}, lightning {spec.lightning}")
    return python, False


def ensure_venv(session: str | matrix.Session, envdir: os.PathLike | None = None,
                build: bool = True) -> pathlib.Path | None:
    """The python of `session`'s venv, built with `nox -s SESSION --install-only` when missing
    (None instead when `build` is false); an environment outside the table (given as its spec) is
    built by build_venv."""
    if isinstance(session, matrix.Session):  # a spec: an environment outside the table
        spec, outside = session, True
    else:
        spec, outside = matrix.find(session), False
    python = venv_python(spec.name, envdir)
    if python.exists():
        return python
    if not build:
        return None
    if outside:
        return build_venv(spec, envdir)
    command = nox_command() + ["-f", str(paths.ROOT / "noxfile.py"), "-s", spec.name, "--install-only",
                               "--envdir", str(pathlib.Path(envdir or paths.default_envdir()))]
    print(f"building the environment of {spec.name}: {' '.join(command)}", file=sys.stderr, flush=True)
    done = subprocess.run(command, cwd=paths.ROOT, stdout=sys.stderr, stderr=sys.stderr)
    if done.returncode != 0 or not python.exists():
        raise SessionError(f"`nox -s {spec.name} --install-only` failed (exit {done.returncode})")
    return python


