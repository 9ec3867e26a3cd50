"""The error every command reports as bad input: one line and exit status 2 (`python -m harness`).

A user's mistake (an unknown session, case or version range, a malformed table or results file, an
environment that does not match its pins) raises a subclass of BadInput, so that a bug of the
harness (a ValueError, a KeyError) is never mistaken for one and keeps its traceback."""


class BadInput(Exception):
    """What the user asked for does not exist or does not fit."""
