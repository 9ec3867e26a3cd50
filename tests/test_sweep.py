"""A user's script across the torch rows: `python -m harness sweep SCRIPT`, and `bisect --script`."""

import subprocess
import sys
import textwrap

import pytest

from harness.core import pytestrun
from tests.conftest import ROOT

# A bug of torch 2.15 (the copy.copy case of cases/test_empty_init.py, written as a user would).
USER_SCRIPT = textwrap.dedent("""\
    import copy
    import torch

    class Mode(torch.overrides.TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    def f(x):
        return torch.cos(copy.copy(torch.sin(x)))

    with Mode():
        torch.compile(f, backend="eager")(torch.randn(4))
    """)


def harness(*args, timeout=1800):
    return subprocess.run([sys.executable, "-m", "harness", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, env=pytestrun.clean_env())


def test_sweep_runs_the_script_in_the_row_venv_and_writes_the_table(tmp_path):
    script = tmp_path / "user_script.py"
    script.write_text(USER_SCRIPT)
    table = tmp_path / "table.md"
    # builds at most cpu_torch215
    done = harness("sweep", str(script), "--from", "2.15", "--to", "2.15", "--out", str(table))
    assert done.returncode == 0, done.stdout + done.stderr
    row = next(line for line in done.stdout.splitlines() if line.startswith("torch 2.15.0"))
    assert row.split()[3:5] == ["fail", "exit"], row
    assert "AttributeError: 'NoneType' object has no attribute 'type'" in row
    assert "| 2.15.0 | cpu_torch215 | fail | exit 1 |" in table.read_text()


def test_sweep_without_build_runs_only_what_exists(tmp_path):
    script = tmp_path / "ok.py"
    script.write_text("print('ok')\n")
    done = harness("sweep", str(script), "--from", "2.12", "--to", "2.13", "--no-build",
                   "--envdir", str(tmp_path / "envs"), "--out", str(tmp_path / "table.md"))
    assert done.returncode == 1
    assert "not run (no environment; --no-build)" in done.stdout
    assert "the script ran on no version" in done.stderr
    assert not (tmp_path / "envs").exists()
    assert (tmp_path / "table.md").read_text().count("| not run |") == 2


def test_bisect_takes_the_same_script(tmp_path):
    script = tmp_path / "fails.py"
    script.write_text("raise ValueError('fails everywhere')\n")
    done = harness("bisect", "--script", str(script), "--env", f"2.14={sys.executable}",
                   "--env", f"2.15={sys.executable}")
    assert done.returncode == 0, done.stdout + done.stderr
    lines = [line.split()[:4] for line in done.stdout.splitlines() if line.startswith("torch ")]
    assert lines == [["torch", "2.14", "bisect-2.14", "fail"], ["torch", "2.15", "bisect-2.15", "fail"]], done.stdout
    assert "exit 1: ValueError: fails everywhere" in done.stdout
    assert "no boundary: fail on every version that ran" in done.stdout


def test_sweep_along_lightning_lists_the_releases_at_the_row(tmp_path):
    from tests.test_bisect import registry_reachable

    if not registry_reachable():
        import pytest

        pytest.skip("the package registry is not reachable")
    script = tmp_path / "ok.py"
    script.write_text("print('ok')\n")
    table = tmp_path / "table.md"
    done = harness("sweep", str(script), "--along", "lightning", "--torch", "2.12", "--no-build",
                   "--envdir", str(tmp_path / "envs"), "--out", str(table))
    assert done.returncode == 1, done.stdout + done.stderr
    assert "sweep ok.py: lightning 2.6.5 to 2.6.6 at torch 2.12.1, 2 version(s)" in done.stdout
    assert [line.split()[:3] for line in done.stdout.splitlines() if line.startswith("lightning ")] == [
        ["lightning", "2.6.5", "cpu_torch212"], ["lightning", "2.6.6", "cpu_torch212_lightning_newest"]]
    assert "| lightning | session |" in table.read_text() and " at torch 2.12.1" in table.read_text()
    assert not (tmp_path / "envs").exists()


def test_sweep_along_lightning_of_an_unknown_row_is_one_line(tmp_path):
    script = tmp_path / "ok.py"
    script.write_text("print('ok')\n")
    done = harness("sweep", str(script), "--along", "lightning", "--torch", "1.13", "--envdir", str(tmp_path / "envs"))
    assert done.returncode == 2 and done.stderr == "error: --torch 1.13 names no cpu row of the matrix\n", done.stderr
    assert not (tmp_path / "envs").exists()


def test_sweep_writes_the_issue_in_pytorchs_bug_template(tmp_path):
    # The copy.copy bug fails on 2.14 and 2.15 alike and passes nowhere: the expectation is what the
    # script does with torch.compile the identity (it runs).
    script = tmp_path / "copy_under_mode.py"
    script.write_text('"""copy.copy of a tensor in compiled code under a TorchFunctionMode raises"""\n' + USER_SCRIPT)
    table = tmp_path / "table.md"
    done = harness("sweep", str(script), "--from", "2.14", "--to", "2.15", "--out", str(table), "--issue")
    assert done.returncode == 0, done.stdout + done.stderr
    issue = (tmp_path / "table.issue.md").read_text()
    assert issue.startswith("**Title:** copy.copy of a tensor in compiled code under a TorchFunctionMode raises")
    assert "### 🐛 Describe the bug" in issue and "### Versions" in issue and "PyTorch version: 2.15.0" in issue
    assert "Fails on torch 2.14.1, 2.15.0. The first version it fails on: 2.14.1." in issue
    assert "torch.compile replaced by the identity (plain eager) on torch 2.15.0: pass" in issue
    assert "AttributeError: 'NoneType' object has no attribute 'type'" in issue


@pytest.mark.parametrize("command", [["sweep"], ["bisect", "--script"]])
def test_an_interpreter_that_is_not_there_is_one_line_before_anything_runs(tmp_path, command):
    script = tmp_path / "ok.py"
    script.write_text("print('ok')\n")
    missing = tmp_path / "no-venv" / "bin" / "python"
    out = ["--out", str(tmp_path / "table.md")] if command == ["sweep"] else []
    done = harness(*command, str(script), "--env", f"2.15={sys.executable}", "--env", f"2.2.2={missing}", *out)
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr == f"error: --env 2.2.2={missing}: no such interpreter\n", done.stderr
    assert done.stdout == "" and not (tmp_path / "table.md").exists()


def traceback_of(*lines):
    return "\n".join(["Traceback (most recent call last):", '  File "found.py", line 11, in <module>', *lines]) + "\n"


def test_one_bug_is_followed_through_torchs_wrapping_of_its_error_not_through_its_wording():
    # The last lines finding 8's script printed on torch 2.1.2 and 2.15.0 (inductor wraps its lowering
    # errors in InductorError from 2.7), and an older torch without an API the script calls.
    from harness.tools.scriptrun import classify
    from harness.tools.sweep import fails_the_same_way

    newest = classify(1, traceback_of("torch._inductor.exc.InductorError: LoweringException: AssertionError: "
                                      "expected: len(padding) == 2", "  target: aten.avg_pool2d_backward.default"), 1.0)
    oldest = classify(1, traceback_of("torch._inductor.exc.LoweringException: AssertionError: ",
                                      "  target: aten.avg_pool2d_backward.default"), 1.0)
    no_api = classify(1, traceback_of("AttributeError: module 'torch.compiler' has no attribute "
                                      "'nested_compile_region'"), 1.0)
    assert newest.chain == ("InductorError", "LoweringException", "AssertionError")
    assert oldest.chain == ("LoweringException", "AssertionError") and no_api.chain == ("AttributeError",)
    assert fails_the_same_way(oldest, newest) and fails_the_same_way(newest, newest)
    assert not fails_the_same_way(no_api, newest)


def test_the_issue_gives_the_error_a_wrapper_names_on_its_next_lines():
    # torch's BackendCompilerFailed says what it wraps on the lines after its own (finding 4's issue
    # text once ended its Error: line at "raised:")
    from harness.tools.scriptrun import classify

    run = classify(1, traceback_of("torch._dynamo.exc.BackendCompilerFailed: backend='aot_eager' raised:",
                                   "RuntimeError: Activation checkpoint rematerialization does not support RNG ops",
                                   "", "Set TORCHDYNAMO_VERBOSE=1 for the internal stack trace"), 1.0)
    assert run.message == "torch._dynamo.exc.BackendCompilerFailed: backend='aot_eager' raised:"
    assert run.error == ("torch._dynamo.exc.BackendCompilerFailed: backend='aot_eager' raised: "
                         "RuntimeError: Activation checkpoint rematerialization does not support RNG ops")
