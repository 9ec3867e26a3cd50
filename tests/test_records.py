import json
import os
import re
import shutil

import pytest

from harness.core import paths, records, resultsfile

ENV = {"kind": "environment", "session": "s"}
CASE = {"kind": "case", "case": "f/v", "outcome": "pass"}


def test_written_records_read_back(tmp_path):
    writer = resultsfile.ResultsWriter(tmp_path / "s.jsonl")
    writer.write(ENV)
    writer.write(CASE)
    # on disk before close: a killed run keeps what it wrote
    assert len(records.read(tmp_path / "s.jsonl")) == 2
    writer.close()
    back = records.read(tmp_path / "s.jsonl")
    assert [r["kind"] for r in back] == ["environment", "case"]
    assert all(r["schema"] == records.SCHEMA_VERSION for r in back)


def test_a_second_run_keeps_the_first_file(tmp_path):
    first = resultsfile.ResultsWriter(tmp_path / "s.jsonl")
    first.write(ENV)
    first.close()
    second = resultsfile.ResultsWriter(tmp_path / "s.jsonl")
    second.close()
    kept = list((tmp_path / "previous").iterdir())
    assert len(kept) == 1 and records.read(kept[0])[0] == {"schema": 2, **ENV, "identity": records.identity("s")}



def test_a_file_that_cannot_be_made_again_leaves_the_writer_closed_once(tmp_path):
    """The results directory removed mid-session and replaced by a file: the writer cannot make its file
    again, says so, and is closed; its close() then closes nothing else (the descriptor number it had may
    belong to another file by then)."""
    results = tmp_path / "results"
    writer = resultsfile.ResultsWriter(results / "s.jsonl")
    writer.write(ENV)
    shutil.rmtree(results)
    results.write_text("not a directory")
    with pytest.raises(records.ResultsError, match="cannot write results to"):
        writer.write(CASE)
    other = os.open(tmp_path / "other", os.O_RDWR | os.O_CREAT)  # the lowest free number: the writer's, were it closed
    try:
        writer.close()
        os.fstat(other)  # still open
    finally:
        os.close(other)
    with pytest.raises(ValueError, match="closed"):
        writer.write(CASE)


def test_schema_1_records_read_in_todays_form(tmp_path):
    """Schema 1 listed references in `upstream`, the matched one first; it stays readable."""
    path = tmp_path / "s.jsonl"
    old = [{"schema": 1, **ENV},
           {"schema": 1, **CASE, "outcome": "known", "upstream": ["owner/repo#1", "owner/repo#2"]},
           {"schema": 1, **CASE, "case": "f/w", "outcome": "fail", "upstream": ["owner/repo#3", "owner/repo#3"]}]
    path.write_text("".join(json.dumps(r) + "\n" for r in old))
    _, known, failed = records.read(path)
    assert known["reference"] == "owner/repo#1" and "upstream" not in known
    assert [d["ref"] for d in known["declared"]] == ["owner/repo#1", "owner/repo#2"]
    assert failed["reference"] is None and failed["declared"] == [{"ref": "owner/repo#3"}]


def test_unwritable_directory_is_a_clear_error(tmp_path):
    target = tmp_path / "ro"
    target.mkdir()
    os.chmod(target, 0o500)
    if os.access(target, os.W_OK):  # root ignores permissions
        target = tmp_path / "file-not-dir"
        target.write_text("")
    with pytest.raises(records.ResultsError, match="cannot write results to"):
        resultsfile.ResultsWriter(target / "s.jsonl")


@pytest.mark.parametrize(
    ("lines", "error"),
    [
        ([json.dumps({"schema": 1, **CASE})], r"s.jsonl:1: the file does not start with an environment record"),
        ([json.dumps({"schema": 99, **ENV})], r"s.jsonl:1: schema 99"),
        (["[1, 2]"], r"s.jsonl:1: not a harness record"),
        (['{"schema": 1, "kind": "environ'], r"s.jsonl:1: not a JSON record"),
    ],
)
def test_a_file_that_is_not_a_results_file_names_file_and_line(tmp_path, lines, error):
    path = tmp_path / "s.jsonl"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(records.ResultsError, match=error):
        records.read(path)


