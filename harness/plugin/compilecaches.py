"""Each case compiles into caches of its own: no compiled artifact passes from one case to another.

Inductor and Triton keep what they compile on disk (TORCHINDUCTOR_CACHE_DIR, TRITON_CACHE_DIR: the FX
graph cache, AOTAutograd's cache, the C++ and Triton kernels). Shared by a session's cases, a case
could be served what another compiled before it, so its outcome would depend on order, worker and
earlier runs. Pointing those variables at a new directory for each case is not enough: torch 2.1
computes its cache directory once per process (`functools.lru_cache`), in the warm process, before
any case is forked. So both variables name one fixed path per worker, a symbolic link, and the worker
points that link at the case's own directory before each attempt (a worker's attempts run one at a
time). Whatever torch computed or cached, every path it writes resolves into the case's directory.
What torch cached in memory may also say a file was written already (torch 2.1's C++ prefix header,
`cpp_prefix_path`): so a case's directory starts as a copy of what the warm-up left in its own, the
same for every case (a copy, not a link: a case that rewrites it changes only its own).

Inductor's precompiled headers (torch 2.8 on, `cpp_cache_precompile_headers`) ignore
TORCHINDUCTOR_CACHE_DIR: they go under the temporary directory (`$TMPDIR/torchinductor_<user>`), shared
by every process of the machine, so TMPDIR names the case's directory too. A precompiled header holds
torch's own headers only (keyed by their preprocessed text, the compile command and the compiler), the
warm-up builds it once, and each case starts with a hard link to it: measured on torch 2.15, building
it took 5.7 s of a first compile and 152 MB, per case, which a copy would pay again. Torch writes such
a file only when it is missing, so a link is never written through; a case that did would change the
warm-up's file, and its record would say so (`leaked`).

Inductor's C++ builds are the one thing cases share (`BUILDS`): what the compiler made (`.so`, `.o`) is
named by the hash of its source and its whole compile command (include paths, flags, ISA), so two cases
that build one kernel build the same file; torch builds a file only where it is missing and never writes
one again. Measured on torch 2.15 (docs/speed.md), the C++ build is about 80 % of a cold case's time,
and most kernels of a row are built by more than one case. A case that ended by itself hands what it
built to the shared folder (hard links), and each case starts with links to what is there; what a case
cut short (killed at its time limit, crashed, the harness broke) built may be half-written, and is not
shared. The FX graph and AOTAutograd caches, the Python wrappers and Triton's caches stay the case's
own: their keys say what a graph was compiled under, and such keys can be wrong
(pytorch/pytorch#181564). A case that writes through a shared build changes every case's copy: its
record says so (`leaked`), and the file leaves the shared folder.

A case's directory is kept across its attempts and the session's later runs (its key is its case id):
a re-run of the same case may be served its own artifacts, never another's. Torch 2.1-2.3 keep in an FX
graph cache entry the absolute path of its module, through the worker's link: a case entered through
another worker's link than its directory was last written through starts without the caches such paths
are in (`PATH_HOLDING`), which would resolve into the case that other link serves. The warm-up compiles
into a directory of the worker's own; a case that still wrote there is named in its record (`leaked`).
With `--isolation=none` cases share one process, and what torch keeps in memory is shared too.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import pathlib
import shutil
import tempfile
import time

from harness.core import pytestrun

CACHE_DIRS = {"TORCHINDUCTOR_CACHE_DIR": "inductor", "TRITON_CACHE_DIR": "triton", "TMPDIR": "tmp"}
BUILDS = "builds"  # under the root: the C++ builds the cases share, in inductor's own layout (see above)
BUILT = (".so", ".o")  # the compiler's output, named by the hash of its source and compile command
LINKED = "tmp"  # what a case's directory links to the warm-up's rather than copies (see above)
CASE_FILE = "case.txt"  # in a case's directory: which case it belongs to, for a reader
LINK_FILE = "link.txt"  # in a case's directory: the worker link its caches were last written through
# Torch 2.1-2.3 keep in an FX graph cache entry the path of its Python module (`artifact_path`) and load
# it from there on a hit; AOTAutograd's entries name FX graph entries, so they go with them.
PATH_HOLDING = ("inductor/fxgraph", "inductor/aotautograd")


def _files(directory: pathlib.Path) -> dict[str, tuple[int, int]]:
    """Each file under `directory` by its relative path: its size and modification time."""
    found = {}
    for top, _, names in os.walk(directory):
        for name in names:
            path = os.path.join(top, name)
            try:
                info = os.stat(path)
            except OSError:  # removed while walking
                continue
            found[os.path.relpath(path, directory)] = (info.st_size, info.st_mtime_ns)
    return found


def _copy_if_missing(source: str, target: str) -> None:
    if not os.path.lexists(target):
        shutil.copy2(source, target)


def _link_if_missing(source: str, target: str) -> None:
    if not os.path.lexists(target):
        os.link(source, target)


def _builds(inductor: pathlib.Path) -> dict[str, tuple[int, int]]:
    """The C++ builds under an inductor cache directory, by relative path: in the folder of two characters
    that inductor names after the hash of a build's source (`c<hash>.so` in `<hash[:2]>/`), nowhere else."""
    found: dict[str, tuple[int, int]] = {}
    try:
        folders = [entry for entry in os.scandir(inductor) if len(entry.name) == 2 and entry.is_dir()]
    except FileNotFoundError:
        return found
    for folder in folders:
        for entry in os.scandir(folder.path):
            if entry.name[1:3] == folder.name and entry.name.endswith(BUILT) and entry.is_file(follow_symlinks=False):
                info = entry.stat(follow_symlinks=False)
                found[f"{folder.name}/{entry.name}"] = (info.st_size, info.st_mtime_ns)
    return found


