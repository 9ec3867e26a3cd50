"""What a session's environment installs besides its pins and records inside itself: read in the venv (the
plugin's environment record, the pin check) as well as by the driver that builds it (harness.core.venvs)."""

from __future__ import annotations

import json
import os
import pathlib
import sys

from harness.core import paths

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10
    import tomli as tomllib

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
    table = tomllib.loads((paths.ROOT / "pyproject.toml").read_text())
    return list(table["project"]["optional-dependencies"]["session"])


HARNESS_REQUIREMENTS = harness_requirements()


def install_environment(environ=None) -> dict:
    """The set variables of INSTALL_VARIABLES."""
    environ = os.environ if environ is None else environ
    return {name: environ[name] for name in INSTALL_VARIABLES if environ.get(name)}


TORCH_WHEEL_FILE = "harness-torch-wheel.json"  # in the venv: which build it got, for the environment record


def installed_torch_wheel(prefix: os.PathLike | None = None) -> dict | None:
    """What harness.core.venvs.torch_wheel() chose when the venv at `prefix` (default: the running one) was built."""
    path = pathlib.Path(prefix or sys.prefix) / TORCH_WHEEL_FILE
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None
