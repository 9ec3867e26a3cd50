"""The regression table, from results files written by the harness's own writer."""

import json
import os
import shutil
import subprocess
import sys

import pytest

from harness import records, report
from tests.conftest import ROOT


def write_session(directory, name, torch, outcomes, finished=True, messages=None):
    writer = records.ResultsWriter(directory / f"{name}.jsonl")
    writer.write({"kind": "environment", "session": name, "torch": torch, "lightning": "2.4.0", "cuda": "12.4"})
    for case, outcome in outcomes.items():
        writer.write({"kind": "case", "case": case, "family": case.split("/")[0],
                      "params": {"device": "cpu", "backend": "inductor", "variant": case.split("/")[1]},
                      "outcome": outcome, "exc_type": None, "message": (messages or {}).get(case),
                      "upstream": ["NVIDIA/TransformerEngine#890"] if outcome in ("known", "fixed") else [],
                      "metrics": {"graphs": 1}, "duration": 0.1})
    if finished:
        writer.write({"kind": "end", "exitstatus": 0, "counts": {}, "seconds": 1})
    writer.close()


A, B, C = "checkpoint/te_wrapper[cpu]", "nested/inner[cpu]", "autocast/bf16[cpu]"


@pytest.fixture
def three_sessions(tmp_path):
    now = tmp_path / "now"
    now.mkdir()
    write_session(now, "cpu_torch24", "2.4.1+cu121", {A: "pass", B: "pass", C: "pass"})
    write_session(now, "cpu_torch25", "2.5.1+cu124", {A: "known", B: "pass", C: "pass"},
                  messages={A: "checkpoint not implemented for context_fn"})
    write_session(now, "cpu_torch213", "2.13.0+cu130", {A: "known", B: "fail", C: "pass"},
                  messages={B: "Tensor-likes are not close!"})
    return now


def test_columns_by_torch_version_and_transitions(three_sessions):
    data = report.build([three_sessions])
    assert [s["name"] for s in data["sessions"]] == ["cpu_torch24", "cpu_torch25", "cpu_torch213"]
    changes = {(t["case"], t["from_torch"], t["to_torch"]): (t["from"], t["to"], t["message"]) for t in data["transitions"]}
    assert changes == {
        (A, "2.4.1+cu121", "2.5.1+cu124"): ("pass", "known", "checkpoint not implemented for context_fn"),
        (B, "2.5.1+cu124", "2.13.0+cu130"): ("pass", "fail", "Tensor-likes are not close!"),
    }


def test_markdown_has_summary_matrix_legend_links_and_transitions(three_sessions, tmp_path):
    report.write(report.build([three_sessions]), tmp_path / "out")
    text = (tmp_path / "out" / "REPORT.md").read_text()
    assert "| cpu_torch25 | 2.5.1+cu124 | 2.4.0 | 12.4 | complete | 2 | 0 | 1 |" in text
    assert "### checkpoint" in text and "### nested" in text
    assert "| `te_wrapper[cpu]` | ✅ | 🐛 | 🐛 | [NVIDIA/TransformerEngine#890](https://github.com/NVIDIA/TransformerEngine/issues/890) |" in text
    assert "Legend: ✅ pass" in text
    assert "| `nested/inner[cpu]` | cpu | torch 2.5.1+cu124 ✅ pass | torch 2.13.0+cu130 ❌ fail | Tensor-likes are not close! |" in text
    merged = json.loads((tmp_path / "out" / "report.json").read_text())
    assert merged["schema"] == records.SCHEMA_VERSION and len(merged["cases"]) == 3


def test_baseline_comparison(three_sessions, tmp_path):
    base = tmp_path / "base"
    base.mkdir()
    # an older run of the same sessions
    write_session(base, "cpu_torch25", "2.5.1+cu124", {A: "known", B: "fail", "nested/gone[cpu]": "pass"})
    write_session(base, "cpu_torch213", "2.13.0+cu130", {A: "pass", B: "error", C: "fail"})
    data = report.build([three_sessions], [base])
    rows = {(r["session"], r["case"]): r["status"] for r in data["baseline"]["rows"]}
    assert rows == {
        # cpu_torch25's A stays the same known upstream bug: expected, so not listed
        ("cpu_torch25", B): "fixed",
        ("cpu_torch25", C): "new",
        ("cpu_torch25", "nested/gone[cpu]"): "removed",
        ("cpu_torch213", A): "regressed",
        ("cpu_torch213", B): "still failing",
        ("cpu_torch213", C): "fixed",
    }


def run_cli(*args, env=None):
    return subprocess.run([sys.executable, "-m", "harness", "report", *map(str, args)], cwd=ROOT,
                          capture_output=True, text=True, env={**os.environ, **(env or {})})


