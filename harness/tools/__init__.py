"""The offline tools on results and session venvs: repro, bisect, sweep, reduce, and the Lightning
releases of the registry. They build and run session venvs through harness.core.pytestrun."""
