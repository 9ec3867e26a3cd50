"""Whatever a case raises, prints or writes, its record stays honest and bounded, and the checkout
stays clean: through the sessions' own pytest command (real xdist, real torch, forked cases; one
session holds the faults that leave the results file alone), and once through `nox -s <the main job>
-- FILE` on a planted file (tests/planted/faulty_records.py)."""

import pathlib
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ElementTree

import pytest

from harness.core import paths, records
from tests.conftest import CHECKOUT_VENVS, ROOT, copy_project, run_nox
from tests.test_isolation import (
    PLANTED_HEADER,
    SESSION,
    PlantedRun,
    by_variant,
    case_records,
    ok_case,
    run_planted_file,
    run_session_command,
    session_env,  # noqa: F401 (a fixture, used by name)
)

PLANTED = ROOT / "tests" / "planted" / "faulty_records.py"


# Each planted case below runs in one session (faulty_records_session): a run's start-up is paid once.
UNPRINTABLE_EXCEPTION = '''
class Unprintable(Exception):
    def __str__(self):
        raise RuntimeError("no text")


def test_unprintable_exception(case):
    raise Unprintable()
'''
NOT_UTF8_OUTPUT = '''
def test_not_utf8_output(case):
    os.write(1, b"raw \\xff\\xfe\\n")
    sys.stdout.buffer.write(b"through sys.stdout: \\xff\\n")
    print("and text")
    assert False, "the case's own failure"
'''
# A property whose str() raises: the child's reports cannot be serialised for the worker.
UNSENDABLE_REPORT = '''
class UnprintableFigure:
    def __str__(self):
        raise RuntimeError("no text")


def test_unsendable_report(case, record_property):
    record_property("figure", UnprintableFigure())
'''
HUGE_MESSAGE = '''
def test_huge_message(case):
    raise AssertionError("head " + "x" * 10_000_000 + " tail")
'''
WRITES_FILES = '''
def test_writes_files(case):
    pathlib.Path("lightning_logs/version_0").mkdir(parents=True)
    torch.save(torch.ones(2), "model.pt")


def test_writes_nothing(case):
    assert not pathlib.Path("model.pt").exists()
'''
# A daemon grandchild (a double fork) keeps the child's report pipe open for 600 s; the case itself
# passes at once. Its end is the child's exit, and the daemon is ended with its case.
DAEMON_HOLDS_THE_PIPE = '''
def test_daemon_holds_the_pipe(case):
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            time.sleep(600)
        os._exit(0)
    case.check(torch.sin, torch.randn(3, requires_grad=True))
'''
REPLACES_WHAT_THE_HARNESS_SENDS_WITH = '''
def test_replaces_json_and_write(case):
    case.check(torch.sin, torch.randn(3, requires_grad=True))
    json.dumps = lambda *args, **kwargs: "not the report"
    os.write = lambda fd, data: len(data)
'''
CONTROL_CHARACTERS = '''
def test_control_characters(case):
    raise AssertionError("colour \\x1b[31mred\\x1b[0m, NUL \\x00, bell \\x07, unit separator \\x1f, end")
'''
IN_ONE_SESSION = pytest.mark.xdist_group("faulty-records-session")  # one worker runs the one session


@pytest.fixture(scope="session")  # not "module": a worker may run other modules' tests between these
def faulty_records_session(tmp_path_factory) -> PlantedRun:
    """One session on a file that holds each planted case above, then a plain case that must still pass."""
    folder = tmp_path_factory.mktemp("faulty-records-session")
    parts = [UNPRINTABLE_EXCEPTION, NOT_UTF8_OUTPUT, UNSENDABLE_REPORT, HUGE_MESSAGE, WRITES_FILES,
             DAEMON_HOLDS_THE_PIPE, REPLACES_WHAT_THE_HARNESS_SENDS_WITH, CONTROL_CHARACTERS, ok_case("after")]
    run = run_planted_file(folder, PLANTED_HEADER + "import json, pathlib, sys, time\n\n" + "\n\n".join(parts),
                           "--timeout=120", tmp_path_factory=tmp_path_factory)
    assert run.returncode == 1, run.output[-6000:]
    assert_honest_and_bounded(run.results_file, run.records)
    return run


