"""Faults that must leave honest, bounded records and a clean checkout (tests/test_workdirs.py and
tests/test_isolation.py run this file through the sessions' own command). Each fault is followed
by a plain case, which must pass."""

import os
import pathlib
import sys

import torch


def plain(case):
    case.check(torch.sin, torch.randn(3, requires_grad=True))


class Unprintable(Exception):
    def __str__(self):
        raise RuntimeError("this exception has no text")


def test_unprintable_exception(case):
    raise Unprintable()


def test_after_unprintable(case):
    plain(case)


def test_not_utf8_then_fails(case):
    os.write(1, b"bytes that are not UTF-8: \xff\xfe\xc3\x28\n")
    sys.stdout.buffer.write(b"more: \xff\n")
    sys.stdout.flush()
    assert torch.zeros(1).item() == 1, "the case's own failure, after its output \xff"


def test_after_not_utf8(case):
    plain(case)


def test_huge_message(case):
    raise AssertionError("head of a huge message " + "x" * 10_000_000 + " tail of it")


def test_after_huge_message(case):
    plain(case)


def test_huge_multiline_output(case):
    for _ in range(200_000):
        print("a line of output that goes on for a while " * 2)
    raise ValueError("fails after printing 17 MB")


def test_after_huge_output(case):
    plain(case)


def test_writes_into_its_working_directory(case):
    pathlib.Path("lightning_logs/version_0").mkdir(parents=True)
    torch.save(torch.ones(2), "model.pt")
    plain(case)
    assert pathlib.Path("model.pt").exists()


def test_after_writing(case):
    plain(case)
