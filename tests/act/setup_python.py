"""Stand-in for actions/setup-python under act on this machine: for each line of `python-version`
the interpreter of that version found here (pyenv's, or pythonX.Y on PATH) becomes a venv that
stands in for the hosted tool cache's Python, kept under $ACT_TOOLCACHE. Each venv's bin goes on
GITHUB_PATH, the last listed first (it is the default `python`, as with the real action), so that
`pip install` in a step lands in the venv, never in the machine's interpreter.
"""

from __future__ import annotations

import glob
import os
import pathlib
import shutil
import subprocess
import sys


def interpreter(version: str) -> str:
    root = subprocess.run(["pyenv", "root"], capture_output=True, text=True, check=False).stdout.strip() \
        if shutil.which("pyenv") else ""
    candidates = sorted(glob.glob(f"{root}/versions/{version}.*/bin/python{version}")) if root else []
    found = candidates[-1] if candidates else shutil.which(f"python{version}")
    if not found:
        raise SystemExit(f"::error::Python {version} is not on this machine (pyenv or python{version} on PATH)")
    return found


def main() -> int:
    versions = [v.strip() for v in os.environ["INPUT_PYTHON_VERSION"].splitlines() if v.strip()]
    cache = pathlib.Path(os.environ["ACT_TOOLCACHE"])
    bins = []
    for version in versions:
        venv = cache / f"python{version}"
        if not (venv / "bin" / "python").exists():
            subprocess.run([interpreter(version), "-m", "venv", str(venv)], check=True)
        bins.append(venv / "bin")
    with open(os.environ["GITHUB_PATH"], "a", encoding="utf-8") as handle:
        handle.writelines(f"{b}\n" for b in bins)  # the runner prepends each: the last listed wins
    with open(os.environ["GITHUB_ENV"], "a", encoding="utf-8") as handle:
        handle.write(f"pythonLocation={bins[-1].parent}\n")
    with open(os.environ["GITHUB_OUTPUT"], "a", encoding="utf-8") as handle:
        handle.write(f"python-version={versions[-1]}\npython-path={bins[-1] / 'python'}\n")
    print(f"Python {', '.join(versions)} from {cache} (a venv of this machine's interpreter each)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