@pytest.mark.parametrize(
    ("line", "why"),
    [
        ('{"schema": 1, "kind": "case", "outc', "line 2: not a JSON record"),
        (json.dumps({"schema": 99, **CASE}), "line 2: schema 99"),
        (json.dumps({"schema": 1, **CASE, "outcome": "great"}), "line 2: unknown outcome 'great'"),
        ("[1, 2]", "line 2: not a harness record"),
        ("\udcff not utf-8", "line 2: not UTF-8 text"),
    ],
)
def test_a_line_among_the_records_that_is_not_one_is_passed_over_and_said(tmp_path, line, why):
    # A process a case started may write into the results file, after the session too: the file stays
    # readable, and the reader says what it passed over.
    path = tmp_path / "s.jsonl"
    path.write_bytes("\n".join([json.dumps({"schema": 1, **ENV}), line, json.dumps({"schema": 1, **CASE})])
                     .encode(errors="surrogateescape") + b"\n")
    said = []
    back = records.read(path, passed_over=said.append)
    assert [r["kind"] for r in back] == ["environment", "case"]
    assert len(said) == 1 and said[0].startswith(f"{path}: 1 line(s)") and why in said[0], said


def test_find_case_passes_over_a_line_cut_by_a_kill(tmp_path):
    path = tmp_path / "s.jsonl"
    path.write_text("\n".join([json.dumps({"schema": 1, **ENV}), json.dumps({"schema": 1, **CASE}),
                               '{"schema": 1, "kind": "case", "case": "f/v", "outc']) + "\n")
    environment, record = records.find_case(path, "f/v")
    assert environment["session"] == "s" and record["outcome"] == "pass"
    assert records.find_case(tmp_path / "missing.jsonl", "f/v") == (None, None)


def test_records_carry_no_path_of_this_machine(tmp_path):
    import sys

    from tests.conftest import ROOT

    path = tmp_path / "s.jsonl"
    writer = resultsfile.ResultsWriter(path)
    writer.write({"kind": "environment", "python_executable": sys.executable})
    writer.write({"kind": "case", "case": "f/v", "outcome": "fail",
                  "message": f"inline in skipfiles: {ROOT}/cases/test_f.py | inner {sys.prefix}/lib/x.py"})
    writer.close()
    text = path.read_text()
    assert str(ROOT) not in text and sys.prefix not in text
    back = records.read(path)
    assert back[0]["python_executable"].startswith(("<venv>/", "<python>/"))
    assert back[1]["message"].startswith("inline in skipfiles: cases/test_f.py | inner <")


def test_schema_1_files_read_as_schema_2(tmp_path):
    """Results written before `reference`/`declared` and the environment's identity stay readable:
    the matched reference is the first of `upstream` where the outcome names one."""
    path = paths.results_path("cpu_torch25_py310_pyg", tmp_path)
    old = [{"schema": 1, "kind": "environment", "session": "cpu_torch25_py310_pyg", "torch": "2.5.1+cu124"},
           {"schema": 1, **CASE, "case": "f/a", "outcome": "known", "upstream": ["o/r#1", "o/r#2"]},
           {"schema": 1, **CASE, "case": "f/b", "outcome": "fail", "upstream": ["o/r#1"]},
           {"schema": 1, **CASE, "case": "f/c", "outcome": "fixed", "upstream": ["o/r#3"]},
           {"schema": 1, "kind": "end", "exitstatus": 0}]
    path.write_text("".join(json.dumps(r) + "\n" for r in old))
    environment, *cases, end = records.read(path)
    assert environment["identity"] == {"session": "cpu_torch25_py310_pyg", "device": "cpu", "line": "cpu",
                                       "row": "2.5.1", "label": "py310_pyg", "plain": "cpu_torch25",
                                       "lightning_of": None}  # the matrix's
    assert [(c["reference"], c["declared"]) for c in cases] == [
        ("o/r#1", [{"ref": "o/r#1"}, {"ref": "o/r#2"}]), (None, [{"ref": "o/r#1"}]), ("o/r#3", [{"ref": "o/r#3"}])]
    assert all("upstream" not in c and c["schema"] == 2 for c in cases) and end["schema"] == 2
    assert records.find_case(path, "f/b")[1]["declared"] == [{"ref": "o/r#1"}]


def test_a_session_outside_the_matrix_is_its_own_row():
    assert records.identity("local_torch2.13.0", "2.13.0", gpu=False) == {
        "session": "local_torch2.13.0", "device": "cpu", "line": "cpu", "row": "2.13.0", "label": None,
        "plain": "local_torch2.13.0", "lightning_of": None}


