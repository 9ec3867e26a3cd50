"""The session matrix: reads harness/core/matrix.toml and derives one session per environment.

A session's name is built here and nowhere else (session_name, and derived_name for an environment
made from a row's session); what a reader needs to know of a session is its `identity`, never its
name parsed back.
"""

from __future__ import annotations

import dataclasses
import difflib
import pathlib
import re
import sys
from typing import Optional, TypedDict

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10
    import tomli as tomllib

from harness.core import limits, versions
from harness.core.errors import BadInput

MATRIX_FILE = pathlib.Path(__file__).with_name("matrix.toml")
PYPI = "pypi"
REGISTRY = "registry"  # the tag of sessions whose torch wheel comes from the package registry
LIGHTNING = "lightning"  # the tag of the sessions of the Lightning axis (each row's newest Lightning)
LIGHTNING_NEWEST = "lightning_newest"  # the label those sessions add to their row's


class MatrixError(BadInput):
    """The matrix table is malformed, or a session name is not in it."""


class Identity(TypedDict):
    """Who a session is (Session.identity), as the environment record carries it: never parsed back out of its name."""
    session: str
    device: str  # "cpu" or "cuda"
    line: str  # the version line it is a step of: "cpu", or "cudaNN" (one per CUDA major)
    row: str  # the torch row: its version pin, or "nightly"
    label: Optional[str]  # a second environment of the row (another Python, extra packages)
    plain: str  # the row's plain session (itself unless labelled)
    lightning_of: Optional[str]  # the Lightning axis: the session whose pins it repeats with newer Lightning


@dataclasses.dataclass(frozen=True)
class Session:
    name: str
    torch: str | None  # exact pin; None for the nightly (newest pre-release)
    lightning: str
    python: str
    device: str  # "cpu" or "cuda"
    cuda_major: int | None  # required CUDA major of the wheel; None: not checked (CPU sessions)
    index: str | None  # name of the wheel index; None: the registry's default
    index_url: str | None
    extra: tuple[str, ...]
    tags: tuple[str, ...]
    nightly: bool = False
    case_timeout: int = limits.DEFAULT_TIME_LIMIT
    label: str | None = None  # a second environment of the same torch row (another Python, extra packages)
    # The Lightning axis: the session of the row (era Lightning) whose pins this one repeats with the
    # newest Lightning that supports its torch; it runs only the cases that use Lightning.
    lightning_of: str | None = None
    # Environment variables the session's cases run with, as the row declares them (a torch cache flag):
    # torch's own defaults otherwise.
    env: tuple[tuple[str, str], ...] = ()

    @property
    def description(self) -> str:
        torch = f"torch {self.torch}" if self.torch else "torch nightly"
        where = "CPU" if self.device == "cpu" else f"CUDA {self.cuda_major} GPU"
        wheel = f"{self.index} index" if self.index else "registry default wheel"
        extra = "".join(f", {pin}" for pin in self.extra if self.label)
        newest = (" (the newest that supports this torch; only the cases that use Lightning)"
                  if self.lightning_of else "")
        return (
            f"Run the cases on {where} with {torch}, Lightning {self.lightning}{newest}, "
            f"Python {self.python}{extra} ({wheel})."
        )

    @property
    def line(self) -> str:
        """The version line the session is a step of: `cpu`, or `cudaNN` (one per CUDA major)."""
        return "cpu" if self.device == "cpu" else f"cuda{self.cuda_major}"

    @property
    def identity(self) -> Identity:
        """What the environment record carries (Identity), so that no reader parses
        the name back."""
        return {"session": self.name, "device": self.device, "line": self.line,
                "row": self.torch or "nightly", "label": self.label,
                "plain": session_name(self.line, self.torch, None), "lightning_of": self.lightning_of}

    @property
    def requirements(self) -> list[str]:
        """What the session's venv installs, pinned."""
        torch = f"torch=={self.torch}" if self.torch else "torch"
        return [
            torch,
            f"lightning=={self.lightning}",
            f"pytorch-lightning=={self.lightning}",  # else `lightning` pulls the newest one
            *self.extra,
        ]


