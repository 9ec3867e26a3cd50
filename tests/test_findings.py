"""The findings catalogue (results/reductions/findings.toml): each bug README's "Found here" names is
on exactly one card of the committed table, with its reduced script, issue text and upstream search;
a finding whose failure changed shape is said, never left on a card it no longer describes."""

import pathlib
import re
import shutil
import subprocess
import sys

import pytest

from harness.core import paths
from harness.report import finding_issue, findings, render
from harness.report.results import ReportError
from tests.test_report import write_session

README_FINDING = re.compile(r"^(\d+)\. ", re.M)


def readme_unreported() -> list[int]:
    """The numbers of README's "Found here" list that its opening line says nobody reported."""
    text = (paths.ROOT / "README.md").read_text()
    found = text[text.index("## Found here"):]
    found = found[: found.index("\n## ", 1)]
    opening = re.search(r"^1-(\d+) found no report upstream", found, re.M)
    assert opening, "README's Found here opens with the range of unreported findings"
    return [n for n in map(int, README_FINDING.findall(found)) if n <= int(opening.group(1))]


def test_each_readme_finding_is_on_exactly_one_card_of_the_committed_table():
    catalogue = findings.load()
    assert sorted(f.number for f in catalogue) == readme_unreported()
    data = render.build([paths.ROOT / "results"])
    assert data["findings_unmatched"] == []
    on_cards = [card["finding"]["number"] for card in data["failing"] if card["finding"]]
    assert sorted(on_cards) == readme_unreported()  # each once
    for card in data["failing"]:
        if card["finding"]:
            assert card["status"] == "new", card["number"]  # a catalogued finding is one nobody reported
            for key in ("script", "issue", "fix", "regression_test"):
                if key in ("script", "issue") or card["finding"]["fix"]:
                    assert (paths.ROOT / card["finding"][key]).is_file(), card["finding"][key]
            assert card["finding"]["search_link"].startswith("https://github.com/pytorch/pytorch/issues?q=")


def test_a_finding_whose_failure_changed_is_said_and_on_no_card(tmp_path):
    catalogue = tmp_path / "findings.toml"
    catalogue.write_text('[[finding]]\nnumber = 1\ntitle = "a wrong gradient"\ncases = ["checkpoint/plain"]\n'
                         'signature = "^AssertionError: gradient"\nscript = "found_x.py"\nsearch = "wrong gradient"\n')
    case = "checkpoint/plain_checkpoint[cpu-inductor-fullgraph]"
    for message in ("gradient 0 is wrong", "now it raises something else"):
        table = tmp_path / message.replace(" ", "_")
        write_session(table, "cpu_torch215", "2.15.0", {case: {"outcome": "fail", "message": message}})
        cards = render.build([table])["failing"]
        unmatched = findings.attach(cards, findings.load(catalogue))
        if message.startswith("gradient"):
            assert unmatched == [] and cards[0]["finding"]["script"] == "results/reductions/found_x.py"
        else:
            assert cards[0]["finding"] is None and [(f["number"], f["cards"]) for f in unmatched] == [(1, [])]


def test_a_broken_catalogue_is_one_clear_error(tmp_path):
    catalogue = tmp_path / "findings.toml"
    catalogue.write_text('[[finding]]\nnumber = 1\ntitle = "x"\n')
    with pytest.raises(ReportError, match=r"findings.toml: not a findings catalogue: 'cases'"):
        findings.load(catalogue)


