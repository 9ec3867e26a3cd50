"""Each concept of the harness defined once, importable by every runtime (the nox driver, the
plugin in a session's venv, the report and the offline tools); nothing here imports the others."""
