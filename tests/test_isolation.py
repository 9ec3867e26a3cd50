"""A fault costs its case alone, in the command the sessions run (real xdist workers, real torch).

Every run here uses `harness.core.pytestrun.pytest_args`, the function the noxfile builds each session's
pytest command with, so that a change of scheduling or options cannot leave these tests green and
the sessions broken. The last test plants faults in a real family and runs `nox -s SESSION`.
"""

import ast
import dataclasses
import fnmatch
import functools
import json
import os
import pathlib
import subprocess
import sys
import time

import pytest

from harness.core import caseid, matrix, paths, pytestrun, records
from tests import committed_row
from tests.conftest import CHECKOUT_VENVS, ROOT, copy_project, run_nox, warm_compile_caches

SESSION = matrix.main_session()  # what the tests venv holds

PLANTED_HEADER = "import ctypes, os, signal, threading\nimport pytest\nimport torch\n"

# Long enough for a case's first inductor compile (gcc) on a slow or busy machine; a hang waits it out.
TIME_LIMIT = 15
# What a case does to have each fault, and what its record must say.
FAULTS = {
    "segfault": ("ctypes.string_at(0)", "crash", "Fatal Python error: Segmentation fault at "),
    "abort": ("os.abort()", "crash", "Fatal Python error: Aborted at "),
    "exit": ("print('leaving', flush=True)\n    os._exit(3)", "crash",
             "worker exited with status 3; last output: leaving"),
    "sigkill": ("os.kill(os.getpid(), signal.SIGKILL)", "crash", "killed by SIGKILL"),
    "python_loop": ("while True:\n        pass", "timeout", f"ran past its time limit of {TIME_LIMIT} s at "),
    "deadlock": ("lock = threading.Lock()\n    lock.acquire()\n    lock.acquire()", "timeout",
                 f"ran past its time limit of {TIME_LIMIT} s at "),
    "native_sleep": ("ctypes.PyDLL(None).sleep(3600)  # holds the GIL", "timeout",
                     f"ran past its time limit of {TIME_LIMIT} s at "),
    "out_of_memory": ("chunks = []\n    while True:\n        chunks.append(torch.ones(2 ** 28))", "crash",
                      "out of memory: "),
}
LIMITS = [f"--timeout={TIME_LIMIT}", "--memory-limit=3G"]


def ok_case(name):
    return f"def test_{name}(case):\n    case.check(torch.sin, torch.randn(3, requires_grad=True))\n"


def fault_case(name, kind):
    return f"def test_{name}(case):\n    {FAULTS[kind][0]}\n"


def session_command(path, args, results, session=SESSION) -> list[str]:
    """The session's pytest command on `path` (which narrows it to that file), its results in `results`."""
    return pytestrun.pytest_args(session, [str(path), *args, f"--results-dir={results}"])


def run_session_command(pytester, path, *args, session=SESSION):
    """The session's pytest command on `path`, run by pytester."""
    out = pytester.path / "results"
    command = session_command(path, args, out, session)
    start = time.monotonic()
    result = pytester.run(sys.executable, *command, timeout=900)
    return result, out / f"{session.name}.jsonl", time.monotonic() - start


@pytest.fixture
def session_env(monkeypatch, nested_compile_caches):
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    monkeypatch.setenv("HARNESS_SESSION", SESSION.name)
    # One worker: a test's session runs a handful of cases (how many a session chooses: test_run_command).
    monkeypatch.setenv("HARNESS_WORKERS", "1")


def case_records(path) -> list[dict]:
    """The case records of a finished session: each case once."""
    back = records.read(path)
    assert back[-1]["kind"] == "end", "the session did not end"
    cases = [r for r in back if r["kind"] == "case"]
    ids = [r["case"] for r in cases]
    assert len(ids) == len(set(ids)), f"duplicate records: {ids}"
    return cases


def by_variant(cases) -> dict:
    return {r["params"]["variant"]: r for r in cases}


@dataclasses.dataclass(frozen=True)
class PlantedRun:
    """One run of the sessions' pytest command on a planted file, for the tests that read it."""
    path: pathlib.Path  # the planted file
    returncode: int
    output: str
    results_file: pathlib.Path
    seconds: float

    @functools.cached_property
    def records(self) -> list[dict]:
        """Its case records, in the order written (read once: every test of the run reads them)."""
        return case_records(self.results_file)

    @functools.cached_property
    def cases(self) -> dict:
        return by_variant(self.records)


