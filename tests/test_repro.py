"""The reproduction: the case's own code as a short standalone script that prints the outcome the
matrix records, and the issue around it. Real cases, real torch."""

import pathlib
import subprocess
import sys

import pytest

from harness.core import matrix, pytestrun, records, resultsfile
from harness.core.outcomes import OUTCOMES
from harness.core.sources import family_files
from harness.tools.repro import collector, op_example
from harness.tools.repro import command as repro
from harness.tools.repro import script as repro_script
from harness.tools.repro.property_example import chosen_example
from tests import committed_row
from tests.conftest import ROOT


def harness(*args, timeout=900, **env):
    return subprocess.run([sys.executable, "-m", "harness", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, env=pytestrun.clean_env(**env))


@pytest.fixture(scope="module")
def collected():
    cases = collector.collect(sys.executable, ["*"])["cases"]
    op_example.add_scripts(sys.executable, cases)  # as the command does: an op property exports its example's script
    return cases


def sample(cases: dict) -> list[str]:
    """Cases that between them use every part of an export: each family; a declared upstream bug
    and a documented limitation; `need`; a CUDA parameter; Lightning; tmp_path."""
    picks = []

    def pick(predicate):
        found = next((c for c, info in cases.items() if predicate(c, info) and c not in picks), None)
        if found:
            picks.append(found)

    for family in sorted({info["family"] for info in cases.values()}):
        pick(lambda c, info, family=family: info["family"] == family and "[cpu" in c)
    pick(lambda c, info: any(e["kind"] == "known" for e in info["expected"]))
    pick(lambda c, info: any(e["kind"] == "limitation" for e in info["expected"]))
    pick(lambda c, info: "'cuda'" in info["params"].values())
    pick(lambda c, info: "tmp_path" in info["argnames"])
    pick(lambda c, info: "lightning" in repro_script.build_script(info))
    # A property case that fails on the main job's torch: its script replays the recorded example.
    pick(lambda c, info: c == "nested_compile/property_nested_compile_region[cpu-inductor-graphbreaks]")
    return picks


def test_every_case_exports_as_a_short_standalone_script(collected, tmp_path):
    lengths = {}
    for number, (case_id, info) in enumerate(collected.items()):
        text = repro_script.build_script(info)  # compiles it, too
        lengths[case_id] = text.count("\n")
        assert "import pytest" not in text and "harness" not in text.split('"""', 2)[2], case_id
        assert f"`{case_id}`" in text.splitlines()[0]
        (tmp_path / f"case_{number}.py").write_text(f"# {case_id}\n{text}")
    over = {c: n for c, n in lengths.items() if n > repro_script.line_limit(collected[c])}
    assert not over, over
    # Every name a script uses is defined in it (pyflakes' undefined-name check, through ruff).
    undefined = subprocess.run([sys.executable, "-m", "ruff", "check", "--isolated", "--select", "F821",
                                "--output-format", "concise", str(tmp_path)], capture_output=True, text=True)
    assert undefined.returncode == 0, undefined.stdout[-3000:]


def test_scripts_print_the_outcome_the_matrix_records(collected, tmp_path):
    picks = sample(collected)
    assert len(picks) >= 6, picks
    spec = matrix.main_session()  # the tests venv's pins: its scripts run in this interpreter
    # What the matrix records: its committed row where the checkout would measure it the same, else the
    # picked cases run here with the session's command.
    found = committed_row.fresh_records(spec.name, family_files())
    if found is None:
        results = tmp_path / "results"
        nodeids = [collected[c]["nodeid"] for c in picks]
        subprocess.run([sys.executable, *pytestrun.pytest_args(spec, [*nodeids, "-q", f"--results-dir={results}",
                                                                     "--session-name=probe"])],
                       cwd=ROOT, capture_output=True, text=True, timeout=1800, env=pytestrun.clean_env())
        found = {r["case"]: r for r in records.read(results / "probe.jsonl") if r["kind"] == "case"}
    recorded = {case_id: record["outcome"] for case_id, record in found.items()}
    for case_id in picks:
        info = {**collected[case_id],
                "property_example": chosen_example(found[case_id], collected[case_id]["expected"])}
        path = tmp_path / repro_script.script_name(case_id)
        text = repro_script.build_script(info)
        path.write_text(text)
        if info["property_example"]:  # the example itself, not hypothesis, and its program shown
            assert "hypothesis" not in text and info["property_example"]["figures"] in text, text
            assert info["property_example"]["program"].splitlines()[0] in text.split('"""', 2)[1]
        result = repro.run_script(sys.executable, path)  # pytest and the harness unimportable
        assert result["outcome"] == recorded[case_id], (case_id, result["output"][-3000:])
        code = OUTCOMES[result["outcome"]].exit_code
        assert result["returncode"] == code, (case_id, result["returncode"])


def test_a_case_that_skips_at_run_time_exports_a_script_that_skips(collected, tmp_path):
    # The SDPA case skips where switching the fused backends off changes nothing eagerly; made to find so
    # here (its condition forced), its script must print that skip, its reason with it.
    info = collected["recompile/sdpa_backends_switched_after_compile[cpu-eager]"]
    source = pathlib.Path(info["path"]).read_text()
    condition = "if torch.equal(switched_eager, default_eager):"
    assert source.count(condition) == 1
    case_file = tmp_path / pathlib.Path(info["path"]).name
    case_file.write_text(source.replace(condition, "if True:"))
    script = tmp_path / "skips.py"
    script.write_text(repro_script.build_script({**info, "path": str(case_file)}))
    result = repro.run_script(sys.executable, script)
    assert result["outcome"] == "skip" and "switching them off changes nothing to see" in result["output"], \
        result["output"][-3000:]
    assert result["returncode"] == OUTCOMES["skip"].exit_code


def test_repro_prints_an_issue_with_the_versions_at_hand(tmp_path):
    case_id = "checkpoint/plain_checkpoint[cpu-aot_eager-fullgraph]"
    table = tmp_path / "results"
    for torch_version, session, outcome in (("2.4.1", "cpu_torch24", "fail"), ("2.5.1", "cpu_torch25", "pass")):
        writer = resultsfile.ResultsWriter(table / f"{session}.jsonl")  # a results file as sessions write them
        writer.write({"kind": "environment", "session": session, "torch": torch_version})
        writer.write({"kind": "case", "case": case_id, "family": "checkpoint", "params": {}, "outcome": outcome,
                      "exc_type": None, "message": "", "upstream": [], "metrics": {}, "duration": 1.0, "nodeid": ""})
        writer.close()
    out = tmp_path / "repro.py"
    # --results reads this table instead of the checkout's committed matrix.
    done = harness("repro", case_id, "--python", sys.executable, "--out", str(out), "--results", str(table))
    assert done.returncode == 0, done.stderr
    issue = done.stdout
    lines = issue.splitlines()
    assert lines[0].startswith("### ") and case_id in lines[0]
    assert lines[2].startswith("With torch ")  # one paragraph of what happens
    assert "| 2.4.1 | cpu_torch24 | fail |" in issue and "| 2.5.1 | cpu_torch25 | pass |" in issue
    assert "Changes between torch 2.4.1 (fail) and 2.5.1 (pass)." in issue
    assert "```python\n" + out.read_text().rstrip() + "\n```" in issue
    assert "OUTCOME: pass" in issue and "**Expected**" in issue
    assert "<details><summary>collect_env</summary>" in issue and "PyTorch version:" in issue
    assert out.with_suffix(".md").read_text().strip() == issue.strip()


def test_unknown_case_lists_the_closest_ids():
    done = harness("repro", "checkpoint/plain_checkpoint[cpu-eagr-fullgraph]", "--python", sys.executable,
                   "--no-run")
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "unknown case 'checkpoint/plain_checkpoint[cpu-eagr-fullgraph]'" in lines[0], done.stderr
    assert "closest case ids: checkpoint/plain_checkpoint[cpu-eager-fullgraph]" in lines[0]
