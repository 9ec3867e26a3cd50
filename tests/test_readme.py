"""The README's set-up and its statements that the code defines: run or compared, not trusted."""

import re
import shutil
import subprocess

import pytest

from harness.core import matrix
from harness.core.outcomes import OUTCOMES
from tests.conftest import ROOT, copy_project

README = (ROOT / "README.md").read_text()


def block_after(marker: str) -> list[str]:
    """The lines of the fenced block after `<!-- marker -->`."""
    text = README.split(f"<!-- {marker} -->", 1)[1]
    return text.split("```", 2)[1].split("\n", 1)[1].strip().splitlines()


def test_the_outcome_table_is_the_one_the_code_defines():
    rows = block_after_table("outcomes")
    assert [r[0].strip("`") for r in rows] == list(OUTCOMES)
    for name, meaning, fails, junit, exit_code in rows:
        outcome = OUTCOMES[name.strip("`")]
        assert (meaning, fails, junit, exit_code) == (
            outcome.meaning, "yes" if outcome.fails_session else "no", outcome.junit,
            "-" if outcome.exit_code is None else str(outcome.exit_code))
    failing = [f"`{n}`" for n, o in OUTCOMES.items() if o.fails_session]
    assert (f"A session exits non-zero when a case is {', '.join(failing[:-1])} or {failing[-1]}"
            in " ".join(README.split()))


def block_after_table(marker: str) -> list[list[str]]:
    text = README.split(f"<!-- {marker} -->", 1)[1].strip().splitlines()
    table = [line for line in text[:text.index("")] if line.startswith("|")] if "" in text else text
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in table[2:]]


def test_ci_runs_the_set_up_lint_and_test_commands_the_readme_gives():
    setup, = block_after("set-up")
    commands = [line.split("#")[0].strip() for line in block_after("commands")]
    test_command, lint_command = "nox -s tests", "nox -s lint"
    assert test_command in commands and lint_command in commands
    ci = (ROOT / ".ci" / "run").read_text()
    assert setup in ci and test_command in ci and lint_command in ci


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("/usr/bin/python3") is None, reason="no system Python at /usr/bin/python3")
def test_the_set_up_works_with_the_system_python_in_one_command(tmp_path):
    setup, = block_after("set-up")
    project = copy_project(tmp_path / "project")
    # The distribution's own interpreter, as on a fresh Debian or Ubuntu (externally managed).
    command = re.sub(r"^python3 ", "/usr/bin/python3 ", setup)
    done = subprocess.run(["bash", "-c", command], cwd=project, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    listed = subprocess.run([str(project / ".venv" / "bin" / "nox"), "-l"], cwd=project, capture_output=True,
                            text=True, timeout=300)
    assert listed.returncode == 0, listed.stderr
    assert f"* {matrix.main_session().name}" in listed.stdout  # the main job, the one plain `nox` runs


def test_every_harness_file_and_module_the_docs_name_exists():
    """The README's and docs' mentions of the harness (`harness/core/records.py`, `harness.core.venvs`)
    follow the code when it moves."""
    named = set()
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = path.read_text()
        named |= {m.rstrip(".,") for m in re.findall(r"\bharness/[\w./-]*", text)}
        named |= {m.replace(".", "/").rstrip("/") for m in re.findall(r"\bharness(?:\.[a-z_]+)+", text)}
    missing = [name for name in sorted(named) if not names_something(name)]
    assert not missing, f"named in the docs, not in the checkout: {missing}"


def names_something(name: str) -> bool:
    """A path (`harness/tools/reduce/passes.py`, a folder) that exists, or a module, or an attribute of
    one (`harness.core.venvs.torch_wheel`: its longest existing prefix is a module file, not a folder,
    so `harness.tools.reduce_passes` names nothing)."""
    if (ROOT / name).exists() or (ROOT / f"{name}.py").exists():
        return True
    for n in range(1, name.count("/")):
        prefix = name.rsplit("/", n)[0]
        if (ROOT / f"{prefix}.py").is_file():
            return True
        if (ROOT / prefix).is_dir():
            return False
    return False


def test_the_docs_name_check_refuses_a_name_under_an_existing_folder():
    assert names_something("harness/tools/reduce/passes.py") and names_something("harness/core/venvs/torch_wheel")
    assert names_something("harness/report/templates")
    assert not names_something("harness/tools/reduce_passes.py") and not names_something("harness/tools/reduce_passes")


def test_the_readme_is_a_guide_and_the_mechanisms_are_in_docs():
    lines = README.splitlines()
    assert len(lines) <= 300, f"README.md is {len(lines)} lines: move mechanisms and measurements to docs/"
    linked = set(re.findall(r"\(docs/([\w-]+\.md)\)", README))
    unlinked = {p.name for p in (ROOT / "docs").glob("*.md")} - linked
    assert not unlinked, f"docs pages the README does not link: {sorted(unlinked)}"