def run_planted_file(folder: pathlib.Path, source: str, *args, tmp_path_factory, env=None) -> PlantedRun:
    """The session's pytest command on `source` (planted as `folder`/test_planted.py), one worker, the
    compile caches as tests/conftest.py's warm_compile_caches gives them: one run that many tests read
    (a run's start-up, torch's imports, the warm-up and the environment record, is about 10 s of CPU here)."""
    path = folder / "test_planted.py"
    path.write_text(source)
    command = session_command(path, args, folder / "results")
    with warm_compile_caches(folder, tmp_path_factory) as caches:
        environ = {**os.environ, "HARNESS_WORKERS": "1", "PYTHONPATH": str(ROOT), pytestrun.SESSION_ENV: SESSION.name,
                   pytestrun.COMPILE_CACHES_ENV: str(caches), **(env or {})}
        start = time.monotonic()
        done = subprocess.run([sys.executable, *command], cwd=folder, env=environ, capture_output=True, text=True,
                              timeout=900)
    return PlantedRun(path, done.returncode, done.stdout + done.stderr,
                      paths.results_path(SESSION.name, folder / "results"), time.monotonic() - start)


# Faults first, in the middle, twice in a row and last: the records keep the order of the file.
ORDER_HEAD = ["fault_first", "ok_1", "fault_middle", "fault_again", "ok_2"]
ORDER_TAIL = ["fault_last"]
FIXTURE_FAULTS = '''
@pytest.fixture
def crashes_on_setup():
    os.abort()


@pytest.fixture
def crashes_on_teardown():
    yield
    ctypes.string_at(0)


def test_setup_crash(case, crashes_on_setup):
    pass


''' + ok_case("between") + '''

def test_teardown_crash(case, crashes_on_teardown):
    case.check(torch.cos, torch.randn(3, requires_grad=True))


''' + ok_case("after_teardown_crash")
CRASH_WITH_OUTPUT = '''
def test_crash(case):
    print("about to read address zero", flush=True)
    ctypes.string_at(0)
'''
# The skip condition writes the pid of the process that evaluates it: the worker decides, and a
# forked child, were there one, would evaluate it again under another pid.
SKIPPED_BY_MARK = '''
WORKER = os.getpid()  # collection runs in the worker


def seen(name):
    with open(os.environ["PLANTED_PIDS"], "a") as out:
        out.write(f"{name} {os.getpid()} {WORKER}\\n")
    return True


@pytest.mark.skipif("seen('skipped')", reason="planted: skipped by its mark")
def test_skipped(case):
    pass


def test_runs(case):
    seen("ran")
'''
ALREADY_IMPORTED = '''
def test_already_imported(case):
    assert "lightning.fabric.utilities.init" in sys.modules
'''


def planted_in_order(names: list[str]) -> list[str]:
    return [ok_case(n) if n.startswith("ok") else fault_case(n, "segfault") for n in names]


@pytest.fixture(scope="session")  # not "module": a worker may run other modules' tests between these
def faults_session(tmp_path_factory) -> PlantedRun:
    """One session on a file that holds every fault the tests below read (one run for all: a run's
    start-up is paid once): each kind of fault between two plain cases, faults in a fixture and its
    teardown, a crash after output, a case its marks skip, a case that needs the warm-up's imports,
    and faults first, twice in a row and last."""
    folder = tmp_path_factory.mktemp("faults-session")
    parts = planted_in_order(ORDER_HEAD)
    parts += [text for kind in sorted(FAULTS)
              for text in (ok_case(f"before_{kind}"), fault_case(f"fault_{kind}", kind), ok_case(f"after_{kind}"))]
    parts += [FIXTURE_FAULTS, CRASH_WITH_OUTPUT, SKIPPED_BY_MARK, ALREADY_IMPORTED, *planted_in_order(ORDER_TAIL)]
    run = run_planted_file(folder, PLANTED_HEADER + "import sys\n\n\n" + "\n\n".join(parts), *LIMITS,
                           tmp_path_factory=tmp_path_factory, env={"PLANTED_PIDS": str(folder / "pids")})
    assert run.returncode == 1, run.output[-6000:]
    return run


