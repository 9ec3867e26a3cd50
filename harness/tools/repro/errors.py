"""What a reproduction cannot do (exit status 1: the case exists, its script cannot be made or run)."""


class ReproError(Exception):
    """The case cannot be exported or run."""
