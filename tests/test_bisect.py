"""Bisect: where a case's outcome changes across torch versions, running as few versions as it can."""

import os
import pathlib
import subprocess
import sys

import pytest

from harness.cli import options
from harness.core import matrix, pytestrun, venvs, versions
from harness.core.errors import BadInput
from harness.tools import bisect, lightning_releases
from harness.tools import targets as bisect_targets
from harness.tools.repro import collector
from tests.conftest import CHECKOUT_VENVS, ROOT

pytestmark = CHECKOUT_VENVS  # runs or builds the checkout's session venvs (tests/conftest.py)

CASE = "checkpoint/plain_checkpoint[cpu-aot_eager-fullgraph]"


def harness(*args, timeout=1800):
    return subprocess.run([sys.executable, "-m", "harness", "bisect", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout, env=pytestrun.clean_env(**{  # this test's own compile caches
                              pytestrun.COMPILE_CACHES_ENV: os.environ[pytestrun.COMPILE_CACHES_ENV]}))


def test_version_ranges_compare_as_many_parts_as_given():
    assert versions.in_range("2.4.1", "2.4", "2.5")
    assert versions.in_range("2.5.1", "2.4", "2.5")
    assert not versions.in_range("2.6.0", "2.4", "2.5")
    assert not versions.in_range("2.10.0", "2.9.1", "2.9")
    assert versions.release("2.15.0+cu132") == (2, 15, 0)
    targets = bisect_targets.torch_targets("2.4", "2.6", "cpu", envdir=pathlib.Path("/nonexistent"))
    # one session per torch row: the plain one (cpu_torch25_py310_pyg is another environment of 2.5.1)
    assert [(t.version, t.session) for t in targets] == [("2.4.1", "cpu_torch24"), ("2.5.1", "cpu_torch25"),
                                                         ("2.6.0", "cpu_torch26")]
    cuda = bisect_targets.torch_targets("2.1", "2.1", "cuda", envdir=pathlib.Path("/nonexistent"))
    assert [t.session for t in cuda] == ["cuda12_torch21"]  # the registry's wheel
    with pytest.raises(BadInput, match="no cpu row"):
        bisect_targets.torch_targets("3.0", None, "cpu")


@pytest.mark.parametrize(("outcomes", "built"), [
    (["pass"] * 4 + ["fail"] * 11, set()),
    (["known"] * 9 + ["fixed"] * 6, set()),
    (["pass"] * 15, set()),
    (["pass"] * 7 + ["fail"] * 8, {6, 8}),  # built venvs near the middle are taken first
    (["skip"] * 7 + ["known"] * 5 + ["fixed"] * 3, set()),  # two changes: each is bisected
])
def test_a_bisection_runs_about_log2_n_plus_one_versions(monkeypatch, tmp_path, outcomes, built):
    # The outcomes of 15 rows, one change (or none); which venvs "exist" is given by `built`.
    targets = [bisect_targets.Target(f"2.{i}.0", f"cpu_torch2{i}", tmp_path / f"v{i}" / "python", object())
               for i in range(len(outcomes))]
    for index in built | {0, len(outcomes) - 1}:
        targets[index].python.parent.mkdir(parents=True)
        targets[index].python.write_text("")
    builds = []

    def build(session, envdir=None, build=True):
        builds.append(session)
        path = tmp_path / session / "python"
        path.parent.mkdir(parents=True)
        path.write_text("")
        return path

    monkeypatch.setattr(venvs, "ensure_venv", build)
    monkeypatch.setattr(collector, "collect", lambda python, ids: {"cases": {CASE: {"nodeid": "n"}}})
    monkeypatch.setattr(bisect, "run_case", lambda target, nodeid, case: bisect.Result(
        target, outcomes[targets.index(target)]))
    search = bisect.Bisection(targets, CASE, build=True, envdir=None)
    search.search(every=False)
    ran = sorted(search.results)
    changes = [(a, b) for a, b in zip(ran, ran[1:], strict=False) if outcomes[a] != outcomes[b]]
    if len(set(outcomes)) == 1:
        assert ran == [0, len(outcomes) - 1] and not builds
    else:
        boundaries = [(i - 1, i) for i in range(1, len(outcomes)) if outcomes[i] != outcomes[i - 1]]
        assert changes == boundaries  # the exact boundaries
        assert len(ran) <= 2 + 4 * len(boundaries)  # the two ends, then about log2(15) runs a change
        assert len(builds) <= len(ran) - 2 - len(built)


def test_runs_the_case_with_the_sessions_command_in_each_interpreter(tmp_path):
    # Two "versions" that are this interpreter: the same outcome, so no boundary, both ends run.
    done = harness(CASE, "--env", f"2.14={sys.executable}", "--env", f"2.15={sys.executable}")
    assert done.returncode == 0, done.stdout + done.stderr
    lines = [line for line in done.stdout.splitlines() if line.startswith("torch ")]
    assert [line.split()[1] for line in lines] == ["2.14", "2.15"]
    assert all(line.split()[3] == "pass" for line in lines), lines
    assert "no boundary: pass on every version that ran" in done.stdout
    assert "ran 2 of 2 versions; built 0 environment(s)" in done.stdout


def test_no_environment_and_no_build_is_exit_1(tmp_path):
    done = harness(CASE, "--from", "2.5", "--to", "2.6", "--no-build", "--envdir", str(tmp_path))
    assert done.returncode == 1
    assert "not run: 2.5.1, 2.6.0" in done.stdout
    assert "the case ran on no version" in done.stderr


def test_unknown_case_lists_the_closest_ids():
    done = harness(CASE.replace("eager", "eagr"), "--env", f"2.15={sys.executable}")
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "closest case ids: " in lines[0] and CASE in lines[0], done.stderr


@pytest.mark.slow
def test_finds_the_boundary_of_a_real_fix_in_the_matrix_venvs():
    # pytorch/pytorch#113263: an eager checkpoint of a compiled function fails before 2.5, passes from 2.5.
    rows = [n for n in ("cpu_torch24", "cpu_torch25") if not venvs.venv_python(n).exists()]
    if rows:
        pytest.skip(f"needs the venvs of {', '.join(rows)} (nox -s SESSION --install-only)")
    found = collector.collect(sys.executable, ["*"])["ids"]
    case = next(c for c in found if c.startswith("autocast/eager_checkpoint_of_compiled") and "cpu" in c)
    done = harness(case, "--from", "2.4", "--to", "2.5", "--no-build")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "boundary: 2.4.1 (known) -> 2.5.1 (" in done.stdout


# --- along Lightning, at a fixed torch ---

FLOW = "empty_init/reporter_flow_fit_save_load_infer[inductor-fullgraph-linear-trainer_init_module_empty]"


def registry_reachable() -> bool:
    try:
        lightning_releases.releases("lightning")
    except lightning_releases.RegistryError:
        return False
    return True


needs_registry = pytest.mark.skipif("not registry_reachable()", reason="the package registry is not reachable")


@needs_registry
def test_along_lightning_the_releases_from_the_rows_own_to_the_newest_that_supports_its_torch(tmp_path):
    era, newest = matrix.find("cpu_torch25"), matrix.find("cpu_torch25_lightning_newest")
    shared = venvs.python_in(venvs.lightning_venv(era, tmp_path))
    # nothing built: every release in the row's one venv
    targets = bisect_targets.lightning_targets("2.5", envdir=tmp_path)
    assert all(t.outside and t.python == shared for t in targets)
    for end in (era, newest):  # the ends' session venvs, once built, are used as they are
        venvs.venv_python(end.name, tmp_path).parent.mkdir(parents=True)
        venvs.venv_python(end.name, tmp_path).write_text("")
    targets = bisect_targets.lightning_targets("2.5", envdir=tmp_path)
    assert (targets[0].version, targets[0].session) == (era.lightning, "cpu_torch25")
    assert (targets[-1].version, targets[-1].session) == (newest.lightning, newest.name)
    assert [versions.release(t.version) for t in targets] == sorted(versions.release(t.version) for t in targets)
    assert len(targets) > 4 and not any(t.outside for t in (targets[0], targets[-1]))
    for target in targets:
        assert (target.spec.torch == "2.5.1" and target.spec.extra == era.extra
                and target.spec.lightning == target.version)
        assert not target.spec.lightning_of  # the case's node id runs, not the Lightning-axis selection
        assert target.outside == (target.session not in (era.name, newest.name))
        assert target.python == (shared if target.outside else venvs.venv_python(target.session, tmp_path))
        assert f"lightning=={target.version}" in target.spec.requirements
    narrowed = bisect_targets.lightning_targets("2.5", "2.5.1", "2.5", envdir=tmp_path)
    assert [t.version for t in narrowed][0] == "2.5.1" and all(t.version.startswith("2.5.") for t in narrowed)


@pytest.mark.parametrize(("args", "error"), [
    (["--along", "lightning", "--torch", "2.55"], "error: --torch 2.55 names no cpu row of the matrix"),
    (["--along", "lightning", "--torch", "2"], "error: --torch 2 names several cpu rows of the matrix: 2.1.2, "),
    (["--along", "lightning"], "error: --along lightning needs --torch VERSION"),
    (["--torch", "2.5"], "error: --torch holds a row fixed along lightning: add --along lightning"),
    (["--along", "lightning", "--torch", "2.5", "--env", f"2.5={sys.executable}"], "error: --env bisects over"),
    pytest.param(["--along", "lightning", "--torch", "2.5", "--from", "2.7"],
                 "error: no Lightning release from 2.7 to 2.6.6 supports torch 2.5.1 on Python 3.11",
                 marks=needs_registry),
])
def test_bad_input_along_lightning_is_one_line_before_any_build(tmp_path, args, error):
    done = harness(FLOW, *args, "--envdir", str(tmp_path / "envs"))
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.count("\n") == 1 and done.stderr.startswith(error), done.stderr
    assert not (tmp_path / "envs").exists()


@needs_registry
def test_a_bisection_along_lightning_names_the_first_release_that_changes(monkeypatch, tmp_path, capsys):
    # No venv built: the row's one venv along Lightning is built once and its Lightning switched for
    # each release that runs; the outcomes of the releases are given.
    targets = bisect_targets.lightning_targets("2.5", envdir=tmp_path)
    change = next(i for i, t in enumerate(targets) if t.version == "2.5.3")
    built, switched = [], []

    def with_lightning(spec, location):
        assert spec.torch == "2.5.1" and location == venvs.lightning_venv(matrix.find("cpu_torch25"), tmp_path)
        switched.append(spec.lightning)
        fresh = not location.exists()
        if fresh:
            built.append(spec.lightning)
            (location / "bin").mkdir(parents=True)
            venvs.python_in(location).write_text("")
        return location / "bin" / "python", fresh

    monkeypatch.setattr(bisect, "targets_of", lambda args: targets)
    monkeypatch.setattr(venvs, "with_lightning", with_lightning)
    monkeypatch.setattr(venvs, "ensure_venv", lambda *a, **k: pytest.fail("no session venv is built along Lightning"))
    monkeypatch.setattr(collector, "collect", lambda python, ids: {"cases": {FLOW: {"nodeid": "n"}}})
    monkeypatch.setattr(bisect, "run_case", lambda target, nodeid, case: bisect.Result(
        target, "known" if targets.index(target) < change else "fixed"))
    args = options.parser().parse_args(
        ["bisect", FLOW, "--along", "lightning", "--torch", "2.5", "--envdir", str(tmp_path)])
    assert bisect.command(args) == 0
    out = capsys.readouterr().out
    assert f"bisect {FLOW}: lightning 2.4.0 to 2.6.6 at torch 2.5.1, {len(targets)} version(s)" in out
    assert f"boundary: {targets[change - 1].version} (known) -> 2.5.3 (fixed)" in out
    assert [line.split()[:2] for line in out.splitlines() if line.startswith("lightning ")][:2] == [
        ["lightning", "2.4.0"], ["lightning", "2.6.6"]]
    assert built == ["2.4.0"] and "built 1 environment(s): 2.4.0" in out
    assert len(switched) <= len(targets).bit_length() + 2  # log2 of the releases, and the two ends