def assert_honest_and_bounded(results_file: pathlib.Path, cases: list[dict]) -> None:
    """The planted file's last case (`cases`: the file's case records), after every fault, passes; every
    line of the results is bounded."""
    assert (cases[-1]["params"]["variant"], cases[-1]["outcome"]) == ("after", "pass"), cases[-1]
    for line in results_file.read_bytes().splitlines():  # bytes: a case may have written what is not UTF-8
        assert len(line) <= records.LINE_LIMIT


def run_planted(pytester, body: str) -> dict:
    """A planted file of its own (the tests that change the results file itself), its records by variant."""
    path = pytester.makepyfile(test_planted=PLANTED_HEADER + body + "\n\n" + ok_case("after"))
    _, results_file, _ = run_session_command(pytester, path, "--timeout=120")
    cases = case_records(results_file)
    assert_honest_and_bounded(results_file, cases)
    return by_variant(cases)


@IN_ONE_SESSION
def test_an_exception_without_text_is_a_failure_that_names_its_type(faulty_records_session):
    fault = faulty_records_session.cases["unprintable_exception"]
    assert (fault["outcome"], fault["exc_type"]) == ("fail", "test_planted.Unprintable")
    assert fault["message"] == "<unprintable test_planted.Unprintable: its str() raised RuntimeError: no text>"


@IN_ONE_SESSION
def test_output_that_is_not_utf8_leaves_the_case_its_own_failure(faulty_records_session):
    fault = faulty_records_session.cases["not_utf8_output"]
    assert (fault["outcome"], fault["message"]) == ("fail", "the case's own failure")


@IN_ONE_SESSION
def test_a_report_the_child_cannot_send_says_which_part_failed(faulty_records_session):
    fault = faulty_records_session.cases["unsendable_report"]
    assert fault["outcome"] == "error"
    assert fault["message"] == ("the case's report did not reach the harness: serialising its reports raised "
                                "RuntimeError: no text")


@IN_ONE_SESSION
def test_a_huge_message_is_cut_in_the_record_and_whole_in_the_worker_log(faulty_records_session):
    fault = faulty_records_session.cases["huge_message"]
    assert fault["outcome"] == "fail" and len(fault["attempts"]) == 2
    for message in (fault["message"], *(a["message"] for a in fault["attempts"])):
        assert message.startswith("head xxx") and message.endswith("xxx tail") and "characters cut" in message
    log = pathlib.Path(fault["log"])  # bytes: the worker's log holds what other cases printed, not all UTF-8
    assert (b"head " + b"x" * 10_000_000 + b" tail") in log.read_bytes()
    # beside the results, for as long as they are kept (not pytest's base temp, which keeps three runs)
    assert log.is_relative_to(faulty_records_session.results_file.parent / paths.LOGS / SESSION.name), log


@IN_ONE_SESSION
def test_what_a_case_writes_lands_in_its_own_directory(faulty_records_session):
    cases = faulty_records_session.cases
    workdir = pathlib.Path(cases["writes_files"]["workdir"])
    assert cases["writes_files"]["outcome"] == "pass" and (workdir / "model.pt").is_file()
    assert (workdir / "lightning_logs" / "version_0").is_dir()
    assert cases["writes_nothing"]["outcome"] == "pass" and "workdir" not in cases["writes_nothing"]
    folder = faulty_records_session.path.parent
    assert not (folder / "model.pt").exists() and not (folder / "lightning_logs").exists()


@IN_ONE_SESSION
def test_a_process_that_inherits_the_report_pipe_cannot_hold_the_case(faulty_records_session):
    # Held by the daemon, the case would run into its 120 s limit (`timeout`) and the run past 600 s.
    fault = faulty_records_session.cases["daemon_holds_the_pipe"]
    took = faulty_records_session.seconds
    assert fault["outcome"] == "pass" and took < 600, (took, fault)  # not the hard limit, nor the daemon's 600 s
    assert any("process left running, killed after the case" in text for text in fault["leaked"]), fault


@IN_ONE_SESSION
def test_a_case_that_replaces_what_the_harness_sends_with_still_reports(faulty_records_session):
    fault = faulty_records_session.cases["replaces_json_and_write"]
    assert fault["outcome"] == "pass", fault


