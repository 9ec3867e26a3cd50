import pathlib

pytest_plugins = ["pytester"]

ROOT = pathlib.Path(__file__).resolve().parent.parent