def test_a_case_record_is_made_of_the_phase_data_a_report_carries():
    class Report:  # pytest's TestReport, as far as the record schema reads it
        user_properties = [("other", {}), (records.PHASE_PROPERTY, {"outcome": "pass"})]

    identity = {"case": "f/a[x]", "family": "f", "params": {"variant": "a"}, "nodeid": "cases/test_f.py::test_a[x]"}
    declared = [{"kind": "limitation", "ref": "https://docs/x", "raises": ["E"], "match": None, "since": None,
                 "until": None}]
    data = records.phase_data(identity, "call", "limitation", exc_type="E", message="m", reference="https://docs/x",
                              declared=declared, metrics={"graphs": 1}, output_tail="tail")
    records.attach_phase(Report, data)
    assert records.phase_of(Report) is data  # the last one attached
    record = records.case_record(records.phase_of(Report), duration=1.0, nodeid=identity["nodeid"])  # as the recorder
    assert record == {"kind": "case", **identity, "outcome": "limitation", "exc_type": "E", "message": "m",
                      "reference": "https://docs/x", "declared": declared, "duration": 1.0, "output_tail": "tail"}
    assert records.phase_of(type("Report", (), {"user_properties": [("other", {})]})) is None


def test_every_extra_a_phase_reports_reaches_its_record_in_the_tables_key_order():
    # PhaseExtras is the one list of them: a key added there is carried, with no second list to edit.
    # The order is the one the committed results files were written in; changing it rewrites every
    # record that holds two of them.
    extras = {"log_cut": "1 byte", "log": "w.log", "workdir": "/w", "output_tail": "t", "leaked": ["p"],
              "attempts": [{"outcome": "pass"}]}
    assert set(extras) == set(records.PhaseExtras.__annotations__)
    identity = {"case": "f/a[x]", "family": "f", "params": {}, "nodeid": "cases/test_f.py::test_a[x]"}
    record = records.case_record(records.phase_data(identity, "call", "pass", **extras))
    assert list(record)[-len(extras):] == ["attempts", "leaked", "output_tail", "workdir", "log", "log_cut"]


# --- size bounds ---------------------------------------------------------------------------------

def written_line(tmp_path, case: dict) -> str:
    writer = resultsfile.ResultsWriter(tmp_path / "s.jsonl")
    writer.write(ENV)
    writer.write({**CASE, **case})
    writer.close()
    return (tmp_path / "s.jsonl").read_text(encoding="utf-8").splitlines()[1]


def test_a_long_text_keeps_its_head_and_tail_and_says_how_much_was_cut(tmp_path):
    message = "head of it " + "x" * 10_000_000 + " tail of it"
    line = written_line(tmp_path, {"outcome": "fail", "message": message,
                                   "attempts": [{"outcome": "fail", "message": message}] * 2})
    assert len(line.encode()) <= records.LINE_LIMIT
    record = records.read(tmp_path / "s.jsonl")[1]
    for text in (record["message"], *(a["message"] for a in record["attempts"])):
        assert text.startswith("head of it xxx") and text.endswith("xxx tail of it")
        assert len(text) <= records.TEXT_LIMITS["message"]
        marker = re.search(r"\n\[\.\.\. ([\d,]+) characters cut \.\.\.\]\n", text)
        assert int(marker[1].replace(",", "")) + len(text) - len(marker[0]) == len(message)
    assert record["case"] == CASE["case"]  # what readers join on is never cut