def session_name(line: str, torch: str | None, label: str | None) -> str:
    """cpu_torch25, cuda12_torch213, cpu_torch_nightly, cpu_torch25_py310_pyg: built here only."""
    row = versions.minor_tag(torch) if torch else "_nightly"
    return f"{line}_torch{row}" + (f"_{label}" if label else "")


def _joined(label: str | None, suffix: str) -> str:
    return f"{label}_{suffix}" if label else suffix


def derived_name(row: Session, suffix: str) -> str:
    """The name of an environment made from a row's session: its label with `suffix` added
    (cpu_torch25_lightning_axis, cpu_torch25_py310_pyg_lightning2_5_3)."""
    return session_name(row.line, row.torch, _joined(row.label, suffix))


def with_lightning(row: Session, release: str) -> Session:
    """The row's pins with another Lightning release: an environment outside the table (a bisection
    or a sweep along Lightning), named after its row."""
    return dataclasses.replace(row, name=derived_name(row, "lightning" + release.replace(".", "_")),
                               lightning=release, label=None, lightning_of=None)


def local_session_name(version: str, prefix: str = "local_torch") -> str:
    """The name of an environment outside the matrix, from its version: `local_torch2.15.0_cpu` (a
    plain `pytest cases/`), `bisect-2.14` (an interpreter a bisection is given)."""
    return prefix + re.sub(r"[^0-9A-Za-z.]+", "_", version)


def cuda_major_of(flavour: str, pypi_cuda: str | None) -> int:
    if flavour == PYPI:
        if not pypi_cuda:
            raise MatrixError("a row with cuda = 'pypi' needs pypi_cuda")
        return versions.release(pypi_cuda)[0]
    digits = flavour.rsplit("cu", 1)[-1]
    if not digits.isdigit() or len(digits) < 3:
        raise MatrixError(f"unknown CUDA flavour {flavour!r}: expected 'pypi' or 'cuNNN'")
    return int(digits[:-1])


def lightning_label(label: str | None) -> str:
    """The label of a row's Lightning-axis session: its own label (if any), then `lightning_newest`."""
    return _joined(label, LIGHTNING_NEWEST)


def _require(row: dict, key: str, where: str):
    if key not in row:
        raise MatrixError(f"{where}: missing '{key}'")
    return row[key]


def _seconds(value, where: str) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        raise MatrixError(f"{where}: case_timeout {value!r} is not a number of seconds") from None


def _env(value, where: str) -> tuple[tuple[str, str], ...]:
    if not isinstance(value, dict) or not all(
            isinstance(k, str) and re.fullmatch(r"[A-Z_][A-Z0-9_]*", k) and isinstance(v, str)
            for k, v in value.items()):
        raise MatrixError(f"{where}: env must be a table of NAME = \"text\" (environment variables), not {value!r}")
    return tuple(sorted(value.items()))


