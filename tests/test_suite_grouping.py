"""The suite's own scheduling holds: `nox -s tests` runs pytest-xdist with `--dist loadgroup`, and the
tests of one xdist group run on one worker, one at a time (tests/test_isolation.py's eight fault kinds
share one session run, made once per worker). With pytest 9.2 and pytest-xdist 3.8 the groups were
silently spread over the workers (pyproject.toml pins pytest below 9.2 for the suite); this shows
whether the installed pair keeps them."""

import json

GROUPED = '''
import json, os, pathlib
import pytest

@pytest.mark.xdist_group("shared")
@pytest.mark.parametrize("n", range(8))
def test_grouped(n):
    pathlib.Path(os.environ["WHERE"], f"{n}.json").write_text(json.dumps(os.environ["PYTEST_XDIST_WORKER"]))


@pytest.mark.parametrize("n", range(8))
def test_spread(n):
    pass
'''


def test_an_xdist_group_runs_on_one_worker(pytester, monkeypatch):
    monkeypatch.setenv("WHERE", str(pytester.path))
    pytester.makepyfile(test_grouped=GROUPED)
    result = pytester.runpytest_subprocess("-n", "2", "--dist", "loadgroup", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=16)
    workers = {json.loads((pytester.path / f"{n}.json").read_text()) for n in range(8)}
    assert len(workers) == 1, f"one xdist_group ran on {sorted(workers)}: --dist loadgroup does not group"
