"""harness.report.upstream_patch: a finding's fix and its regression test as one patch against upstream,
the test in the file of its neighbours, checked by `git apply --check` on the release's own torch files."""

import ast
import pathlib
import re
import shutil
import subprocess
import sys
import textwrap

import pytest

from harness.report import findings, upstream_patch
from harness.report.results import ReportError
from tests.test_findings import findings_command, project_with_table

COMMIT = "0" * 40
TEST_FILE = "test/dynamo/test_modes.py"
# The shape of an upstream test file: its owner line, imports in usort's order, a helper, the class the
# new tests join, and the main block.
NEIGHBOURS = textwrap.dedent('''\
    # Owner(s): ["module: dynamo"]
    import functools

    import torch
    import torch._dynamo.test_case
    from torch.overrides import BaseTorchFunctionMode, TorchFunctionMode


    class TestMode(BaseTorchFunctionMode):
        pass


    class TorchFunctionModeTests(torch._dynamo.test_case.TestCase):
        def test_neighbour(self):
            self.assertEqual(functools.reduce(int.__add__, [1, 2]), 3)


    if __name__ == "__main__":
        from torch._dynamo.test_case import run_tests

        run_tests()
    ''')


def finding_one() -> findings.Finding:
    return next(finding for finding in findings.load() if finding.number == 1)


def regression_source(finding: findings.Finding) -> str:
    assert finding.fix_path is not None
    return finding.regression_test_path.read_text()


def test_a_regression_test_joins_its_neighbours_class_with_its_helpers_and_imports(tmp_path):
    changed = upstream_patch.with_regression_test(NEIGHBOURS, regression_source(finding_one()),
                                                  "TorchFunctionModeTests")
    module = ast.parse(changed)
    names = [node.name for node in module.body if isinstance(node, ast.ClassDef)]
    assert names == ["TestMode", "PassThrough", "TorchFunctionModeTests"]  # the helper before the class it serves
    tests = next(node for node in module.body if getattr(node, "name", "") == "TorchFunctionModeTests")
    assert [method.name for method in tests.body] == [  # type: ignore[attr-defined]
        "test_neighbour", "test_method_wrapper_of_another_getset_descriptor",
        "test_copy_of_a_tensor_under_a_torch_function_mode"]
    # the one import it lacked, among the standard library's, in order; those it has are not added again
    assert changed.splitlines()[1:3] == ["import copy", "import functools"]
    assert changed.count("import torch._dynamo.test_case") == 1
    # the file runs as upstream's test runner runs it, on real torch: the neighbour passes, and the new
    # test fails on this torch for the finding's reason (no fix here)
    path = tmp_path / "test_modes.py"
    path.write_text(changed)
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rA", str(path),
                           "-k", "neighbour or copy_of_a_tensor"], capture_output=True, text=True, timeout=600)
    assert "PASSED" in done.stdout and re.search(r"FAILED .*test_copy_of_a_tensor_under_a_torch_function_mode",
                                                 done.stdout), done.stdout[-3000:]
    assert "AttributeError: 'NoneType' object has no attribute 'type'" in done.stdout


def test_upstream_gets_no_version_gate_nor_an_import_its_tests_leave_unused_and_a_name_joins_its_module():
    # Finding 4's tests gate on older torch for the project's rows (unittest.skipUnless(hasattr(torch...)),
    # with a comment saying why); its class's base, torch._dynamo.test_case, stays behind with the class.
    finding = next(finding for finding in findings.load() if finding.number == 4)
    upstream = textwrap.dedent('''\
        import torch
        from torch._dynamo.testing import (
            AotEagerAndRecordGraphs,
            EagerAndRecordGraphs,
            empty_line_normalizer,
            InductorAndRecordGraphs,
            normalize_gm,
        )
        from torch.testing._internal.common_utils import run_tests, TestCase
        from torch.utils.checkpoint import checkpoint


        class RematerializeACNodesPassTests(TestCase):
            def test_neighbour(self):
                pass
        ''')
    source = regression_source(finding)
    assert "unittest.skipUnless(hasattr(torch." in source and "The pass is the feature under test" in source
    changed = upstream_patch.with_regression_test(upstream, source, "RematerializeACNodesPassTests")
    assert "skipUnless" not in changed and "The pass is the feature under test" not in changed
    assert "import unittest" not in changed and "torch._dynamo.test_case" not in changed
    assert "import torch.fx.traceback" not in changed  # only its gate read it
    # usort's layout: the name sorted into the statement of its module, case aside, one a line
    assert "    AotEagerAndRecordGraphs,\n    CompileCounterWithBackend,\n    EagerAndRecordGraphs," in changed
    assert changed.count("from torch._dynamo.testing import") == 1
    tests = [node for node in ast.parse(changed).body if isinstance(node, ast.ClassDef)][0]
    assert "test_checkpointed_rng_op_forward_loss_backward_graph_still_raises" in [
        getattr(method, "name", "") for method in tests.body]


