"""Faults that go after the harness's own channels: the child's report pipe, what it sends the report
with, the results file and its directory, JUnit's text, processes that outlive their case.
tests/test_faulty_cases.py runs this file through `nox -s <session> -- FILE`. Each fault is followed
by a plain case, which must pass; every process a case starts is written to PIDS for the test to
look for after the run."""

import json
import os
import pathlib
import shutil
import subprocess
import time

import torch

from harness.core import paths, pytestrun

PIDS = pathlib.Path(__file__).with_suffix(".pids")
RESULTS = paths.results_path(os.environ[pytestrun.SESSION_ENV])


def plain(case):
    case.check(torch.sin, torch.randn(3, requires_grad=True))


def started(pid: int) -> None:
    with PIDS.open("a") as pids:
        pids.write(f"{pid}\n")


def daemon(then) -> None:
    """A double fork: a grandchild in a session of its own, which inherits every descriptor (the
    report pipe among them) and runs `then`."""
    read, write = os.pipe()
    child = os.fork()
    if child == 0:
        os.setsid()
        grandchild = os.fork()
        if grandchild == 0:
            then()
            os._exit(0)
        os.write(write, f"{grandchild}\n".encode())
        os._exit(0)
    os.waitpid(child, 0)
    started(int(os.read(read, 64)))


def test_daemon_holds_the_report_pipe(case):
    daemon(lambda: time.sleep(120))
    plain(case)


def test_after_daemon(case):
    plain(case)


def test_replaces_what_the_harness_sends_with(case):
    plain(case)
    json.dumps = lambda *args, **kwargs: "not the report"
    os.write = lambda fd, data: len(data)


def test_after_replacing(case):
    plain(case)


def test_removes_the_results_directory(case):
    shutil.rmtree(RESULTS.parent, ignore_errors=True)
    plain(case)


def test_after_removing(case):
    plain(case)


def test_writes_into_the_results_file(case):
    with open(RESULTS, "ab") as results:
        results.write(b"\xff\xfe not a record, no line end")
    plain(case)


def test_daemon_writes_into_the_results_file_later(case):
    def later():
        time.sleep(20)
        with open(RESULTS, "ab") as results:
            results.write(b'{"schema": 2, "kind": "case", "outc')

    daemon(later)
    plain(case)


def test_starts_a_session_of_its_own(case):
    started(subprocess.Popen(["sleep", "300"], start_new_session=True).pid)
    plain(case)


def test_control_characters_in_its_message(case):
    raise AssertionError("colour \x1b[31mred\x1b[0m, NUL \x00, bell \x07, unit separator \x1f, end")


def test_after_control_characters(case):
    plain(case)
