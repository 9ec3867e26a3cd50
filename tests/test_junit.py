"""results/<session>.xml: one JUnit testcase per case, in the status JUnit has for its outcome."""

import sys
import xml.etree.ElementTree as ElementTree

from harness.core import matrix, pytestrun, records
from harness.core.outcomes import OUTCOMES
from harness.plugin import junit
from tests.conftest import ROOT

FAMILY = '''
import ctypes
import pytest
import torch


def test_passes(case):
    case.check(torch.sin, torch.randn(3, requires_grad=True))


@pytest.mark.upstream_bug("owner/repo#1", raises="RuntimeError", match="boom")
def test_known(case):
    raise RuntimeError("boom")


def test_fails(case):
    raise AssertionError("compiled differs")


def test_skips(case):
    pytest.skip("missing: torch.no_such_api")


def test_crashes(case):
    ctypes.string_at(0)
'''


def test_each_session_writes_junit_beside_its_results(pytester, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    path = pytester.makepyfile(test_family=FAMILY)
    out = pytester.path / "results"
    command = pytestrun.pytest_args(matrix.main_session(), [str(path), f"--results-dir={out}",
                                                                  "--session-name=s"])
    pytester.run(sys.executable, *command, timeout=600)
    suite = ElementTree.parse(out / "s.xml").getroot().find("testsuite")
    back = {r["case"]: r for r in records.read(out / "s.jsonl") if r["kind"] == "case"}
    cases = {f"{c.get('classname')}/{c.get('name')}": c for c in suite.iter("testcase")}
    assert set(cases) == set(back)  # one testcase per record
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors"),
            suite.get("skipped")) == ("5", "1", "1", "2")
    for case_id, element in cases.items():
        outcome = back[case_id]["outcome"]
        properties = {p.get("name"): p.get("value") for p in element.iter("property")}
        assert properties["outcome"] == outcome
        status = OUTCOMES[outcome].junit
        assert [child.tag for child in element if child.tag != "properties"] == ([] if status == "passed" else [status])
    known = cases["family/known"]
    assert properties and known.find("skipped").get("message").startswith("known: owner/repo#1: ")
    assert "Segmentation fault" in cases["family/crashes"].find("error").get("message")

    # file and line: where the test function is, for reporters that annotate the source
    source = (pytester.path / "test_family.py").read_text().splitlines()
    for case_id, element in cases.items():
        assert element.get("file") == "test_family.py", case_id
        line = int(element.get("line"))
        # pytest's location of a function: its first line, the decorators included
        first_def = next(text for text in source[line - 1:] if not text.startswith("@"))
        assert first_def == f"def test_{case_id.split('/')[1]}(case):", case_id
        assert line == 1 or not source[line - 2].startswith("@"), case_id
        assert back[case_id]["location"] == {"file": "test_family.py", "line": line}


def test_a_record_without_location_has_no_file_attribute():
    record = {"kind": "case", "case": "family/old", "family": "family", "outcome": "pass", "duration": 0.1}
    element = junit.testcase(record)
    assert element.get("file") is None and element.get("line") is None


def test_control_characters_in_a_message_leave_the_file_well_formed(tmp_path):
    message = "colour \x1b[31mred\x1b[0m, a NUL \x00, a bell \x07, é and 😀 as they are"
    back = [{"kind": "environment", "session": "s"},
            {"kind": "case", "case": "family/noisy", "family": "family", "outcome": "fail", "exc_type": "RuntimeError",
             "message": message, "output_tail": "tail \x1b[0m\x00", "reference": "a\x07b"}]
    path = tmp_path / "s.xml"
    junit.write(path, back)
    parsed = ElementTree.parse(path).getroot()  # a parser refuses the whole file on one such character
    failure = parsed.find("testsuite/testcase/failure")
    assert failure.get("message") == ("RuntimeError colour \\x1b[31mred\\x1b[0m, a NUL \\x00, a bell \\x07, é and 😀 "
                                      "as they are")
    assert failure.text == "tail \\x1b[0m\\x00"


def test_control_characters_anywhere_in_a_record_leave_the_file_well_formed(tmp_path):
    # a family, a parameter, a reference, an environment field and a lone surrogate: every text XML writes
    back = [{"kind": "environment", "session": "s\x1b", "torch": "2.15\x00"},
            {"kind": "case", "case": "fam\x07ily/v[x=\x1b]", "family": "fam\x07ily", "outcome": "known",
             "reference": "o/r#1\x00", "message": "lone \ud800 surrogate", "nodeid": "n\x0b",
             "location": {"file": "f\x1b.py", "line": 3}}]
    path = tmp_path / "s.xml"
    junit.write(path, back)
    case = ElementTree.parse(path).getroot().find("testsuite/testcase")
    assert case.get("classname") == "fam\\x07ily" and case.get("file") == "f\\x1b.py"
    assert case.find("skipped").get("message") == "known: o/r#1\\x00: lone \\xd800 surrogate"
