"""Which cases a Lightning-axis session runs: those whose source reaches Lightning, less the
parametrisations marked `without_lightning` (controls), through pytest's own collection. (Helpers
are followed only under cases/: the project's own cases show that.)"""

import subprocess
import sys

from tests.conftest import ROOT

CASES = '''
import pytest


def test_imports_lightning():
    import lightning  # noqa: F401


def test_imports_from_lightning():
    from pytorch_lightning import Trainer  # noqa: F401


@pytest.mark.parametrize("mode", ["empty_init", pytest.param("plain_mode", marks=pytest.mark.without_lightning)])
def test_with_a_control(mode):
    if mode == "empty_init":
        need("lightning.fabric.utilities.init._EmptyInit")


def test_plain_torch():
    import torch  # noqa: F401
'''


def collected(pytester, *args) -> set[str]:
    pytester.makepyfile(test_family=CASES)
    result = pytester.runpytest("-p", "harness.plugin", "--collect-only", "-q", *args)
    return {line.split("::", 1)[1] for line in result.outlines if "::" in line}


def test_a_lightning_session_runs_the_cases_that_reach_lightning_but_not_their_controls(pytester):
    assert collected(pytester, "--lightning-cases") == {
        "test_imports_lightning", "test_imports_from_lightning", "test_with_a_control[empty_init]"}


def test_a_plain_session_runs_every_case(pytester):
    assert collected(pytester) == {"test_imports_lightning", "test_imports_from_lightning",
                                   "test_with_a_control[empty_init]", "test_with_a_control[plain_mode]",
                                   "test_plain_torch"}


def test_the_projects_lightning_cases_leave_out_their_controls():
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "harness.plugin", "--lightning-cases",
                           "--collect-only", "-q", "-p", "no:cacheprovider", "cases/"], cwd=ROOT, capture_output=True,
                          text=True)
    ids = [line for line in done.stdout.splitlines() if "::" in line]
    assert ids, done.stdout + done.stderr
    assert all("test_empty_init.py" in i for i in ids)  # no other family reaches Lightning today
    assert not [i for i in ids if "pass_through" in i or "branchless_skip_init" in i]
    assert [i for i in ids if "empty_init_enabled" in i]
