"""Each case compiles into caches of its own: no compiled artifact passes from one case to another.

Inductor and Triton keep what they compile on disk (TORCHINDUCTOR_CACHE_DIR, TRITON_CACHE_DIR: the FX
graph cache, AOTAutograd's cache, the C++ and Triton kernels). Shared by a session's cases, a case
could be served what another compiled before it, so its outcome would depend on order, worker and
earlier runs. Pointing those variables at a new directory for each case is not enough: torch 2.1
computes its cache directory once per process (`functools.lru_cache`), in the warm process, before
any case is forked. So both variables name one fixed path per worker, a symbolic link, and the worker
points that link at the case's own directory before each attempt (a worker's attempts run one at a
time). Whatever torch computed or cached, every path it writes resolves into the case's directory.

A case's directory is kept across its attempts and the session's later runs (its key is its case id):
a re-run of the same case may be served its own artifacts, never another's. The warm-up compiles into
a directory of the worker's own; a case that still wrote there is named in its record (`leaked`).
With `--isolation=none` cases share one process, and what torch keeps in memory is shared too.
"""

from __future__ import annotations

import hashlib
import os
import pathlib

from harness.core import sessions

CACHE_DIRS = {"TORCHINDUCTOR_CACHE_DIR": "inductor", "TRITON_CACHE_DIR": "triton"}
CASE_FILE = "case.txt"  # in a case's directory: which case it belongs to, for a reader


def _files(directory: pathlib.Path) -> set[str]:
    return {os.path.relpath(os.path.join(top, name), directory)
            for top, _, names in os.walk(directory) for name in names}


class CaseCaches:
    """The compile caches of one process that runs cases (`worker`: xdist's worker id, or `main`)
    under `root` ($HARNESS_COMPILE_CACHES, else the pytest run's temporary directory)."""

    def __init__(self, root: os.PathLike, worker: str):
        self.root = pathlib.Path(root).absolute()
        self.link = self.root / "current" / worker
        self.warm_up = self.root / "warm-up" / worker
        self.warm_up_files: set[str] = set()

    @classmethod
    def install(cls, config, worker: str) -> "CaseCaches":
        """Before anything compiles in this process: the cache variables name the worker's link,
        which points at the warm-up's directory until a case starts."""
        root = os.environ.get(sessions.COMPILE_CACHES_ENV) or config._tmp_path_factory.getbasetemp() / "compile-caches"
        caches = cls(root, worker)
        caches.point_at(caches.warm_up)
        for variable, name in CACHE_DIRS.items():
            os.environ[variable] = str(caches.link / name)
        return caches

    def case_directory(self, case_id: str) -> pathlib.Path:
        return self.root / "cases" / hashlib.sha256(case_id.encode()).hexdigest()[:20]

    def point_at(self, target: pathlib.Path) -> None:
        """The link names `target` (made with a directory per cache), replaced in one step."""
        for name in CACHE_DIRS.values():
            (target / name).mkdir(parents=True, exist_ok=True)
        self.link.parent.mkdir(parents=True, exist_ok=True)
        staged = self.link.with_name(self.link.name + ".next")
        if staged.is_symlink() or staged.exists():
            staged.unlink()
        os.symlink(target, staged)
        os.replace(staged, self.link)

    def warmed_up(self) -> None:
        """What the warm-up left: a case that adds to it wrote outside its own caches."""
        self.warm_up_files = _files(self.warm_up)

    def enter_case(self, case_id: str) -> None:
        directory = self.case_directory(case_id)
        self.point_at(directory)
        label = directory / CASE_FILE
        if not label.exists():
            label.write_text(case_id + "\n", encoding="utf-8")

    def leave_case(self) -> list[str]:
        """The link back on the warm-up's directory; what the case left outside its own caches."""
        self.point_at(self.warm_up)
        now = _files(self.warm_up)
        added = now - self.warm_up_files
        self.warm_up_files = now
        if not added:
            return []
        return [f"compile caches: {len(added)} file(s) written into the worker's warm-up cache, not the "
                f"case's own ({sorted(added)[0]})"]
