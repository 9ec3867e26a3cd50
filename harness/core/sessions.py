"""What a matrix session does, in one place for the noxfile, repro, bisect, the benchmarks and the
harness's tests: where its venv is, what it installs, the compile-cache environment it runs with,
and the pytest command that runs its cases."""

from __future__ import annotations

import importlib.util
import json
import os
import pathlib
import shutil
import subprocess
import sys

from harness import matrix

ROOT = pathlib.Path(__file__).resolve().parent.parent
CASES = "cases/"
STAMP = "harness-pins.json"
# Environment variables that change what uv (or pip, without uv) installs. A session installs
# with them as they are, says so, and records them: in the venv's stamp (a change rebuilds it)
# and in the results' environment record.
INSTALL_VARIABLES = (
    "UV_INDEX", "UV_DEFAULT_INDEX", "UV_INDEX_URL", "UV_EXTRA_INDEX_URL", "UV_FIND_LINKS", "UV_NO_INDEX",
    "UV_INDEX_STRATEGY", "UV_TORCH_BACKEND", "UV_PRERELEASE", "UV_RESOLUTION", "UV_EXCLUDE_NEWER", "UV_OVERRIDE",
    "UV_CONSTRAINT", "UV_BUILD_CONSTRAINT", "UV_NO_BINARY", "UV_NO_BINARY_PACKAGE", "UV_NO_BUILD",
    "UV_NO_BUILD_PACKAGE", "UV_CONFIG_FILE", "UV_NO_CONFIG", "UV_PYTHON_PREFERENCE",  # not UV_PYTHON: nox sets it
    "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS", "PIP_NO_INDEX", "PIP_PRE", "PIP_CONSTRAINT",
    "PIP_ONLY_BINARY", "PIP_NO_BINARY", "PIP_CONFIG_FILE",
)


def harness_requirements() -> list[str]:
    """What every case session installs beside its pins: the `session` extra of pyproject.toml,
    the one place the tools' versions are bounded."""
    try:
        import tomllib
    except ImportError:  # Python < 3.11
        import tomli as tomllib
    table = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return list(table["project"]["optional-dependencies"]["session"])


HARNESS_REQUIREMENTS = harness_requirements()


def install_environment(environ=None) -> dict:
    """The set variables of INSTALL_VARIABLES."""
    environ = os.environ if environ is None else environ
    return {name: environ[name] for name in INSTALL_VARIABLES if environ.get(name)}


# --- where a CPU session's torch comes from ---------------------------------------------------------

# PyTorch's index of CPU-only wheels (0.7 GB installed, against 4.6 GB for the registry's CUDA build,
# which also runs on CPU). uv's `--torch-backend cpu` reaches the same wheels but cannot be pointed at
# a mirror; this variable can (a company mirror, the tests' index on 127.0.0.1).
CPU_INDEX = "https://download.pytorch.org/whl/cpu"
CPU_INDEX_ENV = "HARNESS_CPU_INDEX"
TORCH_WHEEL_FILE = "harness-torch-wheel.json"  # in the venv: which build it got, for the environment record
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


def installed_torch_wheel(prefix: os.PathLike | None = None) -> dict | None:
    """What torch_wheel() chose when the venv at `prefix` (default: the running one) was built."""
    path = pathlib.Path(prefix or sys.prefix) / TORCH_WHEEL_FILE
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


class SessionError(Exception):
    """A session's environment cannot be found or built."""


# --- the venv ---------------------------------------------------------------------------------------

