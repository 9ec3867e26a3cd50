"""The plugin, run as a user runs it: pytest on case files, real torch, real compile."""

import json
import os
import subprocess
import sys

import pytest

from harness.core import records, resultsfile, timings
from tests.conftest import ROOT

CASES = '''
import pytest
import torch


def test_passes(case):
    case.check(torch.nn.Linear(4, 4), torch.randn(2, 4, requires_grad=True))


@pytest.mark.upstream_bug("owner/repo#1", raises="RuntimeError", match="boom")
def test_known_bug(case):
    raise RuntimeError("boom: still broken")


@pytest.mark.upstream_bug("owner/repo#2", raises="RuntimeError", match="boom")
def test_bug_fixed(case):
    case.check(torch.sin, torch.randn(3, requires_grad=True))


@pytest.mark.upstream_bug("owner/repo#3", raises="RuntimeError", match="boom")
def test_other_error_is_a_failure(case):
    raise ValueError("not the bug")


@pytest.mark.upstream_bug("owner/repo#4", raises="KeyError")
def test_bug_matches_the_cause(case):
    try:
        {}["missing"]
    except KeyError as exc:
        raise RuntimeError("wrapped by the compiler") from exc


def test_skips_with_reason(case):
    pytest.skip("missing: torch.compiler.nested_compile_region")


@pytest.fixture
def broken_fixture():
    raise OSError("the environment broke")


def test_environment_broke(broken_fixture):
    pass


@pytest.mark.limitation("https://docs.example/compile", raises="RuntimeError", match="not supported")
def test_documented_limitation(case):
    raise RuntimeError("this is not supported under torch.compile")


@pytest.mark.limitation("https://docs.example/compile", raises="RuntimeError", match="not supported")
def test_limitation_lifted(case):
    pass


@pytest.mark.upstream_bug("owner/repo#5", raises="RuntimeError", since="99.0")
def test_bug_not_yet_there(case):
    pass


@pytest.mark.upstream_bug("owner/repo#6", raises="KeyError", match="old message", until="2.0")
@pytest.mark.upstream_bug("owner/repo#6", raises="RuntimeError", match="new message", since="2.0")
@pytest.mark.upstream_bug("owner/repo#7", raises="RuntimeError", match="another bug")
def test_one_message_per_range(case):
    raise RuntimeError("new message")


@pytest.mark.upstream_bug("owner/repo#8", raises="KeyError", until="2.0")
def test_declared_for_other_versions_only(case):
    raise KeyError("old")


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
@pytest.mark.parametrize("fullgraph", [True], ids=["fullgraph"])
def test_params_are_recorded(case, backend, fullgraph):
    case.check(lambda x: x.cos() * 2, torch.randn(3, requires_grad=True))
'''


def run_cases(pytester, *args):
    pytester.makepyfile(test_family=CASES)
    results = pytester.path / "out"
    result = pytester.runpytest("-p", "harness.plugin", f"--results-dir={results}", "--session-name=demo", *args)
    lines = (results / "demo.jsonl").read_text().splitlines()
    return result, [json.loads(line) for line in lines]


def by_variant(records):
    return {r["params"]["variant"] + (f"-{r['params'].get('backend')}" if "backend" in r["params"] else ""): r
            for r in records if r["kind"] == "case"}