@IN_ONE_SESSION
def test_control_characters_in_a_message_leave_the_junit_file_well_formed(faulty_records_session):
    fault = faulty_records_session.cases["control_characters"]
    assert fault["outcome"] == "fail", fault
    suite = ElementTree.parse(faulty_records_session.results_file.with_suffix(".xml")).getroot().find("testsuite")
    failure = next(c for c in suite.iter("testcase") if c.get("name") == "control_characters").find("failure")
    assert "colour \\x1b[31mred\\x1b[0m, NUL \\x00, bell \\x07, unit separator \\x1f, end" in failure.get("message")


def project_with(tmp_path, planted: pathlib.Path) -> pathlib.Path:
    """A copy of the project with `planted` under tests/planted/, as a session's command would find it."""
    project = copy_project(tmp_path / "project")
    (project / "tests" / "planted").mkdir(parents=True)
    shutil.copy2(planted, project / "tests" / "planted" / planted.name)
    return project


@pytest.mark.slow
@CHECKOUT_VENVS
def test_the_planted_file_through_nox_leaves_honest_bounded_records_and_a_clean_checkout(tmp_path):
    project = project_with(tmp_path, PLANTED)
    shutil.copy2(paths.ROOT / ".gitignore", project / ".gitignore")  # what a checkout ignores (Python's bytecode)
    for command in (["init", "-q"], ["add", "-A"], ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x"]):
        subprocess.run(["git", *command], cwd=project, check=True)
    results, basetemp = tmp_path / "results", tmp_path / "basetemp"  # its worker logs kept for the message below
    done = run_nox(project, "-s", SESSION.name, "--", f"tests/planted/{PLANTED.name}", "--timeout", "60",
                   f"--basetemp={basetemp}", results=results)
    assert done.returncode == 1, done.stderr[-3000:]  # the planted failures fail the session
    path = paths.results_path(SESSION.name, results)
    lines = path.read_text(encoding="utf-8").splitlines()
    assert max(len(line.encode()) for line in lines) <= records.LINE_LIMIT
    cases = by_variant(case_records(path))
    wanted = {"unprintable_exception": "fail", "after_unprintable": "pass",
              "not_utf8_then_fails": "fail", "after_not_utf8": "pass",
              "huge_message": "fail", "after_huge_message": "pass",
              "huge_multiline_output": "fail", "after_huge_output": "pass",
              "writes_into_its_working_directory": "pass", "after_writing": "pass"}
    differing = {n: (r["outcome"], r.get("message"), r.get("attempts")) for n, r in cases.items()
                 if wanted.get(n) != r["outcome"]}
    # why: each attempt's message, and the lines of the worker logs that say error (a compiler's own)
    said = [line[:300] for log in basetemp.glob("harness-*-logs*/*") if log.is_file()
            for line in log.read_text(errors="replace").splitlines() if "error" in line.lower()][:40]
    assert set(cases) == set(wanted) and not differing, (differing, said)
    assert cases["not_utf8_then_fails"]["exc_type"] == "builtins.AssertionError"
    status = subprocess.run(["git", "status", "--porcelain", "--ignored=no"], cwd=project, capture_output=True,
                            text=True, check=True).stdout
    assert status == "", status


CHANNELS = ROOT / "tests" / "planted" / "harness_channels.py"


@pytest.mark.slow
@CHECKOUT_VENVS
def test_faults_at_the_harness_channels_through_nox_leave_honest_records_and_no_process(tmp_path):
    project = project_with(tmp_path, CHANNELS)
    results = tmp_path / "results"
    done = run_nox(project, "-s", SESSION.name, "--", f"tests/planted/{CHANNELS.name}", "--timeout", "60",
                   results=results)
    assert done.returncode == 1, done.stderr[-3000:]  # the control characters' case fails the session
    path = paths.results_path(SESSION.name, results)
    passed_over = []
    read = records.read(path, passed_over=passed_over.append)
    cases = by_variant([record for record in read if record.get("kind") == "case"])
    wanted = {name: "pass" for name in ("daemon_holds_the_report_pipe", "after_daemon",
                                        "replaces_what_the_harness_sends_with", "after_replacing",
                                        "writes_into_the_results_file", "daemon_writes_into_the_results_file_later",
                                        "removes_the_results_directory", "after_removing",
                                        "starts_a_session_of_its_own", "after_control_characters")}
    wanted["control_characters_in_its_message"] = "fail"
    assert {name: record["outcome"] for name, record in cases.items()} == wanted, done.stderr[-3000:]
    for name in ("daemon_holds_the_report_pipe", "daemon_writes_into_the_results_file_later",
                 "starts_a_session_of_its_own"):
        assert any("killed after the case" in text for text in cases[name]["leaked"]), cases[name]
    end = read[-1]
    assert end["kind"] == "end" and end["foreign"]["lines"] >= 1 and end["foreign"]["remade"] >= 1, end
    assert all(pathlib.Path(record["log"]).is_file() for record in cases.values() if record.get("log")), cases
    ElementTree.parse(path.with_suffix(".xml"))  # well-formed, whatever the messages held
    report = run_nox(project, "-s", "report", "--", str(results), "--out", str(tmp_path / "report"))
    assert report.returncode == 0, report.stderr[-2000:]
    # no process of the run is left: neither those the cases started nor any naming the project
    pids = (project / "tests" / "planted" / CHANNELS.name).with_suffix(".pids").read_text().split()
    assert len(pids) == 3, pids
    left = subprocess.run(["ps", "-o", "pid=,args=", "-p", ",".join(pids)], capture_output=True, text=True).stdout
    everyone = subprocess.run(["ps", "-eo", "pid=,args="], capture_output=True, text=True, check=True).stdout
    left += "".join(line for line in everyone.splitlines(keepends=True) if str(project) in line)
    assert left == "", left


def test_a_missing_dependency_is_one_line_for_every_command(tmp_path):
    bare = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True)
    commands = {"check-env": ["cuda12_torch25"], "report": [], "repro": ["checkpoint/x"],
                "bisect": ["checkpoint/x"], "sweep": ["checkpoint/x"], "reduce": ["checkpoint/x", "--session", "s"],
                "lightning-newest": [], "explore-summary": [], "run": ["cpu_torch25"], "stale": [], "findings": [],
                "regressions": ["cpu_torch215"], "gpu": ["preflight", "cuda13_torch211"], "explore": ["cpu_torch215"],
                "ambient": ["cpu_torch215"]}
    from harness.cli.options import parser
    assert set(commands) == set(parser()._subparsers._group_actions[0].choices)  # every command
    for name, args in commands.items():
        done = subprocess.run([str(bare / "bin" / "python"), "-m", "harness", name, *args], cwd=tmp_path,
                              capture_output=True, text=True, env={"PYTHONPATH": str(ROOT)})
        assert done.returncode == 2 and done.stdout == "", (name, done.stderr)
        assert done.stderr.count("\n") == 1 and done.stderr.startswith("error: missing package 'packaging'"), \
            (name, done.stderr)
        assert "pip install -e '.[dev]'" in done.stderr


