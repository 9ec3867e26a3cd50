"""Reuse: a full session carries over the last run's records for what nothing has changed for,
runs the rest, and says which records it carried. Real nox on a copy of the project with two small
families (a full session takes seconds), the checkout's session venv."""

import os
import pathlib
import shutil
import sys

import pytest

from harness.core import matrix, records, resultsfile, sources
from harness.plugin import environment, reuse
from harness.report import render
from tests.conftest import CHECKOUT_VENVS, ROOT, project_with_families, run_nox

pytestmark = CHECKOUT_VENVS  # runs or builds the checkout's session venvs (tests/conftest.py)

SESSION = matrix.main_session().name  # the newest row: what the tests venv holds

ALPHA = '''
import torch


def test_sin(case, backend):
    case.check(torch.sin, torch.randn(3, requires_grad=True))
'''

BETA = '''
import os
import pathlib

import pytest
import torch

def test_cos(case):
    case.check(torch.cos, torch.randn(3, requires_grad=True), compiled=torch.compile(torch.cos, backend="eager"))


@pytest.fixture
def flaky_setup():
    marker = pathlib.Path(os.environ["HARNESS_RESULTS_DIR"]) / "setup-ran"
    if not marker.exists():
        marker.write_text("")
        raise OSError("the environment broke once")


def test_setup_breaks_once(case, flaky_setup):
    pass
'''


@pytest.fixture
def project(tmp_path):
    return project_with_families(tmp_path / "project", {"alpha": ALPHA, "beta": BETA})


def session(project, results, *args, env=None, fails=False):
    done = run_nox(project, "-s", SESSION, *(["--", *args] if args else []), results=results, env=env)
    assert done.returncode == (1 if fails else 0), done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout + done.stderr


def cases(results: pathlib.Path) -> dict:
    return {r["case"]: r for r in records.read(results / f"{SESSION}.jsonl") if r["kind"] == "case"}


@pytest.mark.slow
def test_nothing_changed_runs_nothing_and_a_narrowed_or_fresh_run_reuses_nothing(project, tmp_path):
    results = tmp_path / "results"
    first = session(project, results, env={"HARNESS_RERUNS": "0"}, fails=True)  # the error fails it
    assert "0 records reused; to run: alpha, beta" in first
    measured = cases(results)
    assert {c: r["outcome"] for c, r in measured.items()} == {
        "alpha/sin[eager]": "pass", "alpha/sin[aot_eager]": "pass", "alpha/sin[inductor]": "pass",
        "beta/cos": "pass", "beta/setup_breaks_once": "error"}
    second = session(project, results, env={"HARNESS_RERUNS": "0"})
    # the error runs again (it passes now); the rest is carried over, and says from which run
    assert "4 records reused; to run: cases/test_beta.py::test_setup_breaks_once" in second
    again = cases(results)
    assert again["beta/setup_breaks_once"]["outcome"] == "pass" and "reused_from" not in again["beta/setup_breaks_once"]
    first_run = records.read(sorted((results / "previous").glob("*.jsonl"))[0])[0]
    for case_id in ("alpha/sin[eager]", "beta/cos"):
        assert again[case_id]["reused_from"] == {"started": first_run["started"], "git_commit": first_run["git_commit"]}
        assert {k: v for k, v in again[case_id].items() if k != "reused_from"} == measured[case_id]
    written = (results / f"{SESSION}.jsonl").read_bytes()
    (results / f"{SESSION}.xml").unlink()
    third = session(project, results, env={"HARNESS_RERUNS": "0"})
    assert "5 records reused; to run: nothing" in third and "python -m pytest" not in third  # pytest never started
    # A run that measured nothing leaves the table as the last run measured it, byte for byte.
    assert (results / f"{SESSION}.jsonl").read_bytes() == written
    assert (results / f"{SESSION}.xml").is_file()  # its JUnit file written where it was missing
    # reused and fresh results give the same report
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    shutil.copy2(results / f"{SESSION}.jsonl", fresh / f"{SESSION}.jsonl")  # a source it must not use
    assert "0 records reused (fresh run); to run: alpha, beta" in session(
        project, fresh, "--fresh", env={"HARNESS_RERUNS": "0"}, fails=True)
    (fresh / "setup-ran").unlink()
    outcomes = {kind: {c["case"]: c["cells"][SESSION]["outcome"] for c in render.build([d])["cases"]}
                for kind, d in (("reused", results), ("fresh", fresh))}
    assert outcomes["reused"] == {**outcomes["fresh"], "beta/setup_breaks_once": "pass"}
    # a run narrowed by a file reuses nothing, and is no source for the next
    assert "records reused" not in session(project, results, "cases/test_alpha.py", env={"HARNESS_RERUNS": "0"})
    assert not records.read(results / f"{SESSION}.jsonl")[0].get("reuse_keys")
    assert "0 records reused; to run: alpha, beta" in session(project, results, env={"HARNESS_RERUNS": "0"})