def test_outcomes_are_classified_and_recorded(pytester):
    result, records = run_cases(pytester, "-rxX")
    result.assert_outcomes(passed=5, failed=2, skipped=1, errors=1, xfailed=4, xpassed=1)
    for line in ("*XFAIL*test_known_bug*owner/repo#1: boom: still broken*",
                 "*XFAIL*test_documented_limitation*https://docs.example/compile: this is not supported*",
                 "*XPASS*test_bug_fixed*fixed upstream? owner/repo#2*",
                 "harness: 1 error, 2 fail, 1 fixed, 3 known, 1 limitation, 5 pass, 1 skip -> *demo.jsonl"):
        result.stdout.fnmatch_lines([line])
    assert records[0]["kind"] == "environment" and records[-1]["kind"] == "end"
    cases = by_variant(records)
    assert {k: r["outcome"] for k, r in cases.items()} == {
        "passes": "pass", "known_bug": "known", "bug_fixed": "fixed", "other_error_is_a_failure": "fail",
        "bug_matches_the_cause": "known", "skips_with_reason": "skip", "environment_broke": "error",
        "params_are_recorded-eager": "pass", "params_are_recorded-aot_eager": "pass",
        "documented_limitation": "limitation", "limitation_lifted": "pass",
        "bug_not_yet_there": "pass",  # before `since`, a pass says nothing of a fix
        "one_message_per_range": "known", "declared_for_other_versions_only": "fail",
    }
    # Each declared outcome names the one reference it met; `declared` is what applies to this torch.
    assert cases["documented_limitation"]["reference"] == "https://docs.example/compile"
    assert cases["known_bug"]["reference"] == "owner/repo#1"
    assert cases["bug_fixed"]["reference"] == "owner/repo#2"
    assert cases["other_error_is_a_failure"]["reference"] is None
    assert [d["ref"] for d in cases["other_error_is_a_failure"]["declared"]] == ["owner/repo#3"]
    assert cases["bug_not_yet_there"]["declared"] == [] and cases["bug_not_yet_there"]["reference"] is None
    ranged = cases["one_message_per_range"]
    assert ranged["reference"] == "owner/repo#6"
    assert [(d["ref"], d["match"], d["since"], d["until"]) for d in ranged["declared"]] == [  # closest marker first
        ("owner/repo#7", "another bug", None, None), ("owner/repo#6", "new message", "2.0", None)]
    assert cases["declared_for_other_versions_only"]["declared"] == []
    assert "upstream" not in cases["known_bug"]
    assert cases["known_bug"]["exc_type"] == "builtins.RuntimeError"
    assert cases["known_bug"]["message"] == "boom: still broken"
    assert cases["other_error_is_a_failure"]["exc_type"] == "builtins.ValueError"
    assert cases["skips_with_reason"]["message"] == "missing: torch.compiler.nested_compile_region"
    assert cases["environment_broke"]["exc_type"] == "builtins.OSError"
    recorded = cases["params_are_recorded-aot_eager"]
    assert recorded["case"] == "family/params_are_recorded[aot_eager-fullgraph]"  # shared params first, in one order
    assert recorded["family"] == "family"
    assert recorded["params"] == {"backend": "aot_eager", "fullgraph": True, "variant": "params_are_recorded"}
    metrics = recorded["metrics"]
    assert metrics["graphs"] == 1 and metrics["graph_breaks"] == 0 and metrics["max_abs_diff"] == 0.0
    # Its times are beside the table, not in it: a row measured again with the same outcomes is the same text.
    assert not {"compile_s", "run_s"} & set(metrics) and "duration" not in recorded
    times = timings.read(pytester.path / "out" / "demo.jsonl")
    assert times["cases"][recorded["case"]]["compile_s"] > 0 and times["cases"][recorded["case"]]["run_s"] > 0
    assert times["cases"][recorded["case"]]["duration"] > 0 and times["seconds"] > 0
    assert records[-1]["kind"] == "end" and "seconds" not in records[-1]


def test_environment_record(pytester):
    import torch

    _, records = run_cases(pytester, "-k", "passes")
    env = records[0]
    assert env["session"] == "demo" and env["torch"] == torch.__version__
    for key in ("cuda", "cudnn", "triton", "lightning", "python", "gpu", "gpu_driver", "cpu", "os",
                "git_commit", "started", "packages", "collect_env"):
        assert key in env
    assert any(p.startswith("torch==") for p in env["packages"])
    assert env["collect_env"].startswith("PyTorch version:")
    assert env["git_commit"] and len(env["git_commit"]) == 40


REFUSED_FORK = '''
import os


def refused(*args):  # as fork() fails where the process limit is reached
    raise BlockingIOError(11, "Resource temporarily unavailable")


os.fork = refused
'''