def test_a_proposed_fix_applies_to_the_torch_it_names_and_its_card_links_it():
    # The diffs are written against the newest row's torch, which the tests venv holds: each still
    # applies there (fixes/check.py runs the script and the test before and after; docs/findings.md).
    import pathlib
    import shutil
    import subprocess

    import torch

    # a fix is SCRIPT.diff, or SCRIPT.aten.diff where it is in ATen's C++ (against a source file its first
    # line names: fixes/check.py --aten builds it); SCRIPT.neighbours.diff is what it changes in its upstream
    # neighbours' tests
    fixes = sorted(d for d in (paths.ROOT / "results" / "reductions" / "fixes").glob("*.diff")
                   if not d.name.endswith(".neighbours.diff"))
    assert fixes
    site = pathlib.Path(torch.__file__).parent.parent
    stems = {diff: diff.name.removesuffix(".diff").removesuffix(".aten") for diff in fixes}  # the script's name
    for diff, stem in stems.items():
        assert (diff.parent / f"test_{stem}.py").is_file() and (diff.parent.parent / f"{stem}.py").is_file()
        if diff.name.endswith(".aten.diff"):  # no C++ source in a wheel to apply it to
            assert re.match(r"Against aten/\S+ as at [0-9a-f]{40} ", diff.read_text()), diff.name
        elif shutil.which("patch"):
            done = subprocess.run(["patch", "-p1", "--dry-run", "--forward", "--fuzz=0", "-i", str(diff)], cwd=site,
                                  capture_output=True, text=True)
            assert done.returncode == 0, (diff.name, torch.__version__, done.stdout, done.stderr)
    data = render.build([paths.ROOT / "results"])
    linked = {card["finding"]["fix"] for card in data["failing"] if card["finding"] and card["finding"]["fix"]}
    assert linked == {f"results/reductions/fixes/{d.name}" for d in fixes}
    patches = sorted((paths.ROOT / "results" / "reductions" / "fixes").glob("*.patch"))
    assert {card["finding"]["patch"] for card in data["failing"] if card["finding"] and card["finding"]["patch"]} == {
        f"results/reductions/fixes/{p.name}" for p in patches}
    # report.html shows every card; REPORT.md the first MD_CARDS (its strip names every bug)
    in_markdown = {card["finding"]["fix"] for card in data["failing"][:render.MD_CARDS] if card["finding"]}
    for page, shown in ((render.render_markdown(data), in_markdown), (render.render_html(data), linked)):
        for diff, stem in stems.items():
            test = f"fixes/test_{stem}.py"
            wanted = f"results/reductions/fixes/{diff.name}" in shown
            assert (f"fixes/{diff.name}" in page and test in page) == wanted, diff.name
        assert all(f"fixes/{p.name}" in page for p in patches if f"results/reductions/fixes/{p.stem}.diff" in shown)


def findings_command(project, *args):
    """`python -m harness findings ARGS` as users run it, in `project` (a checkout)."""
    return subprocess.run([sys.executable, "-m", "harness", "findings", *args], cwd=project, capture_output=True,
                          text=True, timeout=120)


def test_each_issue_text_carries_its_root_cause_fix_and_upstream_search_from_the_catalogue(tmp_path):
    # The committed issue texts are what the catalogue and fixes/ say now.
    done = findings_command(paths.ROOT, "--check")
    assert done.returncode == 0, done.stdout + done.stderr
    project = project_with_table(tmp_path / "project")
    catalogue = project / "results" / "reductions" / "findings.toml"
    catalogue.write_text(catalogue.read_text().replace(
        "InvokeSubgraph.create: the device of the region's output layout", "InvokeSubgraph.create: THE DEVICE"))
    issue = project / "results" / "reductions" / "found_region_factory_called_twice_inductor.md"
    before = issue.read_text()
    done = findings_command(project, "--check")
    assert (done.returncode, done.stdout) == (1, f"differs: {issue.relative_to(project)}\n"), done.stderr
    assert issue.read_text() == before  # --check writes nothing
    assert findings_command(project).returncode == 0
    text = issue.read_text()
    assert findings_command(project, "--check").returncode == 0  # written once, the same thereafter
    # one part, between the bug and its Versions: the cause as the catalogue says it, the diff whole,
    # the regression test, the queries and the related threads
    part = text[text.index(finding_issue.START):text.index(finding_issue.END)]
    assert text.index(finding_issue.END) < text.index("### Versions") and text.count(finding_issue.START) == 1
    assert "InvokeSubgraph.create: THE DEVICE" in part and "THE DEVICE" not in before
    fixes = project / "results" / "reductions" / "fixes"
    assert (fixes / "found_region_factory_called_twice_inductor.diff").read_text().strip() in part
    # the fix and its test as one patch, the test among its neighbours upstream
    assert "+    def test_factory_region_called_twice(self):" in part and "### Searched upstream" in part
    assert "+++ b/test/higher_order_ops/test_invoke_subgraph.py" in part
    assert "### History\n\nNew bug. `InvokeSubgraph.create` has taken its output's device" in part
    # a finding without its issue text: one line, exit 2, the others' files left as they were
    issue.unlink()
    done = findings_command(project)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "issue text is missing" in done.stderr, done.stderr