def test_cli_fails_on_regression_and_writes_step_summary(three_sessions, tmp_path):
    base = tmp_path / "base"
    base.mkdir()
    write_session(base, "cpu_torch213", "2.13.0+cu130", {A: "pass", B: "pass", C: "pass"})
    summary = tmp_path / "summary.md"
    summary.write_text("earlier step\n")
    result = run_cli(three_sessions, "--baseline", base, "--out", tmp_path / "out", env={"GITHUB_STEP_SUMMARY": str(summary)})
    assert result.returncode == 1
    assert "cpu_torch213: checkpoint/te_wrapper[cpu]: pass -> known" in result.stdout
    text = summary.read_text()
    assert text.startswith("earlier step\n") and "**regressed**" in text and "## Sessions" in text
    assert run_cli(three_sessions, "--baseline", base, "--out", tmp_path / "out", "--no-fail-on-regression").returncode == 0


def test_incomplete_sessions_show_missing_cells_as_not_run(three_sessions, tmp_path):
    write_session(three_sessions, "cpu_torch26", "2.6.0+cu124", {A: "known"}, finished=False)
    data = report.build([three_sessions])
    by_name = {s["name"]: s for s in data["sessions"]}
    assert not by_name["cpu_torch26"]["complete"] and not by_name["cpu_torch26"]["finished"]
    assert by_name["cpu_torch26"]["counts"] == {"known": 1, "not run": 2}
    cells = {c["case"]: c["cells"]["cpu_torch26"]["outcome"] for c in data["cases"]}
    assert cells[B] == "not run" and cells[C] == "not run"
    text = report.render_markdown(data)
    assert "| cpu_torch26 | 2.6.0+cu124 | 2.4.0 | 12.4 | **incomplete**: stopped early |" in text
    # a finished session lacking cases the others have is incomplete too
    write_session(three_sessions, "cpu_torch29", "2.9.1+cu128", {A: "known"})
    text = report.render_markdown(report.build([three_sessions]))
    assert "| cpu_torch29 | 2.9.1+cu128 | 2.4.0 | 12.4 | **incomplete**: lacks 2 cases |" in text


@pytest.mark.parametrize(
    ("damage", "error"),
    [
        (lambda text: text[: text.rindex('"outcome"')], r"cpu_torch25.jsonl:\d+: not a JSON record"),
        (lambda text: text.replace('"schema": 1', '"schema": 7', 1), r"cpu_torch25.jsonl:1: schema 7"),
        (lambda text: "garbage\n" + text, r"cpu_torch25.jsonl:1: not a JSON record"),
        (lambda text: "", r"cpu_torch25.jsonl:1: the file does not start with an environment record"),
    ],
    ids=["truncated", "schema", "garbage", "empty"],
)
def test_bad_input_names_file_and_line_and_writes_nothing(three_sessions, tmp_path, damage, error):
    out = tmp_path / "out"
    out.mkdir()
    (out / "REPORT.md").write_text("yesterday's report\n")
    path = three_sessions / "cpu_torch25.jsonl"
    path.write_text(damage(path.read_text()))
    result = run_cli(three_sessions, "--out", out)
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and __import__("re").search(error, result.stderr)
    assert (out / "REPORT.md").read_text() == "yesterday's report\n"
    assert sorted(p.name for p in out.iterdir()) == ["REPORT.md"]


def test_no_results_is_an_error(tmp_path):
    result = run_cli(tmp_path)
    assert result.returncode == 2 and "no results files" in result.stderr


def test_html_is_self_contained(three_sessions, tmp_path):
    report.write(report.build([three_sessions]), tmp_path)
    html = (tmp_path / "report.html").read_text()
    assert "http://" not in html.replace("https://github.com/", "") and "<script src" not in html
    assert "te_wrapper[cpu]" in html


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.skipif(CHROMIUM is None, reason="no chromium on this machine (apt-get install chromium)")
def test_html_renders_in_headless_chromium(three_sessions, tmp_path):
    """Render the page for real; the screenshot stays for a person to look at."""
    report.write(report.build([three_sessions]), tmp_path)
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={tmp_path / 'profile'}"]
    page = (tmp_path / "report.html").as_uri()
    dom = subprocess.run([CHROMIUM, *flags, "--dump-dom", page], capture_output=True, text=True, timeout=120)
    # the script built the grid: one coloured cell per case and session
    assert dom.stdout.count('class="cell o-') == 9, dom.stderr[-2000:]
    assert dom.stdout.count('class="cell o-known"') == 2
    assert "cpu_torch213" in dom.stdout
    shot = tmp_path / "report.png"
    subprocess.run([CHROMIUM, *flags, f"--screenshot={shot}", "--window-size=1200,700", page],
                   capture_output=True, timeout=120)
    assert shot.stat().st_size > 10_000
    keep = os.environ.get("HARNESS_SCREENSHOT_DIR")
    if keep:
        shutil.copy(shot, keep)