@pytest.mark.slow
def test_a_changed_family_file_runs_that_family_alone(project, tmp_path):
    results = tmp_path / "results"
    session(project, results)  # the setup error is retried once, and passes: flaky
    assert cases(results)["beta/setup_breaks_once"]["outcome"] == "flaky"
    # carried with its attempts: rerun alone, an order-dependent case would not meet the session's state
    assert "5 records reused; to run: nothing" in session(project, results)
    assert cases(results)["beta/setup_breaks_once"]["attempts"][0]["outcome"] == "error"
    path = project / "cases" / "test_beta.py"
    path.write_text(path.read_text() + "\n# a comment: the code is the same, nothing runs again\n")
    assert "5 records reused; to run: nothing" in session(project, results)
    path.write_text(path.read_text() + "\nCHANGED = True  # code: the family runs again\n")
    assert "3 records reused; to run: beta" in session(project, results)
    harness_file = project / "harness" / "plugin" / "casekit.py"
    harness_file.write_text(harness_file.read_text() + "\nCHANGED = True\n")
    assert "0 records reused; to run: alpha, beta" in session(project, results)
    report_file = project / "harness" / "report" / "render.py"  # never runs in a session
    report_file.write_text(report_file.read_text() + "\nCHANGED = True\n")
    assert "5 records reused; to run: nothing" in session(project, results)


# --- what the key holds: the vector ISA and the compiler, not the CPU model or the project itself ---------

MEASURED = ROOT / "results" / f"{SESSION}.jsonl"


def keyed_on(monkeypatch, cpu_model: str, isa: str) -> None:
    """The machine facts as a runner with this CPU and this ISA would read them (the seams)."""
    monkeypatch.setattr(reuse, "vector_isa", lambda: isa)
    monkeypatch.setattr(reuse.platform, "processor", lambda: cpu_model)
    monkeypatch.setattr(reuse.os.path, "exists", lambda path, real=os.path.exists: False if path == "/proc/cpuinfo"
                        else real(path))  # an old key read the model name from here


def nightly(directory: pathlib.Path, cpu_model: str, keys: dict) -> list[dict]:
    """A finished run of the session on `cpu_model`: the committed table's measured records under
    the keys of the machine that ran them."""
    measured = records.read(MEASURED)
    directory.mkdir()
    writer = resultsfile.ResultsWriter(directory / f"{SESSION}.jsonl")
    writer.write({**{k: v for k, v in measured[0].items() if k != "schema"}, "cpu": cpu_model, "reuse_keys": keys})
    for record in measured[1:]:
        writer.write({k: v for k, v in record.items() if k != "schema"})
    writer.close()
    return [r for r in measured if r["kind"] == "case"]


def test_records_made_on_one_cpu_model_are_reused_on_another_with_the_same_vector_isa(monkeypatch, tmp_path):
    spec = matrix.find(SESSION)
    keyed_on(monkeypatch, "Intel(R) Xeon(R) Platinum 8370C CPU @ 2.80GHz", "avx512")
    made = nightly(tmp_path / "previous", "Intel(R) Xeon(R) Platinum 8370C CPU @ 2.80GHz", reuse.family_keys(spec))
    keyed_on(monkeypatch, "AMD EPYC 7763 64-Core Processor", "avx512")  # another hosted runner, the same ISA
    same_isa = reuse.plan(spec, tmp_path / "previous")
    assert made and same_isa["run"] == [] and len(same_isa["carried"]) == len(made)
    print(f"hit rate, another CPU model with the same ISA: {len(same_isa['carried'])}/{len(made)}")
    keyed_on(monkeypatch, "AMD EPYC 7763 64-Core Processor", "avx2")  # compiled code differs
    other_isa = reuse.plan(spec, tmp_path / "previous")
    assert other_isa["carried"] == [] and len(other_isa["run"]) == len(sources.family_files())
    print(f"hit rate, another ISA: {len(other_isa['carried'])}/{len(made)}")