def regressions_command(*args) -> subprocess.CompletedProcess:
    """`python -m harness regressions ARGS` as users run it, on the newest row, whose torch the tests venv holds."""
    from tests.test_isolation import SESSION

    return subprocess.run([sys.executable, "-m", "harness", "regressions", SESSION.name, "--python", sys.executable,
                           *args], cwd=paths.ROOT, capture_output=True, text=True, timeout=1800)


def test_each_regression_test_agrees_with_the_newest_row_of_the_table():
    # Every finding holds a cell on the newest row: each test that runs the table's program or meets
    # the cause must fail there, as a test (a file that cannot be collected disagrees), and each check
    # of what a fix must keep working must pass. The other rows: docs/findings.md, and the nightly.
    done = regressions_command()
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr
    assert "every regression test agrees with the table" in done.stdout
    assert done.stdout.count(": failed, the table expects fail: agrees") >= 8, done.stdout


def test_a_regression_test_that_fails_where_the_table_has_no_bug_disagrees(tmp_path):
    # The same row with finding 1's cells passing: its table-program test still fails, which now
    # disagrees; its cause test may fail there (the cause is older than the cells), and says so.
    import json

    from tests.test_isolation import SESSION

    table = tmp_path / "results"
    table.mkdir()
    lines = []
    for line in paths.results_path(SESSION.name).read_text().splitlines():
        record = json.loads(line)
        if (record.get("kind") == "case"
                and record["case"].startswith("empty_init/copy_copy_in_compiled_fn_under_mode[")):
            record.update(outcome="pass", message=None, exc_type=None)
        lines.append(json.dumps(record))
    paths.results_path(SESSION.name, table).write_text("\n".join(lines) + "\n")
    done = regressions_command("--finding", "1", "--results", str(table))
    assert done.returncode == 1, done.stdout + done.stderr
    assert ("finding 1 [absent] test_copy_of_a_tensor_under_a_torch_function_mode: failed, the table expects pass: "
            "DISAGREES") in done.stdout, done.stdout
    assert "test_method_wrapper_of_another_getset_descriptor: failed, the table expects fail or pass: agrees (the " \
           "cause, older than the table's cells)" in done.stdout, done.stdout


def test_a_regression_file_that_cannot_be_collected_is_no_failed_test(tmp_path):
    # pytest's JUnit names a collection error after the module: that is "cannot run", never a test
    from harness.tools import testfile

    broken = tmp_path / "test_found_broken.py"
    broken.write_text("import torch\ntorch.compiler.no_such_function\n")
    said = testfile.run_file(pathlib.Path(sys.executable), broken, tmp_path / "work1")
    assert isinstance(said, str) and "AttributeError" in said, said
    plain = tmp_path / "test_found_plain.py"
    plain.write_text("import unittest\n\n\nclass T(unittest.TestCase):\n    def test_passes(self):\n        pass\n\n"
                     "    def test_fails(self):\n        self.fail('the bug')\n\n"
                     "    @unittest.skip('not here')\n    def test_skipped(self):\n        pass\n")
    assert testfile.run_file(pathlib.Path(sys.executable), plain, tmp_path / "work2") == {
        "test_passes": "passed", "test_fails": "failed", "test_skipped": "skipped"}


HEADER_DIR_PROBE = """import os
import pathlib
import tempfile

from torch._inductor import codecache


def test_where_inductor_keeps_its_precompiled_headers():
    here = pathlib.Path(__file__).parent
    (here / "where.txt").write_text(os.path.realpath(codecache._HEADER_DIR) + "\\n" + tempfile.gettempdir())
"""