@pytest.mark.parametrize("shape", ["non_ascii", "many_fields", "many_items", "many_entries", "huge_name"])
def test_every_line_stays_under_the_bound_whatever_the_case_put_in_it(tmp_path, shape):
    # JSON writes each non-ASCII character as six bytes: the limits tighten until the line fits.
    big = {"non_ascii": {"message": "\xff" * 100_000, "output_tail": "\u2603" * 100_000,
                         "exc_type": "é" * 100_000},
           "many_fields": {"message": "m" * 10**6, "output_tail": "o" * 10**6,
                           "metrics": {f"figure_{n}": "v" * 5000 for n in range(40)}},
           "many_items": {"leaked": [f"state {n} " * 100 for n in range(10_000)],
                          "attempts": [{"outcome": "fail", "message": "z" * 10**5}] * 1000},
           "many_entries": {"metrics": {f"figure_{n}" * 100: n for n in range(100_000)}},
           "huge_name": {"case": "f/v[" + "p" * 10**6 + "]", "nodeid": "n" * 10**6}}[shape]
    line = written_line(tmp_path, {"outcome": "fail", **big})
    assert len(line.encode()) <= records.LINE_LIMIT
    record = records.read(tmp_path / "s.jsonl")[1]
    assert record["outcome"] == "fail"
    if shape == "huge_name":  # a name is cut only past NAME_LIMIT
        assert record["case"].startswith("f/v[ppp") and "characters cut" in record["case"]
    else:
        assert record["case"] == CASE["case"]
    if shape == "many_entries":
        assert len(record["metrics"]) == records.DICT_LIMIT + 1
        assert record["metrics"]["[cut]"] == f"{100_000 - records.DICT_LIMIT} more entries"
    if shape == "many_items":
        assert len(record["leaked"]) == records.LIST_LIMIT + 1
        assert record["leaked"][records.LIST_LIMIT // 2] == f"[... {10_000 - records.LIST_LIMIT} items cut ...]"


def test_a_short_record_is_written_as_it_is(tmp_path):
    case = {"outcome": "fail", "message": "m" * records.TEXT_LIMITS["message"], "leaked": ["a"] * records.LIST_LIMIT}
    written_line(tmp_path, case)
    record = records.read(tmp_path / "s.jsonl")[1]
    assert record["message"] == case["message"] and record["leaked"] == case["leaked"]


def test_a_record_after_a_foreign_line_without_its_end_starts_a_line_of_its_own(tmp_path):
    path = tmp_path / "s.jsonl"
    writer = resultsfile.ResultsWriter(path)
    writer.write(ENV)
    with open(path, "a") as foreign:  # what a case's process writes into the file: no line end
        foreign.write("not a record")
    writer.write(CASE)
    assert [r["kind"] for r in records.read(path, passed_over=lambda text: None)] == ["environment", "case"]
    assert writer.count_foreign()["lines"] == 1 and writer.records()[1]["case"] == "f/v"


def test_a_removed_directory_is_made_again_with_every_record(tmp_path):
    path = tmp_path / "results" / "s.jsonl"
    writer = resultsfile.ResultsWriter(path)
    writer.write(ENV)
    writer.write(CASE)
    shutil.rmtree(path.parent)
    writer.write({"kind": "end", "exitstatus": 0})
    writer.close()
    assert [r["kind"] for r in records.read(path)] == ["environment", "case", "end"] and writer.remade == 1


def test_a_file_written_during_the_session_is_not_kept_as_an_earlier_run(tmp_path):
    path = tmp_path / "s.jsonl"
    earlier = resultsfile.file_identity(path)  # nothing there when the session started
    path.write_text("a case wrote this\n")
    writer = resultsfile.ResultsWriter(path, earlier=earlier)
    writer.write(ENV)
    writer.close()
    assert not list((tmp_path / "previous").glob("*.jsonl"))
    assert [p.read_text() for p in (tmp_path / "previous").glob("*.foreign")] == ["a case wrote this\n"]
    assert writer.foreign["files"] and records.read(path)[0]["kind"] == "environment"


@pytest.mark.parametrize("line, why", [
    ({"kind": "case", "outcome": "pass"}, "a case record without 'case'"),
    ({"kind": "case", "case": "f/v", "outcome": "pass", "params": "cpu"}, "a case record whose 'params' is str"),
    ({"kind": "case", "case": "f/v", "outcome": "fail", "message": ["a", "list"]},
     "a case record whose 'message' is list"),
    ({"kind": "end", "counts": {}}, "a end record without 'exitstatus'"),
], ids=["no_case", "params_str", "message_list", "end_without_status"])
def test_a_record_of_a_damaged_shape_is_passed_over_and_said_in_one_line(tmp_path, line, why):
    path = tmp_path / "s.jsonl"
    path.write_text("".join(json.dumps({"schema": 2, **r}) + "\n" for r in (ENV, line, {**CASE, "case": "f/ok"})))
    said = []
    back = records.read(path, passed_over=said.append)
    assert [r.get("case") for r in back] == [None, "f/ok"]
    assert len(said) == 1 and f"line 2: {why}" in said[0] and "\n" not in said[0], said


def test_a_case_recorded_twice_is_said_and_the_first_record_kept(tmp_path):
    path = tmp_path / "s.jsonl"
    path.write_text("".join(json.dumps({"schema": 2, **r}) + "\n" for r in (
        ENV, {**CASE, "outcome": "fail"}, {**CASE, "outcome": "pass"})))
    said = []
    back = records.read(path, passed_over=said.append)
    assert [r["outcome"] for r in back[1:]] == ["fail"]
    assert said == [f"{path}: 1 line(s) that are not the harness's records passed over (line 3: f/v recorded again "
                    "(fail at line 2, then pass): the first record is kept)"]
