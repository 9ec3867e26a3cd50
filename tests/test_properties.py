"""harness.plugin.properties: the table draws the same bounded examples every time, runs all of them and
raises what failed (several ways: a group the outcomes classify leaf by leaf); explore shrinks."""

import pytest
from hypothesis import strategies as st

from harness.core import outcomes
from harness.plugin import properties


class FakeCase:
    def __init__(self, backend="aot_eager"):
        self.backend, self.metrics = backend, {}

    def record(self, **figures):
        self.metrics.update(figures)


def drawn(monkeypatch, explore_n=None, pinned=(), fails=lambda n: False):
    if explore_n is None:
        monkeypatch.delenv(properties.EXPLORE_ENV, raising=False)
    else:
        monkeypatch.setenv(properties.EXPLORE_ENV, str(explore_n))
        monkeypatch.setenv(properties.SEED_ENV, "7")
    case, seen = FakeCase(), []

    def check(n):
        seen.append(n)
        if fails(n):
            raise AssertionError(f"example {n % 2} failed")
    try:
        properties.explore(case, "demo", st.integers(0, 1000), check, pinned=pinned)
    except BaseException as exc:
        return seen, case.metrics["property"], exc
    return seen, case.metrics["property"], None


def test_table_is_deterministic_bounded_and_runs_pinned_first(monkeypatch):
    first, summary, _ = drawn(monkeypatch, pinned=[123])
    again, _, _ = drawn(monkeypatch, pinned=[123])
    assert first == again and first[0] == 123
    assert summary["mode"] == "table" and summary["examples_run"] == len(first)
    assert len(first) <= properties.TABLE_EXAMPLES["aot_eager"] + 1


def test_table_runs_every_example_and_groups_distinct_failures(monkeypatch):
    seen, summary, exc = drawn(monkeypatch, pinned=[2, 3], fails=lambda n: n in (2, 3))
    assert len(seen) == summary["examples_run"] and summary["examples_failed"] == 2
    assert [f["program"] for f in summary["failing_examples"]] == ["2", "3"]
    assert outcomes.leaf_exceptions(exc) and len(outcomes.leaf_exceptions(exc)) == 2
    even = outcomes.Expected("known", "ref#1", ("AssertionError",), "example 0")
    assert outcomes.classify_exception(exc, [even]) == ("fail", None)  # one way is not declared: fail wins
    both = outcomes.Expected("known", "ref#1", ("AssertionError",), "example")
    assert outcomes.classify_exception(exc, [both]) == ("known", "ref#1")


def explored(monkeypatch, fails, declared=(), explore_n=60):
    """An explore run over 0..1000 in which `fails(n)` names the failure of n (None: it passes)."""
    monkeypatch.setenv(properties.EXPLORE_ENV, str(explore_n))
    monkeypatch.setenv(properties.SEED_ENV, "7")
    case, seen = FakeCase(), []
    case.declared = list(declared)

    def check(n):
        seen.append(n)
        if fails(n):
            raise AssertionError(fails(n))
    with pytest.raises(BaseException) as raised:
        properties.explore(case, "demo", st.integers(0, 1000), check, pinned=[-1])
    return seen, case.metrics["property"], raised.value


def test_explore_shrinks_and_records_the_seed(monkeypatch):
    seen, summary, exc = explored(monkeypatch, lambda n: "too big" if n >= 10 else None)
    leaf, = outcomes.leaf_exceptions(exc)
    assert isinstance(leaf, properties.ExampleFailure) and isinstance(leaf.__cause__, AssertionError)
    assert (summary["mode"] == "explore" and summary["seed"] == 7
            and -1 not in seen)  # pinned (outside what is drawn): the table's
    shrunk, = summary["failing_examples"]
    assert shrunk["program"] == "10" and shrunk["outcome"] == "fail"  # hypothesis shrank to the smallest
    assert shrunk["signature"] == "AssertionError: too big"
    assert any("reproduce_failure" in note for note in summary["hypothesis_notes"])


def test_explore_shrinks_each_signature_apart(monkeypatch):
    # Two bugs raise from the same line: hypothesis would take them for one and shrink one of them.
    def fails(n):
        return None if n < 10 else ("an even one" if n % 2 == 0 else "an odd one")
    seen, summary, exc = explored(monkeypatch, fails)
    found = {e["signature"]: e["program"] for e in summary["failing_examples"]}
    assert found == {"AssertionError: an even one": "10", "AssertionError: an odd one": "11"}
    assert {leaf.signature for leaf in outcomes.leaf_exceptions(exc)} == set(found)


def test_explore_goes_on_past_known_failures(monkeypatch):
    # A declared bug must not end the exploration: the new one behind it is found and shrunk.
    known = outcomes.Expected("known", "ref#1", ("AssertionError",), "a known one")
    seen, summary, exc = explored(monkeypatch, lambda n: "a known one" if n < 500 else "a new one", declared=[known])
    by_signature = {e["signature"]: e for e in summary["failing_examples"]}
    assert by_signature["AssertionError: a new one"]["program"] == "500"
    assert by_signature["AssertionError: a known one"]["outcome"] == "known"
    assert by_signature["AssertionError: a known one"]["reference"] == "ref#1"
    assert outcomes.classify_exception(exc, [known]) == ("fail", None)  # the new one decides the cell
    assert summary["examples_run"] <= 60 + 200  # the budget, and hypothesis's shrinking on top


def test_explore_budget_counts_drawn_examples_not_shrinking(monkeypatch):
    # A failure found early shrinks over many runs; the budget still draws its 60 examples after it.
    seen, summary, exc = explored(monkeypatch, lambda n: "too big" if n >= 10 else None)
    assert summary["examples_drawn"] == 60
    assert summary["examples_run"] == len(seen) > 60  # the shrinking's runs on top, recorded


def test_a_wrong_explore_value_is_an_error(monkeypatch):
    monkeypatch.setenv(properties.EXPLORE_ENV, "many")
    with pytest.raises(ValueError):
        properties.explore_examples()


def test_a_failing_example_keeps_its_figures_not_its_times(monkeypatch):
    # Times change from run to run: in the record they would rewrite a line of the table each re-run.
    monkeypatch.delenv(properties.EXPLORE_ENV, raising=False)
    case = FakeCase()

    def check(n):
        case.metrics.update(compile_s=1.5, run_s=0.25, op_class="pointwise")
        raise AssertionError("fails")
    # what is raised depends on the mode (the check's own error, or a class per signature): the record is tested
    with pytest.raises(BaseException):  # noqa: B017
        properties.explore(case, "demo", st.integers(0, 10), check, pinned=[3])
    example = case.metrics["property"]["failing_examples"][0]
    assert example["metrics"] == {"op_class": "pointwise"}
