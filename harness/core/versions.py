"""Versions, read in one place and by packaging: a torch version (its local label, `+cpu` or
`+cu121`, naming the build and not the release), a release's numbers, the range rule every
command and declaration uses, and what the running interpreter has installed."""

from __future__ import annotations

import importlib.metadata

from packaging.version import InvalidVersion, Version

from harness.core.errors import BadInput

NOT_A_VERSION = Version("0")


def torch_version(text: str | None) -> Version:
    """`text` as packaging reads it, the local label dropped; NOT_A_VERSION when it is none (a
    results file of a local build, say: it sorts first)."""
    try:
        return Version((text or "").split("+")[0].strip())
    except InvalidVersion:
        return NOT_A_VERSION


def release(text: str) -> tuple[int, ...]:
    """'2.4.1+cu121' -> (2, 4, 1); BadInput when `text` is no version (a user's --from, --env)."""
    found = torch_version(text)
    if found == NOT_A_VERSION:
        raise BadInput(f"not a version: {text!r}")
    return found.release


def in_range(version: str, first: str | None, last: str | None) -> bool:
    """`version` from `first` to `last`, both inclusive and either open, each bound compared on as
    many numbers as it gives: `2.4` covers every 2.4.x at either end (a declaration's `until`, a
    command's --to, a release list's range)."""
    found = release(version)
    if first and found[:len(release(first))] < release(first):
        return False
    return not (last and found[:len(release(last))] > release(last))


def same_release(found: str | None, pin: str) -> bool:
    """`2.5.1+cu124` satisfies the pin `2.5.1`: the local label names the build, not the release."""
    try:
        return found is not None and Version(found).public == Version(pin).public
    except InvalidVersion:
        return False


def is_prerelease(text: str) -> bool:
    return Version(text).is_prerelease


def build_label(text: str) -> str | None:
    """The local label of a version ('cpu' of '2.13.0+cpu'), None without one."""
    return Version(text).local


def minor_tag(text: str) -> str:
    """'2.13.0' -> '213': the torch part of a session name (harness.core.matrix builds the names)."""
    major, minor = release(text)[:2]
    return f"{major}{minor}"


def final_release(text: str) -> Version | None:
    """A registry's release name as a version when it is a final release; None for a pre-release,
    a development release or a name that is no version."""
    try:
        version = Version(text)
    except InvalidVersion:
        return None
    return None if version.is_prerelease or version.is_devrelease else version


def installed(*names: str) -> str | None:
    """The installed version of the first distribution of `names` found here, else None."""
    for name in names:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None