def test_regression_files_share_inductors_precompiled_headers_and_keep_their_temporary_directories(tmp_path):
    # Where torch itself (its default_cache_dir(), under each file's TMPDIR) puts the headers, read in two
    # files' runs: one folder of the run for both; every other temporary file in the file's own directory.
    from harness.tools import testfile

    work = tmp_path / "work"
    for name in ("test_found_first.py", "test_found_second.py"):
        (tmp_path / name).write_text(HEADER_DIR_PROBE)
        assert testfile.run_file(pathlib.Path(sys.executable), tmp_path / name, work) == {
            "test_where_inductor_keeps_its_precompiled_headers": "passed"}
        headers, temporary = (work / pathlib.Path(name).stem / "where.txt").read_text().splitlines()
        assert headers == str((work / testfile.PRECOMPILED_HEADERS).resolve())
        assert pathlib.Path(temporary).resolve().is_relative_to((work / pathlib.Path(name).stem).resolve())


def project_with_table(target: pathlib.Path) -> pathlib.Path:
    """A copy of the project with the committed table and its reductions, outside git."""
    from tests.conftest import copy_project

    project = copy_project(target)
    shutil.copytree(paths.ROOT / "results", project / "results", ignore=shutil.ignore_patterns("report*"))
    shutil.copy2(paths.ROOT / "README.md", project / "README.md")
    return project


def test_a_findings_script_and_its_cells_that_disagree_unexplained_fail_the_check(tmp_path):
    # The committed table: every disagreement between a script, swept, and its card's cells is said.
    project = project_with_table(tmp_path / "project")
    catalogue = project / "results" / "reductions" / "findings.toml"
    text = catalogue.read_text()
    assert findings_command(project, "--check").returncode == 0
    # finding 1's script fails on 2.11.0, where its cells pass: without the reason, the check fails
    catalogue.write_text(re.sub(r"^span_note = .*\n", "", text, count=1, flags=re.M))
    done = findings_command(project, "--check")
    assert done.returncode == 1 and done.stdout == (
        "disagrees: finding 1: the script fails on 2.11.0, where the cells ran and did not fail this way "
        "(findings.toml gives no span_note)\n"), done.stdout + done.stderr
    # a finding that gives no history of the code it blames
    catalogue.write_text(re.sub(r"^history = .*\n", "", text, count=1, flags=re.M))
    done = findings_command(project, "--check")
    assert done.returncode == 1 and "incomplete: finding 1: no history" in done.stdout, done.stdout + done.stderr
    # an issue text that says the script fails another way where the cells fail this way (finding 8's
    # sweep before it followed the bug through torch's wrapping of the error), and passes where they fail
    catalogue.write_text(text)
    issue = project / "results" / "reductions" / "found_avg_pool2d_backward_1_element_padding.md"
    issue.write_text(issue.read_text().replace(
        "Fails on torch 2.1.2, 2.8.0, 2.12.1, 2.15.0. The first version it fails on: 2.1.2.",
        "Fails on torch 2.8.0, 2.15.0; passes on 2.12.1. The first version it fails on: 2.8.0. "
        "Fails otherwise on 2.1.2 (torch._inductor.exc.LoweringException: AssertionError:)."))
    done = findings_command(project, "--check")
    assert done.returncode == 1 and done.stdout == (
        "disagrees: finding 8: the script passes on 2.12.1, where the cells fail; the script fails another way "
        "on 2.1.2, where the cells fail this way (findings.toml gives no span_note)\n"), done.stdout + done.stderr


def test_the_sweep_line_reads_back_as_it_was_written():
    from harness.core import swept

    for said in (swept.Swept(("2.8.0", "2.15.0"), ("2.1.2", "2.12.1"), (("2.2.2", "AttributeError: x (y); z"),)),
                 swept.Swept(("2.1.2",))):
        assert swept.read(f"text\n\n{said.line()}\n\nmore") == said
    for path in sorted((paths.ROOT / "results" / "reductions").glob("found_*.md")):  # every committed one
        assert swept.read(path.read_text()) is not None, path.name


