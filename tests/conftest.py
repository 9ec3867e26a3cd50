import pathlib

# Imported once here: pytester's in-process runs drop modules they imported, and torch
# cannot be imported twice in one process.
import torch  # noqa: F401

pytest_plugins = ["pytester"]

ROOT = pathlib.Path(__file__).resolve().parent.parent