def _runs(command: str) -> bool:
    try:
        return subprocess.run([command, "-c", ""], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def find_interpreters(versions) -> None:
    """Make `pythonX.Y` of every version the matrix names findable on PATH for nox and uv, which
    must not download CPython: where the one on PATH does not run (pyenv's shims answer only for
    the versions pyenv has activated), put an interpreter pyenv installed in front."""
    pyenv = pathlib.Path(os.environ.get("PYENV_ROOT") or pathlib.Path.home() / ".pyenv") / "versions"
    for version in sorted(set(versions)):
        command = shutil.which(f"python{version}")
        if command and _runs(command):
            continue
        installed = sorted(pyenv.glob(f"{version}.*/bin/python{version}"))
        if installed:
            os.environ["PATH"] = f"{installed[-1].parent}{os.pathsep}{os.environ.get('PATH', '')}"


def default_envdir() -> pathlib.Path:
    return ROOT / ".nox"


def venv_dir(session: str, envdir: os.PathLike | None = None) -> pathlib.Path:
    return pathlib.Path(envdir or default_envdir()) / session


def venv_python(session: str, envdir: os.PathLike | None = None) -> pathlib.Path:
    return venv_dir(session, envdir) / "bin" / "python"


def pins_stamp(spec: matrix.Session, wheel: dict | None = None) -> str:
    """What a session's venv was built from (`wheel`: torch_wheel()'s choice, its reason aside); a
    venv whose stamp matches is reused as it is."""
    chosen = {k: v for k, v in (wheel or {}).items() if k != "reason"}
    return json.dumps({"requirements": spec.requirements, "index": spec.index_url, "python": spec.python,
                       "harness": HARNESS_REQUIREMENTS, "install_environment": install_environment(),
                       "torch_wheel": chosen}, sort_keys=True)


def compile_cache_env(venv: os.PathLike) -> dict:
    """Inductor's and Triton's caches live in the session's venv: a re-run reuses compiled
    kernels, and a rebuilt venv (changed pins) starts without stale ones."""
    root = pathlib.Path(venv)
    return {
        "TORCHINDUCTOR_CACHE_DIR": str(root / "inductor-cache"),
        "TRITON_CACHE_DIR": str(root / "triton-cache"),
        "TORCHINDUCTOR_FX_GRAPH_CACHE": "1",  # off by default before torch 2.4
    }


def nox_command() -> list[str]:
    if importlib.util.find_spec("nox") is not None:
        return [sys.executable, "-m", "nox"]
    found = shutil.which("nox")
    if found:
        return [found]
    raise SessionError("nox is not installed here: `python -m pip install nox uv`")


def install_steps(spec: matrix.Session, wheel: dict) -> list[list[str]]:
    """The arguments of each install command that builds the session's venv, in order (the noxfile's
    `session.install`, or `uv pip install` for an environment outside the table). A PyTorch index
    is used alone for torch (and, but for the CPU index, what it needs), then the registry for the
    rest: no command ever mixes two indexes."""
    pre = ["--pre"] if spec.nightly else []
    if wheel["build"] == CPU_BUILD:
        # torch alone from the CPU index; the registry then supplies what it needs and the rest, the
        # installed +cpu build satisfying the pin.
        return [["--index-url", wheel["index"], "--no-deps", spec.requirements[0]],
                [*spec.requirements, *HARNESS_REQUIREMENTS]]
    if spec.index_url:
        torch_pin = spec.requirements[0]
        # torch stays pinned (a nightly as installed) while the registry supplies the rest.
        torch = [] if spec.nightly else [torch_pin]
        return [[*pre, "--index-url", spec.index_url, torch_pin],
                [*torch, *spec.requirements[1:], *HARNESS_REQUIREMENTS]]
    return [[*pre, *spec.requirements, *HARNESS_REQUIREMENTS]]


def build_venv(spec: matrix.Session, envdir: os.PathLike | None = None,
               location: os.PathLike | None = None) -> pathlib.Path:
    """A venv for an environment outside the table (a row's pins with another Lightning, for a
    bisection along Lightning), built as its row's session builds its own: the same install steps
    (at `location`, default the envdir's folder of `spec.name`)."""
    from harness.lightning import uv

    location = pathlib.Path(location) if location else venv_dir(spec.name, envdir)
    wheel = torch_wheel(spec)
    find_interpreters([spec.python])
    print(f"building the environment {location} (torch: the {wheel['build']} build)", file=sys.stderr, flush=True)
    commands = [[uv(), "venv", "--quiet", "--allow-existing", "--python", f"python{spec.python}", str(location)]]
    commands += [[uv(), "pip", "install", "--quiet", "--python", str(location / "bin" / "python"), *step]
                 for step in install_steps(spec, wheel)]
    for command in commands:
        done = subprocess.run(command, cwd=ROOT, stdout=sys.stderr, stderr=sys.stderr,
                              env={**os.environ, "UV_PYTHON_DOWNLOADS": "never"})
        if done.returncode != 0:
            raise SessionError(f"building {location} failed (exit {done.returncode}): {' '.join(command[:4])} ...")
    (location / TORCH_WHEEL_FILE).write_text(json.dumps(wheel))
    (location / STAMP).write_text(pins_stamp(spec, wheel))
    return location / "bin" / "python"


def lightning_venv(row: matrix.Session, envdir: os.PathLike | None = None) -> pathlib.Path:
    """Where a bisection or sweep along Lightning at `row` switches Lightning releases: one venv per row."""
    return venv_dir(f"{row.name}_lightning_axis", envdir)


def with_lightning(spec: matrix.Session, location: os.PathLike) -> tuple[pathlib.Path, bool]:
    """(the python of the venv at `location` holding `spec`'s pins, whether it was built now). Built
    from the row's install steps when missing; else its Lightning is switched in place to `spec`'s
    (a pure-Python package: seconds, where a build takes a minute), so that a bisection along
    Lightning builds one environment whatever the number of releases. The switch is checked against
    the pins before anything runs in it."""
    from harness.lightning import uv

    location = pathlib.Path(location)
    python = location / "bin" / "python"
    if not python.exists():
        build_venv(spec, location=location)
        return python, True
    wheel = installed_torch_wheel(location) or torch_wheel(spec)
    wanted = pins_stamp(spec, wheel)
    stamp = location / STAMP
    if not (stamp.is_file() and stamp.read_text() == wanted):
        print(f"switching {location.name} to lightning {spec.lightning}", file=sys.stderr, flush=True)
        command = [uv(), "pip", "install", "--quiet", "--python", str(python), *install_steps(spec, wheel)[-1]]
        done = subprocess.run(command, cwd=ROOT, stdout=sys.stderr, stderr=sys.stderr,
                              env={**os.environ, "UV_PYTHON_DOWNLOADS": "never"})
        if done.returncode != 0:
            raise SessionError(f"switching {location} to lightning {spec.lightning} failed (exit {done.returncode})")
        stamp.write_text(wanted)
    found = subprocess.run([str(python), "-c", "import importlib.metadata as m; print(*(m.version(d) for d in "
                            "('torch', 'lightning', 'pytorch-lightning')))"], capture_output=True, text=True)
    versions = found.stdout.split()
    if len(versions) != 3 or versions[0].split("+")[0] != spec.torch or versions[1:] != [spec.lightning] * 2:
        raise SessionError(f"{location} holds torch, lightning, pytorch-lightning {' '.join(versions) or '(unreadable)'}"
                           f", not the pins torch {spec.torch}, lightning {spec.lightning}")
    return python, False


def ensure_venv(session: str | matrix.Session, envdir: os.PathLike | None = None,
                build: bool = True) -> pathlib.Path | None:
    """The python of `session`'s venv, built with `nox -s SESSION --install-only` when missing
    (None instead when `build` is false); an environment outside the table (given as its spec) is
    built by build_venv."""
    outside = isinstance(session, matrix.Session)  # a spec: an environment outside the table
    spec = session if outside else matrix.find(session)
    python = venv_python(spec.name, envdir)
    if python.exists():
        return python
    if not build:
        return None
    if outside:
        return build_venv(spec, envdir)
    command = nox_command() + ["-f", str(ROOT / "noxfile.py"), "-s", spec.name, "--install-only",
                               "--envdir", str(pathlib.Path(envdir or default_envdir()))]
    print(f"building the environment of {spec.name}: {' '.join(command)}", file=sys.stderr, flush=True)
    done = subprocess.run(command, cwd=ROOT, stdout=sys.stderr, stderr=sys.stderr)
    if done.returncode != 0 or not python.exists():
        raise SessionError(f"`nox -s {spec.name} --install-only` failed (exit {done.returncode})")
    return python


# --- the command ------------------------------------------------------------------------------------

# pytest options whose value is the next argument: that value is not a path to run.
_TAKES_VALUE = {"-k", "-m", "-p", "-c", "-o", "-n", "-W", "--maxfail", "--timeout", "--timeout-method",
                "--results-dir", "--session-name", "--case-reruns", "--memory-limit", "--isolation", "--deselect", "--ignore",
                "--ignore-glob", "--rootdir", "--basetemp", "--durations", "--junitxml", "--junit-xml",
                "--dist", "--max-worker-restart", "--capture", "--tb", "-r", "--log-level", "--confcutdir"}


def targets_in(args) -> list[str]:
    """The files, directories and node ids among pytest arguments."""
    found, skip_next = [], False
    for arg in args:
        if skip_next:
            skip_next = False
            continue
        if arg.startswith("-"):
            skip_next = arg in _TAKES_VALUE
            continue
        path = arg.split("::", 1)[0]
        if (ROOT / path).exists() or pathlib.Path(path).exists():
            found.append(arg)
    return found


def case_options(spec: matrix.Session) -> list[str]:
    """How a session runs its cases: in an xdist worker, so that a crash or a hang costs one
    case and not the session (a dead worker is replaced, and xdist's `load` scheduling does
    not hand the case it died on to the next one; its file-grouping modes do, see
    pytest-dev/pytest-xdist#1371), each attempt of a case in a child forked from the warm worker
    (harness.isolation: no case meets what an earlier one changed), within the row's time limit
    (pytest-timeout's thread method also ends hangs in native code)."""
    return [
        "-p", "harness.plugin",  # cases/conftest.py loads it too: the command does not depend on that
        "--isolation=fork",
        "-p", "xdist", "-n", os.environ.get("HARNESS_WORKERS", "1"), "--dist=load",
        "--max-worker-restart=100000",  # each crash costs one case: bounded by the cases
        "--capture=tee-sys",  # sys-level capture only: a dying worker's output reaches its log
        f"--timeout={spec.case_timeout}", "--timeout-method=thread",
        "-rfEX",
        *(["--lightning-cases"] if spec.lightning_of else []),  # the Lightning axis: only what Lightning touches
    ]


COLLECT_ONLY = ("--collect-only", "--co")
FRESH = "--fresh"  # after `--`: reuse nothing from the last run (harness/reuse.py)


def collect_only(args) -> bool:
    """The session builds its environment, checks its pins and collects its cases, running none:
    how a CUDA session is checked on a machine without a GPU."""
    return any(arg in COLLECT_ONLY for arg in args)


def pytest_args(spec: matrix.Session, args=()) -> list[str]:
    """`python` arguments of the session's pytest run: every case file, unless `args` name
    files or node ids, which then narrow the run to them."""
    args = list(args)
    return ["-m", "pytest", *([] if targets_in(args) else [CASES]), *case_options(spec), *args]


def run_env(spec: matrix.Session, venv: os.PathLike) -> dict:
    """Environment variables of the session's pytest run."""
    return {"HARNESS_SESSION": spec.name, **compile_cache_env(venv)}
