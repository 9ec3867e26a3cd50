"""Compatibility test-matrix harness for torch.compile across torch, Lightning and CUDA.

One folder per runtime, every import pointing down (tests/test_layering.py checks it):

- harness/core: each concept's single home (paths, versions, limits, errors, outcomes, records,
  case ids, the matrix and its sessions), importable by every runtime;
- harness/plugin: what runs inside a session's venv (the pytest plugin, the environment record,
  reuse, what cases use);
- harness/report: the regression table from results files;
- harness/tools: the offline tools (repro, bisect, sweep, reduce, the Lightning releases);
- harness/cli and harness/__main__.py: the command line over them (each command and its options).
"""