def test_the_report_without_its_templates_package_names_it(tmp_path):
    # packaging importable, Jinja2 missing: a module in its place fails to import as a missing one does
    (tmp_path / "hide" / "jinja2").mkdir(parents=True)
    (tmp_path / "hide" / "jinja2" / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'jinja2'\", name='jinja2')\n")
    results = tmp_path / "results"
    results.mkdir()
    shutil.copy2(ROOT / "results" / f"{SESSION.name}.jsonl", results)
    done = subprocess.run([sys.executable, "-m", "harness", "report", str(results)], cwd=tmp_path,
                          capture_output=True, text=True,
                          env={"PYTHONPATH": f"{tmp_path / 'hide'}:{ROOT}"})
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("error: missing package 'Jinja2'") and done.stderr.count("\n") == 1, done.stderr


def results_of(pytester) -> pathlib.Path:
    return paths.results_path(SESSION.name, pytester.path / "results")


# In a planted case: wait until the session has written its first record (the first case's).
AFTER_FIRST_RECORD = '''
import pathlib, shutil, time

RESULTS = pathlib.Path({results!r})


def test_before(case):
    case.check(torch.sin, torch.randn(3, requires_grad=True))


def first_record_written():
    deadline = time.monotonic() + 60
    while not RESULTS.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
'''