def test_where_no_neighbour_class_fits_the_tests_come_as_a_class_of_their_own_before_the_main_block():
    # Finding 9's neighbours upstream (ActivationCheckpointingViaTagsTests) run only on GPUs
    # (instantiate_device_type_tests(..., except_for="cpu")); its tests are about the CPU: a class of their
    # own, with its base's import, which the file lacks here.
    finding = next(finding for finding in findings.load() if finding.number == 9)
    upstream = NEIGHBOURS.replace("import torch._dynamo.test_case\n", "").replace(
        "class TorchFunctionModeTests(torch._dynamo.test_case.TestCase)", "class TorchFunctionModeTests(TestMode)")
    changed = upstream_patch.with_regression_test(upstream, regression_source(finding), "")
    module = ast.parse(changed)
    order = [getattr(node, "name", type(node).__name__) for node in module.body
             if not isinstance(node, (ast.Import, ast.ImportFrom))]
    assert order == ["TestMode", "TorchFunctionModeTests", "dropout_fn", "dropout_fn_no_preserve",
                     "CheckpointRngEagerBackendTests", "If"]
    assert "import torch._dynamo.test_case\n" in changed and "skipIf" not in changed
    with pytest.raises(ReportError, match="already has a class CheckpointRngEagerBackendTests"):
        upstream_patch.with_regression_test(changed, regression_source(finding), "")


def test_a_helper_the_file_defines_otherwise_or_a_test_it_has_already_is_refused():
    source = regression_source(finding_one())
    same = NEIGHBOURS.replace("class TestMode(", "class PassThrough(TorchFunctionMode):\n"
                              "    def __torch_function__(self, func, types, args=(), kwargs=None):\n"
                              "        return func(*args, **(kwargs or {}))\n\n\nclass TestMode(")
    changed = upstream_patch.with_regression_test(same, source, "TorchFunctionModeTests")
    assert changed.count("class PassThrough") == 1  # the same helper, not added twice
    with pytest.raises(ReportError, match="defines PassThrough otherwise"):
        upstream_patch.with_regression_test(same.replace("func(*args", "func(*list(args)"), source,
                                            "TorchFunctionModeTests")
    with pytest.raises(ReportError, match="already has test_copy_of_a_tensor_under_a_torch_function_mode"):
        upstream_patch.with_regression_test(
            NEIGHBOURS.replace("def test_neighbour", "def test_copy_of_a_tensor_under_a_torch_function_mode"), source,
            "TorchFunctionModeTests")
    with pytest.raises(ReportError, match="no class NoSuchTests"):
        upstream_patch.with_regression_test(NEIGHBOURS, source, "NoSuchTests")


def project_pointing_at(tmp_path: pathlib.Path) -> tuple[pathlib.Path, pathlib.Path]:
    """A project copy whose finding 1 puts its test in the planted stored file, and that stored file."""
    project = project_with_table(tmp_path / "project")
    catalogue = project / "results" / "reductions" / "findings.toml"
    text = re.sub(r'(?m)^upstream_test = .*\n', "", catalogue.read_text())
    catalogue.write_text(text.replace(
        "[[finding]]\nnumber = 1\n",
        f'[[finding]]\nnumber = 1\nupstream_test = {{ file = "{TEST_FILE}", commit = "{COMMIT}", '
        'into = "TorchFunctionModeTests" }\n', 1))
    for patch in (project / "results" / "reductions" / "fixes").glob("*.patch"):
        patch.unlink()  # the others name no upstream place here, and finding 1's is written by the test
    stored = tmp_path / "upstream" / COMMIT / TEST_FILE
    stored.parent.mkdir(parents=True)
    stored.write_text(NEIGHBOURS)
    return project, stored