@pytest.fixture(scope="module")
def environment_of_its_own() -> dict:
    """The environment record as `python -m harness.plugin.environment` reads it in a process of its own (torch,
    collect_env and inductor's config imported there: about 6 s here), once a worker for the variants below."""
    own = subprocess.run([sys.executable, "-m", "harness.plugin.environment", "demo"], cwd=ROOT, capture_output=True,
                         text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert own.returncode == 0, own.stderr[-3000:]
    written = json.loads(records.portable(resultsfile.bounded_line(json.loads(own.stdout))))
    return {k: v for k, v in written.items() if k != "started"}


@pytest.mark.parametrize("where, fork", [("xdist", "forked"), ("xdist", "refused"), ("in_process", "refused")])
def test_the_environment_record_is_what_a_process_of_its_own_reads(pytester, monkeypatch, environment_of_its_own,
                                                                   where, fork):
    """The record is read in a child forked from the process that runs cases (torch's imports shared), or,
    where none can be forked, in a process of its own, which says so: the same record either way."""
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    pytester.makepyfile(test_family="def test_one(case):\n    pass\n")
    if fork == "refused":
        pytester.makeconftest(REFUSED_FORK)
    out = pytester.path / "out"
    result = pytester.runpytest_subprocess("-p", "harness.plugin", "-n", "1" if where == "xdist" else "0",
                                           "--isolation=none", f"--results-dir={out}", "--session-name=demo")
    result.assert_outcomes(passed=1)
    # Both as the results file holds them, this machine's places named alike (pytest's own process writes
    # its records with the temporary directory of its cases)
    recorded = json.loads(records.portable((out / "demo.jsonl").read_text().splitlines()[0]))
    assert {k: recorded.get(k) for k in environment_of_its_own} == environment_of_its_own
    said = [line for line in result.stderr.lines if "the environment record is read in a process of its own" in line]
    assert (said and "BlockingIOError" in said[0]) if fork == "refused" else not said, result.stderr.lines[-20:]


def test_records_are_on_disk_as_each_case_finishes(pytester):
    pytester.makepyfile(test_family='''
import json, os

def test_first(case):
    pass

def test_second_sees_the_first(case):
    lines = open(os.environ["RESULTS_FILE"]).read().splitlines()
    assert [json.loads(l)["kind"] for l in lines] == ["environment", "case"]
''')
    out = pytester.path / "out"
    pytester._monkeypatch.setenv("RESULTS_FILE", str(out / "demo.jsonl"))
    result = pytester.runpytest("-p", "harness.plugin", f"--results-dir={out}", "--session-name=demo")
    result.assert_outcomes(passed=2)


def test_results_dir_from_environment_and_default_name(pytester, monkeypatch):
    import torch

    pytester.makepyfile(test_family="def test_one(case):\n    pass\n")
    monkeypatch.setenv("HARNESS_RESULTS_DIR", str(pytester.path / "elsewhere"))
    monkeypatch.delenv("HARNESS_SESSION", raising=False)
    pytester.runpytest("-p", "harness.plugin").assert_outcomes(passed=1)
    files = list((pytester.path / "elsewhere").glob("local_torch*.jsonl"))
    assert len(files) == 1 and torch.__version__.split("+")[0] in files[0].name


def test_session_with_drifted_pins_stops_and_keeps_results(pytester, monkeypatch):
    pytester.makepyfile(test_family="def test_one(case):\n    pass\n")
    out = pytester.path / "out"
    out.mkdir()
    (out / "cpu_torch21.jsonl").write_text("earlier results\n")
    monkeypatch.setenv("HARNESS_SESSION", "cpu_torch21")  # this environment is not torch 2.1
    result = pytester.runpytest("-p", "harness.plugin", f"--results-dir={out}")
    assert result.ret != 0
    result.stderr.fnmatch_lines(
        ["*environment does not match session cpu_torch21: torch is *, the session pins 2.1.2*"])
    assert (out / "cpu_torch21.jsonl").read_text() == "earlier results\n"


def test_under_xdist_the_controller_writes_every_record(pytester, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    pytester.makepyfile(test_family=CASES)
    out = pytester.path / "out"
    result = pytester.runpytest_subprocess("-p", "harness.plugin", "-n", "2", f"--results-dir={out}",
                                           "--session-name=demo")
    result.assert_outcomes(passed=5, failed=2, skipped=1, errors=1, xfailed=4, xpassed=1)
    records = [json.loads(line) for line in (out / "demo.jsonl").read_text().splitlines()]
    assert [r["kind"] for r in records].count("environment") == 1
    cases = by_variant(records)
    assert cases["known_bug"]["outcome"] == "known" and cases["passes"]["metrics"]["graphs"] == 1


def test_message_that_announces_its_cause_keeps_the_next_line(pytester):
    pytester.makepyfile(test_family='''
def test_wrapped(case):
    raise RuntimeError("backend='aot_eager' raised:\\nAssertionError: the real reason\\n\\nmore detail")
''')
    out = pytester.path / "out"
    pytester.runpytest("-p", "harness.plugin", f"--results-dir={out}", "--session-name=s")
    record = [json.loads(line) for line in (out / "s.jsonl").read_text().splitlines()][1]
    assert record["message"] == "backend='aot_eager' raised: AssertionError: the real reason"
