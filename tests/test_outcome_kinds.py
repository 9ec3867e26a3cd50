"""An outcome kind is one entry of harness.core.outcomes.OUTCOMES: a copy of the project given a new one
records it, renders it (REPORT.md's symbol, report.html's colour, the JUnit status) with no other change."""

import json
import os
import subprocess
import sys

from harness.core import paths, resultsfile
from tests.conftest import copy_project

NEW_KIND = ('    Outcome("hang", 10, "🕸️", "HANG", "stopped answering, and was stopped", '
            '"failing", True, None, "error",\n'
            '            "background: #1f2328; color: #fff;"),\n')


def test_a_new_outcome_kind_is_one_entry(tmp_path):
    project = copy_project(tmp_path / "project")
    outcomes = project / "harness" / "core" / "outcomes.py"
    text = outcomes.read_text()
    anchor = text.index("\n)}", text.index("OUTCOMES = {"))
    outcomes.write_text(text[:anchor + 1] + NEW_KIND + text[anchor + 1:])
    results = tmp_path / "results"
    results.mkdir()
    writer = resultsfile.ResultsWriter(results / "cpu_torch215.jsonl")
    writer.write({"kind": "environment", "session": "cpu_torch215", "torch": "2.15.0"})
    case = {"kind": "case", "case": "checkpoint/plain_checkpoint[cpu-eager-fullgraph]", "family": "checkpoint",
            "params": {"device": "cpu", "backend": "eager", "fullgraph": True, "variant": "plain_checkpoint"},
            "outcome": "hang", "exc_type": None, "message": "no answer for 600 s", "reference": None, "declared": [],
            "nodeid": "cases/test_checkpoint.py::test_plain_checkpoint[cpu-fullgraph-eager]"}
    writer.write(case)
    writer.write({"kind": "end", "exitstatus": 1, "counts": {"hang": 1}, "reused": 0})
    writer.close()
    done = subprocess.run([sys.executable, "-m", "harness", "report", str(results), "--out", str(tmp_path / "out"),
                           "--no-since-committed"], cwd=project, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(project)})
    assert done.returncode in (0, 1) and "Traceback" not in done.stderr, done.stdout[-2000:] + done.stderr[-2000:]
    page = (tmp_path / "out" / "report.html").read_text()
    assert ".o-hang { background: #1f2328; color: #fff; }" in page
    data = json.loads((tmp_path / "out" / "report.json").read_text())
    (row,) = data["cases"]
    assert row["cells"]["cpu_torch215"]["outcome"] == "hang"
    junit = subprocess.run([sys.executable, "-c", "import sys, json; from harness.plugin import junit; "
                            "print(junit.render([json.loads(l) for l in open(sys.argv[1])]))",
                            str(paths.results_path("cpu_torch215", results))], cwd=project, capture_output=True,
                           text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(project)})
    assert (junit.returncode == 0 and 'errors="1"' in junit.stdout
            and "<error" in junit.stdout), junit.stdout + junit.stderr