IN_FAULTS_SESSION = pytest.mark.xdist_group("faults-session")  # one worker runs the one session


@IN_FAULTS_SESSION
@pytest.mark.parametrize("kind", sorted(FAULTS))
def test_each_kind_of_fault_costs_its_case_alone(faults_session, kind):
    cases = faults_session.cases
    _, outcome, message = FAULTS[kind]
    assert {n: cases[n]["outcome"] for n in (f"before_{kind}", f"fault_{kind}", f"after_{kind}")} == {
        f"before_{kind}": "pass", f"fault_{kind}": outcome, f"after_{kind}": "pass"}
    fault = cases[f"fault_{kind}"]
    assert fault["message"].startswith(message), fault
    if outcome == "timeout":
        assert "test_planted.py:" in fault["message"]


@IN_FAULTS_SESSION
def test_faults_first_in_the_middle_twice_in_a_row_and_last(faults_session):
    in_file = [node.name[len("test_"):] for node in ast.parse(faults_session.path.read_text()).body
               if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")]
    assert in_file[:len(ORDER_HEAD)] == ORDER_HEAD and in_file[-len(ORDER_TAIL):] == ORDER_TAIL, in_file
    recorded = [r["params"]["variant"] for r in faults_session.records]
    assert recorded == in_file  # the order of the file, as without faults
    cases = faults_session.cases
    assert {n: cases[n]["outcome"] for n in ORDER_HEAD + ORDER_TAIL} == {
        n: "pass" if n.startswith("ok") else "crash" for n in ORDER_HEAD + ORDER_TAIL}


@IN_FAULTS_SESSION
def test_faults_in_a_fixture_and_its_teardown(faults_session):
    cases = faults_session.cases
    names = ("setup_crash", "between", "teardown_crash", "after_teardown_crash")
    assert {n: cases[n]["outcome"] for n in names} == dict(zip(names, ("crash", "pass", "crash", "pass"), strict=True))
    assert cases["setup_crash"]["message"].startswith("Fatal Python error: Aborted at test_planted.py")
    assert "in crashes_on_setup" in cases["setup_crash"]["message"]
    assert "in crashes_on_teardown" in cases["teardown_crash"]["message"]
    assert cases["teardown_crash"]["metrics"]["graphs"] == 1  # what the case did before it died


@IN_FAULTS_SESSION
def test_crash_output_and_where_it_happened_are_kept(faults_session):
    lines = faults_session.path.read_text().splitlines()
    line = lines.index("def test_crash(case):") + 3  # the crash, the function's third line (numbered from 1)
    assert lines[line - 1].strip() == "ctypes.string_at(0)"
    record = faults_session.cases["crash"]
    assert record["message"] == f"Fatal Python error: Segmentation fault at test_planted.py:{line} in test_crash"
    assert "about to read address zero" in record["output_tail"]
    assert record["case"] == "planted/crash" and record["family"] == "planted"
    summary = fnmatch.filter(faults_session.output.splitlines(), "*FAILED*test_crash - Fatal Python error: Segm*")
    assert summary, faults_session.output[-3000:]


@IN_FAULTS_SESSION
def test_a_case_its_marks_skip_runs_in_the_worker_without_a_child(faults_session):
    cases = faults_session.cases
    assert {n: cases[n]["outcome"] for n in ("skipped", "runs")} == {"skipped": "skip", "runs": "pass"}
    lines = [line.split() for line in (faults_session.path.parent / "pids").read_text().splitlines()]
    assert {pid == worker for name, pid, worker in lines if name == "skipped"} == {True}, lines
    assert {pid == worker for name, pid, worker in lines if name == "ran"} == {False}, lines  # forked


@IN_FAULTS_SESSION
def test_the_warm_up_imports_what_the_cases_need(faults_session):
    from harness.plugin.warmup import case_modules

    needed = case_modules()
    assert "lightning.fabric.utilities.init" in needed, needed  # cases/test_empty_init.py's need()
    record = faults_session.cases["already_imported"]
    assert record["outcome"] == "pass", record["message"]


def test_start_up_is_not_charged_to_the_first_case(pytester, session_env):
    # A new worker imports torch, Dynamo and inductor before its first case's clock starts (about 4 s
    # here); after a crash, the next case as well. A session of its own: its first case is the worker's.
    path = pytester.makepyfile(test_planted=PLANTED_HEADER + "\n\n".join([
        "def test_empty_first(case):\n    pass\n", fault_case("crash", "segfault"),
        "def test_empty_after_crash(case):\n    pass\n"]))
    _, results_file, _ = run_session_command(pytester, path, "--timeout=3")
    cases = by_variant(case_records(results_file))
    assert cases["empty_first"]["outcome"] == "pass", cases["empty_first"]
    assert cases["empty_after_crash"]["outcome"] == "pass", cases["empty_after_crash"]


# --- a real family, through nox ------------------------------------------------------------------

FAMILY = "cases/test_checkpoint.py"
# The family's cases on the eager and aot_eager backends, its planted faults among them: inductor's cases
# (a cold C++ compile each) would double the test's time, and every plain case of the tests above runs
# inductor in a forked child already.
NOT_INDUCTOR = ["-k", "not inductor"]
# (position, fault kind): first, middle, two in a row, in a fixture and in its teardown, last.
PLANTS = [("first", "segfault"), ("middle", "python_loop"), ("middle", "abort"), ("middle", "exit"),
          ("middle", "native_sleep"), ("middle", "fixture"), ("middle", "teardown"), ("last", "sigkill"),
          ("last", "out_of_memory")]


def plant_faults(source: str) -> str:
    """The family's source with the PLANTS inserted among its test functions."""
    tree = ast.parse(source)
    lines = source.splitlines()
    tests = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")]
    def start_of(node):
        return min([node.lineno] + [d.lineno for d in node.decorator_list]) - 1
    at = {"first": start_of(tests[0]), "middle": start_of(tests[len(tests) // 2]), "last": len(lines)}
    inserts: dict[int, list[str]] = {}
    for number, (position, kind) in enumerate(PLANTS):
        if kind == "fixture":
            text = f"@pytest.fixture\ndef planted_{number}():\n    os.kill(os.getpid(), signal.SIGKILL)\n\n\n" \
                   f"def test_planted_{number}_{kind}(case, planted_{number}):\n    pass\n"
        elif kind == "teardown":
            text = f"@pytest.fixture\ndef planted_{number}():\n    yield\n    ctypes.string_at(0)\n\n\n" \
                   f"def test_planted_{number}_{kind}(case, planted_{number}):\n    pass\n"
        else:
            text = fault_case(f"planted_{number}_{kind}", kind)
        inserts.setdefault(at[position], []).append("\n\n" + text + "\n")
    out = [PLANTED_HEADER]
    for index in range(len(lines) + 1):
        out += inserts.get(index, [])
        if index < len(lines):
            out.append(lines[index] + "\n")
    return "".join(out)


def nox_session(project, name, results, *args):
    start = time.monotonic()
    done = run_nox(project, "-s", name, "--", *args, results=results)
    return done, time.monotonic() - start


@pytest.mark.slow
@pytest.mark.parametrize("name", [SESSION.name, "cpu_torch25"])
@CHECKOUT_VENVS
def test_planted_faults_in_a_real_family_through_nox(tmp_path, name):
    spec = matrix.find(name)
    # The family's outcomes without the plants: the committed row's where the checkout would measure it the
    # same, else a run of the clean family here.
    committed = committed_row.fresh_outcomes(name, [caseid.family_of(FAMILY)])
    if committed is None:
        clean = copy_project(tmp_path / "clean")
        done, _ = nox_session(clean, name, tmp_path / "clean-results", FAMILY, *NOT_INDUCTOR)
        assert done.returncode in (0, 1), done.stdout[-3000:] + done.stderr[-3000:]
        clean_outcomes = {r["case"]: r["outcome"] for r in case_records(tmp_path / "clean-results" / f"{name}.jsonl")}
    else:
        clean_outcomes = {case: outcome for case, outcome in committed.items() if "inductor" not in case}
    planted = copy_project(tmp_path / "planted")
    (planted / FAMILY).write_text(plant_faults((ROOT / FAMILY).read_text()))
    done, seconds = nox_session(planted, name, tmp_path / "planted-results", FAMILY, *NOT_INDUCTOR, "--timeout=20",
                                "--memory-limit=4G")
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    planted_cases = case_records(tmp_path / "planted-results" / f"{name}.jsonl")
    faults = {r["case"]: r for r in planted_cases if r["params"]["variant"].startswith("planted_")}
    assert len(faults) == len(PLANTS)
    assert all(r["outcome"] in ("crash", "timeout") for r in faults.values()), faults
    assert faults["checkpoint/planted_8_out_of_memory"]["message"].startswith("out of memory: ")
    others = {r["case"]: r["outcome"] for r in planted_cases if r["case"] not in faults}
    assert set(others) == set(clean_outcomes), set(others) ^ set(clean_outcomes)
    assert not (differ := committed_row.disagreements(others, clean_outcomes)), differ
    assert seconds < spec.case_timeout + 60 * len(PLANTS), seconds
    print(json.dumps({"session": name, "planted_seconds": round(seconds, 1), "faults": {
        n: (r["outcome"], r["message"]) for n, r in faults.items()}}, indent=1))


# --- state nobody listed: each case's outcome is the one it has alone ----------------------------

LEAKS = '''import math
import pytest
import torch

FLAGS = []
LIBRARIES = []  # kept alive: a Library that is collected unregisters its ops


def test_leaks_anomaly_mode(case):
    torch.autograd.set_detect_anomaly(True)


def test_sees_no_anomaly_mode(case):
    assert not torch.is_anomaly_enabled()


def test_leaks_matmul_precision(case):
    torch.set_float32_matmul_precision("medium")


def test_sees_highest_matmul_precision(case):
    assert torch.get_float32_matmul_precision() == "highest"


def test_leaks_deterministic_algorithms(case):
    torch.use_deterministic_algorithms(True)


def test_sees_no_deterministic_algorithms(case):
    assert not torch.are_deterministic_algorithms_enabled()


def test_monkeypatches_torch_sin(case):
    torch.sin = torch.cos


def test_sees_the_real_sin(case):
    assert abs(torch.sin(torch.tensor(0.5)).item() - math.sin(0.5)) < 1e-6


def test_registers_a_library_op(case):
    LIBRARIES.append(torch.library.Library("planted", "DEF"))
    LIBRARIES[-1].define("twice(Tensor x) -> Tensor")


def test_registers_the_same_op(case):
    torch.library.Library("planted", "DEF").define("twice(Tensor x) -> Tensor")


def test_sets_a_module_global(case):
    FLAGS.append("set")


def test_fails_unless_a_global_was_set(case):
    assert FLAGS, "no earlier case set the flag"
'''
# What each case does in a process where nothing ran before it (each is run alone below too).
ALONE = {"fails_unless_a_global_was_set": "fail"}


@pytest.mark.slow
@CHECKOUT_VENVS
def test_planted_leaks_change_no_other_case_through_nox(tmp_path):
    project = copy_project(tmp_path / "project")
    planted = project / "cases" / "test_leaks.py"
    planted.write_text(LEAKS)
    results = tmp_path / "results"
    done, _ = nox_session(project, SESSION.name, results, "cases/test_leaks.py")
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    cases = by_variant(case_records(paths.results_path(SESSION.name, results)))
    expected = {node.name[len("test_"):]: ALONE.get(node.name[len("test_"):], "pass")
                for node in ast.parse(LEAKS).body if isinstance(node, ast.FunctionDef)}
    assert {n: r["outcome"] for n, r in cases.items()} == expected, {n: r["message"] for n, r in cases.items()}
    # The same file with every case in the worker: the leaks are real, and would have changed outcomes.
    shared = tmp_path / "shared"
    done, _ = nox_session(project, SESSION.name, shared, "cases/test_leaks.py", "--isolation=none")
    together = {n: r["outcome"] for n, r in by_variant(case_records(paths.results_path(SESSION.name, shared))).items()}
    assert {n for n in expected if together[n] != expected[n]} == {
        "sees_no_anomaly_mode", "sees_highest_matmul_precision", "sees_no_deterministic_algorithms",
        "sees_the_real_sin", "registers_the_same_op", "fails_unless_a_global_was_set"}, together
    # And each case alone, in a session of its own, has the outcome the forked run gave it.
    for name in ("sees_the_real_sin", "fails_unless_a_global_was_set"):
        alone = tmp_path / f"alone-{name}"
        nox_session(project, SESSION.name, alone, f"cases/test_leaks.py::test_{name}", "--isolation=none")
        assert case_records(paths.results_path(SESSION.name, alone))[0]["outcome"] == expected[name]