def test_the_key_holds_the_compiler(monkeypatch):
    spec = matrix.find(SESSION)
    keyed_on(monkeypatch, "any", "avx2")
    before = reuse.family_keys(spec)
    monkeypatch.setattr(reuse, "compiler", lambda: "g++ (Debian 14.2.0-19) 14.2.0")
    assert set(reuse.family_keys(spec).values()).isdisjoint(before.values())


def test_each_source_keys_the_families_that_import_it(monkeypatch, tmp_path):
    # A property case's program lives in cases/programs/, its runner in harness/plugin/properties.py
    # (which the plugin does not import, the cases do): a change to either re-runs the families that reach it.
    spec = matrix.find(SESSION)
    keyed_on(monkeypatch, "any", "avx2")
    for folder in ("cases", "harness"):
        shutil.copytree(ROOT / folder, tmp_path / folder, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy2(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    before = reuse.family_keys(spec, tmp_path)
    everyone = set(before)
    # Each source keys the families that reach it by imports: a family's program its family alone, what the
    # plugin and every case reach every family, what only the driver runs (nox's steps) none.
    for changed, families in (("cases/programs/nested_compile.py", {"nested_compile"}),
                              ("cases/programs/recompile.py", {"recompile"}),
                              ("cases/shared_declarations.py", everyone), ("harness/plugin/properties.py", everyone),
                              ("harness/core/records.py", everyone), ("harness/core/runsession.py", set())):
        path = tmp_path / changed
        path.write_text(path.read_text() + "\n# a comment only\n")
        assert reuse.family_keys(spec, tmp_path) == before, changed  # the same code: the same keys
        path.write_text(path.read_text() + "\nCHANGED = True\n")
        after = reuse.family_keys(spec, tmp_path)
        assert {f for f in everyone if after[f] != before[f]} == families, changed
        before = after


def test_the_vector_isa_is_what_inductor_picks():
    try:
        from torch._inductor.cpu_vec_isa import pick_vec_isa
    except ImportError:
        from torch._inductor.codecache import pick_vec_isa
    assert reuse.vector_isa() == (str(pick_vec_isa()) or "none")
    assert not reuse.vector_isa().startswith("unknown")


def test_the_vector_isa_is_kept_in_the_venv_for_the_machine_that_picked_it(monkeypatch, tmp_path):
    """Picked once per venv and machine (torch's answer, kept); another CPU's flags, another torch or
    a corrupt file asks torch again."""
    monkeypatch.setattr(reuse.sys, "prefix", str(tmp_path))
    asked = []
    real = reuse.pick_vector_isa
    monkeypatch.setattr(reuse, "pick_vector_isa", lambda: asked.append(1) or real())
    first = reuse.vector_isa()
    assert first == real() and not first.startswith("unknown")
    assert reuse.vector_isa() == first and len(asked) == 1  # the second answer comes from the venv
    monkeypatch.setattr(reuse, "_cpu_flags", lambda: "flags : fpu sse2")  # a runner with another CPU
    reuse.vector_isa()
    assert len(asked) == 2
    (tmp_path / reuse.VECTOR_ISA_FILE).write_text("{not json")
    assert reuse.vector_isa() == first and len(asked) == 3


def test_the_checkouts_own_egg_info_is_not_an_installed_package(tmp_path, monkeypatch):
    # The README's editable install leaves torch_compile_matrix.egg-info in the checkout, which a
    # session sees through the cwd entry of sys.path: a fresh clone must get the same keys.
    checkout = tmp_path / "checkout"
    info = checkout / "torch_compile_matrix_twin.egg-info"
    info.mkdir(parents=True)
    (info / "PKG-INFO").write_text("Metadata-Version: 2.1\nName: torch-compile-matrix-twin\nVersion: 0.2.0\n")
    monkeypatch.syspath_prepend(str(checkout))
    assert "torch-compile-matrix-twin==0.2.0" in environment.installed_packages()  # elsewhere: a package
    monkeypatch.chdir(checkout)
    monkeypatch.setattr(sys, "path", ["", *sys.path])  # `python -m` puts the cwd first
    assert not any(p.startswith("torch-compile-matrix-twin") for p in environment.installed_packages(checkout))