@pytest.mark.usefixtures("session_env")
def test_what_a_case_writes_into_the_results_file_leaves_it_readable_and_is_counted(pytester):
    # A line without its end and bytes that are not UTF-8, written among the records (O_APPEND or not,
    # as a case's process would): the harness's next record starts a line of its own, whole.
    cases = run_planted(pytester, AFTER_FIRST_RECORD.format(results=str(results_of(pytester))) + '''

def test_fault(case):
    first_record_written()
    with open(RESULTS, "r+b") as results:
        results.seek(0, 2)
        results.write(b"\\xff\\xfe not a record, no line end")
    case.check(torch.sin, torch.randn(3, requires_grad=True))
''')
    assert cases["fault"]["outcome"] == "pass", cases["fault"]
    end = records.read(results_of(pytester), passed_over=lambda text: None)[-1]
    assert end["kind"] == "end" and end["foreign"]["lines"] == 1, end
    # after the session: what a process left running would write; the reader and the report still read it
    with open(results_of(pytester), "ab") as results:
        results.write(b'{"schema": 2, "kind": "case", "outc')
    done = subprocess.run([sys.executable, "-m", "harness", "report", str(results_of(pytester).parent),
                           "--out", str(pytester.path / "report")], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "2 line(s) that are not the harness's records passed over" in done.stderr, done.stderr


@pytest.mark.usefixtures("session_env")
def test_a_results_directory_removed_mid_session_is_made_again_with_the_whole_session(pytester):
    cases = run_planted(pytester, AFTER_FIRST_RECORD.format(results=str(results_of(pytester))) + '''

def test_fault(case):
    first_record_written()
    shutil.rmtree(RESULTS.parent)
    case.check(torch.sin, torch.randn(3, requires_grad=True))
''')
    assert [cases[name]["outcome"] for name in ("before", "fault", "after")] == ["pass"] * 3, cases
    end = records.read(results_of(pytester))[-1]
    assert end["foreign"]["remade"] == 1 and end["counts"] == {"pass": 3}, end
    suite = ElementTree.parse(results_of(pytester).with_suffix(".xml")).getroot().find("testsuite")
    assert suite.get("tests") == "3", ElementTree.tostring(suite)


@pytest.mark.usefixtures("session_env")
def test_a_results_file_a_case_writes_first_is_not_kept_as_an_earlier_run(pytester):
    cases = run_planted(pytester, f'''
import pathlib


def test_fault(case):
    pathlib.Path({str(results_of(pytester))!r}).parent.mkdir(parents=True, exist_ok=True)
    pathlib.Path({str(results_of(pytester))!r}).write_text("written by a case\\n")
    case.check(torch.sin, torch.randn(3, requires_grad=True))
''')
    assert cases["fault"]["outcome"] == "pass", cases["fault"]
    previous = results_of(pytester).parent / paths.PREVIOUS
    assert not list(previous.glob(f"*{paths.RESULTS_SUFFIX}")), list(previous.iterdir())
    assert [p.read_text() for p in previous.glob("*.foreign")] == ["written by a case\n"]
    assert records.read(results_of(pytester))[-1]["foreign"]["files"], "not counted"


@pytest.mark.usefixtures("session_env")
def test_what_a_case_prints_past_the_log_limit_is_cut_and_its_record_says_so(pytester):
    from harness.plugin.workerlog import CASE_LOG_LIMIT

    cases = run_planted(pytester, f'''
def test_fault(case):
    os.write(1, b"head " + b"x" * {CASE_LOG_LIMIT + 2**20} + b" tail")
    case.check(torch.sin, torch.randn(3, requires_grad=True))
''')
    fault = cases["fault"]
    assert fault["outcome"] == "pass" and "bytes of what the case printed were cut" in fault["log_cut"], fault
    log = pathlib.Path(fault["log"])
    assert log.stat().st_size < CASE_LOG_LIMIT + 2**20, log.stat().st_size
    text = log.read_bytes()
    assert b"head xxx" in text and b"xxx tail" in text and b"cut here" in text