def test_a_kind_or_history_that_says_otherwise_of_the_versions_than_the_sweep_fails_the_check(tmp_path):
    # Finding 4's history puts its regression between 2.12.1 (swept passing) and 2.13.0 (failing), as its
    # sweep has it; finding 7's script fails on every release swept, so it cannot be a regression.
    project = project_with_table(tmp_path / "project")
    catalogue = project / "results" / "reductions" / "findings.toml"
    text = catalogue.read_text()
    assert "between 2.12.1 and 2.13.0" in text
    catalogue.write_text(text.replace("between 2.12.1 and 2.13.0", "between 2.13.0 and 2.14.1"))
    done = findings_command(project, "--check")
    disagrees = [line for line in done.stdout.splitlines() if line.startswith("disagrees:")]  # and its text differs
    assert done.returncode == 1 and disagrees == [
        "disagrees: finding 4: its history puts the change after 2.13.0, where the script fails"], done.stdout
    seventh = text.index("number = 7\n")
    kind = text.index('kind = "new bug"', seventh)
    catalogue.write_text(text[:kind] + 'kind = "regression of a fix"' + text[kind + len('kind = "new bug"'):])
    done = findings_command(project, "--check")
    disagrees = [line for line in done.stdout.splitlines() if line.startswith("disagrees:")]
    assert done.returncode == 1 and disagrees == [
        "disagrees: finding 7: a regression, yet no release older than 2.8.0, where its script first fails, "
        "was swept passing"], done.stdout


# A planted ATen fix for fixes/check.py --aten: a kernel of a real CompositeImplicitAutograd op (ravel) that
# reads numel(), which throws under symbolic sizes, and its fix. The wheel's own ravel has no such bug, so
# only the control (the stored file rebuilt as it is) can fail: the verdict must say the fix does not hold.
RAVEL_SOURCE = """#include <ATen/core/Tensor.h>
#include <ATen/ops/ravel_native.h>

namespace at::native {
Tensor ravel(const Tensor& self) {
  TORCH_CHECK(self.numel() >= 0, "ravel: a size below zero");
  return self.contiguous().view(-1);
}
} // namespace at::native
"""
RAVEL_SCRIPT = """import torch
def flat(x):
    return torch.ravel(x)
x = torch.randn(3, 4)
assert torch.equal(torch.compile(flat, backend="eager", dynamic=True)(x), x.ravel())
"""


def test_an_aten_fix_is_built_as_stored_and_patched_over_the_wheels_kernel(tmp_path):
    fixes = tmp_path / "reductions" / "fixes"
    fixes.mkdir(parents=True)
    shutil.copy2(paths.ROOT / "results" / "reductions" / "fixes" / "check.py", fixes / "check.py")
    (tmp_path / "reductions" / "findings.toml").write_text(
        '[[finding]]\nnumber = 1\nscript = "found_ravel.py"\n'
        'aten_fix = { kernels = ["ravel"], dispatch_key = "CompositeImplicitAutograd" }\n')
    (tmp_path / "reductions" / "found_ravel.py").write_text(RAVEL_SCRIPT)
    (fixes / "test_found_ravel.py").write_text(RAVEL_SCRIPT)
    commit, path = "1" * 40, "aten/src/ATen/native/Ravel.cpp"
    (tmp_path / "stored" / commit / path).parent.mkdir(parents=True)
    (tmp_path / "stored" / commit / path).write_text(RAVEL_SOURCE)
    (fixes / "found_ravel.aten.diff").write_text(
        f"Against {path} as at {commit} (a plant).\n\n--- a/{path}\n+++ b/{path}\n@@ -5,3 +5,3 @@\n"
        " Tensor ravel(const Tensor& self) {\n-  TORCH_CHECK(self.numel() >= 0, \"ravel: a size below zero\");\n"
        "+  TORCH_CHECK(self.sym_numel() >= 0, \"ravel: a size below zero\");\n   return self.contiguous().view(-1);\n")
    done = subprocess.run([sys.executable, str(fixes / "check.py"), sys.executable, "found_ravel", "--aten",
                           str(tmp_path / "stored")], capture_output=True, text=True, timeout=600)
    said = done.stdout.splitlines()
    # the wheel's ravel passes; the stored kernel, rebuilt, replaces it and fails; the patched one passes
    assert "script: exit 0 without, 1 with the control, 0 with the fix: NOT as expected" in said, \
        done.stdout + done.stderr
    assert "regression test: exit 0 without, 1 with the control, 0 with the fix: NOT as expected" in said
    assert done.returncode == 1 and said[-1] == "the fix does NOT hold"