def test_the_patch_is_written_from_its_parts_and_applies_to_the_release_and_the_stored_file(tmp_path):
    project, stored = project_pointing_at(tmp_path)
    upstream = str(stored.parents[3])
    patch = project / "results" / "reductions" / "fixes" / f"{finding_one().stem}.patch"
    done = findings_command(project, "--upstream", upstream, "--python", sys.executable)
    assert done.returncode == 0 and patch.is_file(), done.stdout + done.stderr
    text = patch.read_text()
    import torch

    assert text.startswith(f"Against pytorch/pytorch: torch/ as released in {torch.__version__.split('+')[0]} "
                           f"(git {torch.version.git_version[:7]}),\n{TEST_FILE} as at {COMMIT}.\n")
    assert finding_one().fix_path.read_text() in text and f"+++ b/{TEST_FILE}" in text  # type: ignore[union-attr]
    check = ("--check", "--upstream", upstream, "--python", sys.executable)
    done = findings_command(project, *check)
    assert done.returncode == 0, done.stdout + done.stderr
    # the stored file moved on: the patch is no longer the one its parts make
    stored.write_text(NEIGHBOURS.replace("[1, 2]), 3)", "[1, 2, 3]), 6)"))
    done = findings_command(project, *check)
    assert done.returncode == 1 and done.stdout == (
        f"patch: {patch.name} differs from the one made from its parts and {TEST_FILE}@{COMMIT[:7]}\n"), done.stdout
    # without the stored copies, the committed patch is held to its parts: here one lacks a test
    stored.write_text(NEIGHBOURS)
    patch.write_text(text.replace("+    def test_copy_of_a_tensor_under_a_torch_function_mode(self):\n", ""))
    done = findings_command(project, "--check")
    assert done.returncode == 1 and done.stdout.splitlines()[0] == (
        f"patch: {patch.name}: it does not add test_copy_of_a_tensor_under_a_torch_function_mode"), done.stdout


def test_a_patch_that_does_not_meet_the_torch_files_is_said_by_git_apply(tmp_path):
    import torch

    project, stored = project_pointing_at(tmp_path)
    assert findings_command(project, "--upstream", str(stored.parents[3]), "--python", sys.executable).returncode == 0
    patch = project / "results" / "reductions" / "fixes" / f"{finding_one().stem}.patch"
    # a torch whose builder.py lacks the lines the fix is written against
    package = tmp_path / "other" / "torch"
    source = pathlib.Path(torch.__file__).parent / "_dynamo" / "variables" / "builder.py"
    (package / "_dynamo" / "variables").mkdir(parents=True)
    (package / "_dynamo" / "variables" / "builder.py").write_text(
        source.read_text().replace("we can skip guarding on them.", "we skip guarding on them."))
    why = upstream_patch.applies(patch, package, stored, TEST_FILE)
    assert why is not None and "torch/_dynamo/variables/builder.py" in why
    assert upstream_patch.applies(patch, source.parents[2], stored, TEST_FILE) is None


def test_the_committed_patches_are_made_of_their_fixes_and_tests():
    # Every finding with a fix and an upstream place has its patch; each holds its .diff as it is and
    # adds each of its regression tests (findings --check says so on the checkout; without the stored
    # files, only this much is checked).
    placed = [finding for finding in findings.load() if finding.upstream_test and finding.fix_path]
    assert placed
    for finding in placed:
        assert upstream_patch.check_patch(finding, None, None, write=False) == [], finding.number
    assert shutil.which("git")


def test_check_verifies_the_patch_alone_with_its_tests_among_their_neighbours(tmp_path):
    # fixes/check.py --upstream, as docs/findings.md gives it: the patch's torch/ part on a copy of this
    # torch, its test part on a copy of the stored file; the script and the added tests fail before and
    # pass after, the neighbour passes both times.
    project, stored = project_pointing_at(tmp_path)
    upstream = str(stored.parents[3])
    assert findings_command(project, "--upstream", upstream, "--python", sys.executable).returncode == 0
    check = [sys.executable, "results/reductions/fixes/check.py", sys.executable, finding_one().stem, "--upstream",
             upstream]
    done = subprocess.run(check, cwd=project, capture_output=True, text=True, timeout=900)
    said = done.stdout.splitlines()
    assert done.returncode == 0 and said[-1] == "the fix holds", done.stdout + done.stderr
    assert "script: exit 1 before, 0 after: as expected" in said
    assert "added test_copy_of_a_tensor_under_a_torch_function_mode: FAILED before, PASSED after: as expected" in said
    assert f"its neighbours in {TEST_FILE}: before {{'PASSED': 1}}, after {{'PASSED': 1}}" in said
    assert not list(tmp_path.glob("**/fix-check-*"))  # its copies are gone with it


def test_a_patch_carries_what_its_fix_changes_in_its_neighbours_expectations():
    # Finding 3's fix changes what two of its neighbours print (test_gen_schema's forward schema):
    # the committed patch holds those lines, and one without them is said.
    finding = next(finding for finding in findings.load() if finding.number == 3)
    assert finding.fix_path is not None
    neighbours = finding.neighbours_path.read_text()
    patch = finding.patch_path.read_text()
    expected = ('+            """invoke_subgraph(Any subgraph, str identifier, Tensor arg0, Tensor arg1) '
                '-> ((Tensor))""",')
    assert expected in neighbours.splitlines() and expected in patch.splitlines()
    parts = (finding.fix_path.read_text(), regression_source(finding), neighbours)
    assert upstream_patch.made_of(patch, *parts) == []
    assert upstream_patch.made_of(patch.replace(expected + "\n", ""), *parts) == [
        "it lacks what fixes/SCRIPT.neighbours.diff changes"]