class CaseCaches:
    """The compile caches of one process that runs cases (`worker`: xdist's worker id, or `main`)
    under `root` ($HARNESS_COMPILE_CACHES, else the pytest run's temporary directory)."""

    def __init__(self, root: str | os.PathLike[str], worker: str):
        self.root = pathlib.Path(root).absolute()
        self.link = self.root / "current" / worker
        self.warm_up = self.root / "warm-up" / worker
        self.warm_up_files: dict[str, tuple[int, int]] = {}
        self.replaced: dict[str, str | None] = {}  # the variables as they were before install
        self.shared = self.root / BUILDS
        self.shared_at_start: dict[str, tuple[int, int]] = {}  # the shared builds the current case started with
        self.entered_at = 0  # ns: a case shares what it built after this, not what an earlier run of it left

    @classmethod
    def install(cls, config, worker: str) -> "CaseCaches":
        """Before anything compiles in this process: the cache variables name the worker's link,
        which points at the warm-up's directory until a case starts."""
        root = os.environ.get(pytestrun.COMPILE_CACHES_ENV) or config._tmp_path_factory.getbasetemp() / "compile-caches"
        caches = cls(root, worker)
        caches.point_at(caches.warm_up)
        for variable, name in CACHE_DIRS.items():
            caches.replaced[variable] = os.environ.get(variable)
            os.environ[variable] = str(caches.link / name)
        tempfile.tempdir = None  # read TMPDIR again: torch's modules ask tempfile when they are imported
        return caches

    def uninstall(self) -> None:
        """The variables as they were: a pytest run inside a longer-lived process (pytester's) must not
        leave it writing temporary files under a run's caches (a browser started later by that process
        could not start once they were removed)."""
        for variable, value in self.replaced.items():
            if value is None:
                os.environ.pop(variable, None)
            else:
                os.environ[variable] = value
        tempfile.tempdir = None

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
        # Kept from a run through another link (or an unknown one): its path-holding caches go (see above).
        written_through = directory / LINK_FILE
        if directory.exists() and (not written_through.exists()
                                   or written_through.read_text(encoding="utf-8").strip() != str(self.link)):
            for name in PATH_HOLDING:
                shutil.rmtree(directory / name, ignore_errors=True)
        # What the warm-up left that the case's directory lacks (new, or kept from an earlier run).
        shutil.copytree(self.warm_up, directory, symlinks=True, dirs_exist_ok=True, copy_function=_copy_if_missing,
                        ignore=lambda folder, names: [LINKED] if pathlib.Path(folder) == self.warm_up else [])
        shutil.copytree(self.warm_up / LINKED, directory / LINKED, symlinks=True, dirs_exist_ok=True,
                        copy_function=_link_if_missing)
        self.entered_at = time.time_ns()
        self.shared_at_start = _builds(self.shared)
        for path in self.shared_at_start:
            (directory / "inductor" / path).parent.mkdir(exist_ok=True)
            _link_if_missing(str(self.shared / path), str(directory / "inductor" / path))
        label = directory / CASE_FILE
        if not label.exists():
            label.write_text(case_id + "\n", encoding="utf-8")
        written_through.write_text(f"{self.link}\n", encoding="utf-8")
        self.point_at(directory)

    def leave_case(self) -> list[str]:
        """The link back on the warm-up's directory; what the case left outside its own caches."""
        self.point_at(self.warm_up)
        now = _files(self.warm_up)
        changed = sorted(path for path in now.keys() | self.warm_up_files.keys()
                         if now.get(path) != self.warm_up_files.get(path))
        self.warm_up_files = now
        left = []
        if changed:
            left.append(f"compile caches: {len(changed)} file(s) of the worker's warm-up cache written, not the "
                        f"case's own ({changed[0]})")
        now_shared = _builds(self.shared)
        written = sorted(path for path, seen in self.shared_at_start.items() if now_shared.get(path, seen) != seen)
        for path in written:  # no later case starts with it
            (self.shared / path).unlink(missing_ok=True)
        if written:
            left.append(f"compile caches: {len(written)} shared C++ build(s) written through, taken out of the "
                        f"shared ones ({written[0]})")
        return left

    def share_builds(self, case_id: str) -> None:
        """What the case built, for every later case: call only for a case that ended by itself. Not what it
        started with (a build taken out of the shared ones stays out), nor what an earlier run of it left
        (cut short, maybe)."""
        inductor = self.case_directory(case_id) / "inductor"
        built = {path for path, (_, modified) in _builds(inductor).items() if modified >= self.entered_at}
        for path in built - _builds(self.shared).keys() - self.shared_at_start.keys():
            (self.shared / path).parent.mkdir(parents=True, exist_ok=True)
            with contextlib.suppress(FileExistsError):  # another worker shared it first
                os.link(inductor / path, self.shared / path)
