"""Prepare the real source of the workflows' pinned actions for act, where a local git mirror of the
action's repository holds the pinned commit with its built files (dist/): DEST/OWNER/REPO@SHA.

    python tests/act/real_actions.py DEST MIRRORS
        MIRRORS/OWNER+REPO/repo: a bare git mirror of github.com/OWNER/REPO

Then `HARNESS_ACT_ACTIONS=DEST` makes tests/act_runner.py run those actions from it (the others from
their stand-ins). Prints, for each pinned action, which it will be and why.
"""

from __future__ import annotations

import io
import pathlib
import subprocess
import sys
import tarfile

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))

from tests.act_runner import STANDINS, pinned_actions  # noqa: E402


def main_files(tree: tarfile.TarFile) -> list[str]:
    """The JavaScript files action.yml runs (main/post), or [] for a composite or Docker action."""
    import re

    text = tree.extractfile("action.yml").read().decode()
    return re.findall(r"^\s+(?:main|post):\s*'?\"?([^'\"\s]+)", text, re.MULTILINE)


def main(argv=None) -> int:
    dest, mirrors = map(pathlib.Path, (argv or sys.argv[1:])[:2])
    for repo, commit in sorted(pinned_actions()):
        mirror = mirrors / repo.replace("/", "+") / "repo"
        if STANDINS.get(repo) is None:
            print(f"{repo}@{commit}: act's own checkout of the local repository")
            continue
        archive = subprocess.run(["git", "-C", str(mirror), "archive", commit], capture_output=True, check=False)
        if archive.returncode != 0:
            error = archive.stderr.decode().strip()
            why = ("the mirror lacks some of its files: " + error.split("for ", 1)[-1].splitlines()[0]
                   if "invalid object" in error else f"no mirror holding the commit ({error[:80]})")
            print(f"{repo}@{commit}: stand-in ({why})")
            continue
        tree = tarfile.open(fileobj=io.BytesIO(archive.stdout))
        names = set(tree.getnames())
        missing = [f for f in main_files(tree) if f not in names]
        if missing or not main_files(tree):
            why = (f"its built files are missing: {', '.join(missing)}" if missing else
                   "not a JavaScript action: its linux/ composite posts a check run to the GitHub API, not served here")
            print(f"{repo}@{commit}: stand-in ({why})")
            continue
        target = dest / f"{repo}@{commit}"
        target.mkdir(parents=True, exist_ok=True)
        tree.extractall(target, filter="data")
        print(f"{repo}@{commit}: real source -> {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