def read_table(path: pathlib.Path = MATRIX_FILE) -> dict:
    try:
        return tomllib.loads(pathlib.Path(path).read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise MatrixError(f"cannot read matrix {path}: {exc}") from exc


def load(path: pathlib.Path = MATRIX_FILE) -> list[Session]:
    """Every session of the matrix, in table order (oldest torch first)."""
    table = read_table(path)
    indexes = table.get("indexes", {})
    defaults = table.get("defaults", {})
    rows = table.get("torch", [])
    if not rows:
        raise MatrixError(f"{path}: no [[torch]] rows")

    def index_url(name: str | None, where: str) -> str | None:
        if name is None:
            return None
        if name not in indexes:
            raise MatrixError(f"{where}: index {name!r} is not in [indexes]")
        return indexes[name]

    sessions: list[Session] = []
    plain_rows = [row for row in rows if "label" not in row]  # the oldest and latest are among these
    for position, row in enumerate(rows):
        torch = str(_require(row, "torch", f"row {position + 1}"))
        label = row.get("label")
        if label is not None and not re.fullmatch(r"[a-z0-9]+(_[a-z0-9]+)*", str(label)):
            raise MatrixError(f"torch {torch}: label {label!r} must be lower-case words joined by '_'")
        where = f"torch {torch}" + (f" ({label})" if label else "")
        common = dict(
            torch=torch,
            lightning=str(_require(row, "lightning", where)),
            python=str(_require(row, "python", where)),
            extra=tuple(row.get("extra", ())),
            case_timeout=_seconds(row.get("case_timeout", defaults.get("case_timeout", limits.DEFAULT_TIME_LIMIT)),
                                  where),
            label=label,
            env=_env(row.get("env", {}), where),
        )
        age = ("oldest",) if row is plain_rows[0] else ("latest",) if row is plain_rows[-1] else ()
        era = Session(name=session_name("cpu", torch, label), device="cpu", cuda_major=None, index=None,
                      index_url=None, tags=("cpu", REGISTRY, *age), **common)
        sessions.append(era)
        newest = row.get("lightning_newest")
        if newest is not None and str(newest) != era.lightning:  # else the era session holds both
            sessions.append(dataclasses.replace(
                era, name=session_name("cpu", torch, lightning_label(label)), lightning=str(newest),
                label=lightning_label(label), tags=("cpu", REGISTRY, LIGHTNING), lightning_of=era.name))
        for flavour in row.get("cuda", ()):
            major = cuda_major_of(flavour, row.get("pypi_cuda"))
            index = None if flavour == PYPI else flavour
            sessions.append(
                Session(name=session_name(f"cuda{major}", torch, label), device="cuda", cuda_major=major,
                        index=index, index_url=index_url(index, where),
                        tags=("cuda", *((REGISTRY,) if index is None else ()), *age), **common)
            )

    nightly = table.get("nightly")
    if nightly:
        common = dict(
            torch=None,
            lightning=str(_require(nightly, "lightning", "nightly")),
            python=str(_require(nightly, "python", "nightly")),
            extra=tuple(nightly.get("extra", ())),
            env=_env(nightly.get("env", {}), "nightly"),
            nightly=True,
            case_timeout=_seconds(nightly.get("case_timeout", defaults.get("case_timeout", limits.DEFAULT_TIME_LIMIT)),
                                  "nightly"),
        )
        cpu_index = _require(nightly, "cpu_index", "nightly")
        sessions.append(
            Session(name=session_name("cpu", None, None), device="cpu", cuda_major=None, index=cpu_index,
                    index_url=index_url(cpu_index, "nightly"), tags=("cpu", "nightly"), **common)
        )
        for flavour in nightly.get("cuda", ()):
            major = cuda_major_of(flavour, None)
            sessions.append(
                Session(name=session_name(f"cuda{major}", None, None), device="cuda", cuda_major=major,
                        index=flavour, index_url=index_url(flavour, "nightly"),
                        tags=("cuda", "nightly"), **common)
            )

    names = [s.name for s in sessions]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise MatrixError(f"{path}: sessions defined twice: {', '.join(duplicates)}")
    return sessions


def main_session(sessions: list[Session] | None = None) -> Session:
    """The main job, the only session plain `nox` runs: the newest torch row on CPU, its own Lightning."""
    sessions = load() if sessions is None else sessions
    return next(s for s in sessions if s.device == "cpu" and "latest" in s.tags)


def find(name: str, sessions: list[Session] | None = None) -> Session:
    """The session called `name`; MatrixError naming the closest ones if there is none."""
    sessions = load() if sessions is None else sessions
    for session in sessions:
        if session.name == name:
            return session
    close = difflib.get_close_matches(name, [s.name for s in sessions], n=3)
    hint = f" (did you mean {', '.join(close)}?)" if close else ""
    raise MatrixError(f"unknown session {name!r}{hint}")
