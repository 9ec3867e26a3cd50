"""The one-file reproduction, built from real cases and run with real torch: its OUTCOME line must
be what pytest with the harness plugin records for the same case in the same interpreter."""

import json
import pathlib
import subprocess
import sys

import pytest

from harness import repro
from tests.conftest import ROOT

# Quick cases (eager backend) covering every outcome and what the script must reproduce:
# marks on the function and on one parameter, a skip from `need`, a skipif on a parameter,
# `pytest.raises`, `tmp_path`, Lightning.
CASES = [
    "checkpoint/plain_checkpoint[cpu-eager-fullgraph]",
    "checkpoint/plain_checkpoint[cuda-eager-fullgraph]",
    "checkpoint/wrapper_always_passes_noop_context_fn[cpu-graphbreaks-eager]",
    "checkpoint/wrapper_disable_dynamo_fix[cpu-fullgraph-eager]",
    "checkpoint/experimental_context_fn_flag[cpu-private_sac-fullgraph-eager]",
    "empty_init/load_from_checkpoint_compiled_submodule[plain-eager-graphbreaks]",
    "empty_init/mode_frame_compiled_from_skipped_code[cpu-empty_init_enabled-eager-graphbreaks]",
    "nested_compile/fullgraph_outer_over_inner_graph_break[cpu-eager-graph_break-fullgraph]",
]
WARM = pathlib.Path("/tmp/warm")  # hand-made venvs of older torch on the development machine


def harness(*args, timeout=900):
    return subprocess.run([sys.executable, "-m", "harness", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, env=repro.clean_env())


def plugin_outcomes(python, nodeids, tmp_path) -> dict:
    """What the matrix records: pytest with the harness plugin, case id -> outcome."""
    results = tmp_path / "results"
    subprocess.run([str(python), "-m", "pytest", *nodeids, "-p", "no:cacheprovider", "-q",
                    "--results-dir", str(results), "--session-name", "probe"],
                   cwd=ROOT, capture_output=True, text=True, timeout=900, env=repro.clean_env())
    records = [json.loads(line) for line in (results / "probe.jsonl").read_text().splitlines()]
    return {r["case"]: r["outcome"] for r in records if r["kind"] == "case"}


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """Each case of CASES as a script, collected once in this interpreter."""
    out = tmp_path_factory.mktemp("scripts")
    collected = repro.collect_cases(sys.executable, CASES)
    assert set(collected["cases"]) == set(CASES), set(CASES) - set(collected["cases"])
    scripts = {}
    for case_id in CASES:
        path = out / repro.script_name(case_id)
        path.write_text(repro.build_script({**collected, "case": collected["cases"][case_id]}, path.name))
        scripts[case_id] = path
    return collected, scripts


@pytest.fixture(scope="module")
def matrix_outcomes(exported, tmp_path_factory):
    collected, _ = exported
    return plugin_outcomes(sys.executable, [f"{c['path']}::{c['name']}" for c in collected["cases"].values()],
                           tmp_path_factory.mktemp("plugin"))


def test_scripts_are_standalone_python(exported):
    _, scripts = exported
    for case_id, path in scripts.items():
        subprocess.run([sys.executable, "-m", "py_compile", str(path)], check=True)
        text = path.read_text()
        assert "import pytest" not in text and "harness." not in text.replace("harness/", "")
        assert f"CASE_ID = {case_id!r}" in text
        # Only the one test function of the case module is left.
        assert text.count("\ndef test_") == 1, case_id
    assert "lightning" in scripts[CASES[5]].read_text()


@pytest.mark.parametrize("case_id", CASES)
def test_script_gives_the_matrix_outcome_without_pytest(case_id, exported, matrix_outcomes):
    _, scripts = exported
    result = repro.run_script(sys.executable, scripts[case_id])  # pytest and the harness blocked
    assert "ModuleNotFoundError" not in result["output"] and "import of pytest halted" not in result["output"]
    assert result["outcome"] == matrix_outcomes[case_id], result["output"][-3000:]
    assert result["returncode"] == repro.SCRIPT_EXIT_CODES[result["outcome"]]
    assert result["output"].rstrip().splitlines()[-1].startswith(f"OUTCOME: {result['outcome']}")


def test_every_outcome_is_covered(matrix_outcomes):
    # On a GPU machine the CUDA case runs instead of skipping; `need` still gives a skip.
    assert {"pass", "known", "skip"} <= set(matrix_outcomes.values()), matrix_outcomes


def test_repro_command_prints_an_issue_ready_report(tmp_path):
    case_id = CASES[2]
    out = tmp_path / "te890.py"
    done = harness("repro", case_id, "--python", sys.executable, "--out", str(out))
    assert done.returncode == 0, done.stderr
    report = done.stdout
    assert report.startswith("### torch.compile: `" + case_id + "`")
    assert "PyTorch version:" in report  # collect_env of that interpreter
    assert "```python\n" + out.read_text().rstrip() + "\n```" in report
    assert "OUTCOME: " in report and "**Expected**" in report
    assert "- [NVIDIA/TransformerEngine#890](https://github.com/NVIDIA/TransformerEngine/issues/890)" in report
    assert out.with_suffix(".md").read_text().strip() == report.strip()


def test_unknown_case_lists_the_closest_ids():
    done = harness("repro", "checkpoint/plain_checkpoint[cpu-eagr-fullgraph]", "--python", sys.executable, "--no-run")
    assert done.returncode == 2
    assert "unknown case 'checkpoint/plain_checkpoint[cpu-eagr-fullgraph]'" in done.stderr
    assert "  checkpoint/plain_checkpoint[cpu-eager-fullgraph]" in done.stderr.splitlines()[2]


@pytest.mark.skipif(not all((WARM / v / "bin" / "python").exists() for v in ("v2.4.1", "v2.5.1")),
                    reason="needs the hand-made torch 2.4.1 and 2.5.1 venvs in /tmp/warm")
def test_one_script_reproduces_both_sides_of_a_fix(tmp_path):
    # Fails on torch 2.4 (the recompute saves a different number of tensors), passes from 2.5.
    case_id = "autocast/eager_checkpoint_of_compiled_function_under_autocast[fullgraph-eager-cpu-bf16]"
    collected = repro.collect(sys.executable, case_id)
    script = tmp_path / "autocast.py"
    script.write_text(repro.build_script(collected, script.name))
    nodeid = f"{collected['case']['path']}::{collected['case']['name']}"
    for venv, expected in (("v2.4.1", "fail"), ("v2.5.1", "pass")):
        python = WARM / venv / "bin" / "python"
        result = repro.run_script(python, script)
        assert result["outcome"] == expected, result["output"][-3000:]
        assert plugin_outcomes(python, [nodeid], tmp_path / venv) == {case_id: expected}
