"""The ambient-state survey (cases/programs/ambient.py) on a real torch, in a process of its own as the
tool runs it, and `python -m harness ambient` through its real entry point."""

import json
import os
import subprocess
import sys

import pytest

from harness.core import matrix, paths
from harness.tools import ambient

MAIN = matrix.main_session()  # what this venv holds


@pytest.fixture(scope="module")
def surveyed() -> dict:
    found = ambient.survey(sys.executable)
    return {setter["name"]: setter for setter in found["setters"]}


def test_setters_come_from_torchs_own_namespace_each_value_tried(surveyed):
    # a documented string setting: its values are the quoted words of its docstring, the current one apart
    assert surveyed["torch.set_float32_matmul_precision"]["values"] == ["'high'", "'medium'"]
    # a dtype: every floating dtype torch computes in; float8 and float4 are storage formats
    assert surveyed["torch.set_default_dtype"]["values"] == ["torch.bfloat16", "torch.float16", "torch.float64"]
    assert surveyed["torch.use_deterministic_algorithms"]["values"] == ["True"]  # use_X, read by are_X_enabled
    assert surveyed["torch.backends.mkldnn.enabled"]["values"] == ["False"]  # a backends module's attribute
    assert surveyed["torch.backends.cuda.enable_flash_sdp"]["get_source"] == "torch.backends.cuda.flash_sdp_enabled"
    # a per-device setting: one setter a device, the device bound
    assert surveyed["torch.set_autocast_dtype('cpu', ...)"]["set_source"] == \
        "functools.partial(torch.set_autocast_dtype, 'cpu')"
    assert "torch.enable_grad" not in surveyed  # a context manager's class, not a switch


def test_a_setter_that_cannot_be_restored_is_left_out_with_the_reason(surveyed):
    assert surveyed["torch.set_flush_denormal"]["left_out"] == "no getter to restore it from"
    assert surveyed["torch.set_num_interop_threads"]["left_out"].startswith(
        "cannot be restored: RuntimeError: Error: cannot set number of interop threads")
    assert all(not s["values"] for s in surveyed.values() if s["left_out"])
    assert not any(s["left_out"] for s in surveyed.values() if s["values"])


def test_a_drawn_setter_sets_and_restores_in_a_script(tmp_path):
    """What a program enters (Setter.entered, with recompile's helpers) sets the state inside and restores
    it after: a backends flag through its module's flags(), where torch's test utilities (loaded with the op
    database) forbid setting it otherwise, the module's other flags left as they were."""
    script = tmp_path / "entered.py"
    script.write_text(f"""
import contextlib, functools, inspect, sys
sys.path.insert(0, {str(paths.ROOT / "cases")!r})
import torch
from programs import ambient
from programs.recompile import HELPERS

exec(HELPERS["switched"])  # the helpers a recompile program defines
exec(HELPERS["flag_set"])

setters = {{s.name: s for s in map(ambient.Setter.from_dict, ambient.survey()["setters"])}}
torch.backends.cudnn.benchmark = True  # another flag of the module, off its default
torch.backends.disable_global_flags()  # what torch.testing._internal.common_utils does at import
with eval(setters["torch.backends.cudnn.enabled"].entered("False")):
    print(torch.backends.cudnn.enabled, torch.backends.cudnn.benchmark)
print(torch.backends.cudnn.enabled, torch.backends.cudnn.benchmark)
with eval(setters["torch.set_float32_matmul_precision"].entered("'medium'")):
    print(torch.get_float32_matmul_precision())
print(torch.get_float32_matmul_precision())
""")
    done = subprocess.run([sys.executable, "-W", "ignore", str(script)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["False", "True", "True", "True", "medium", "highest"]


def test_the_command_writes_each_rows_survey_and_prints_the_table(tmp_path):
    env = {**os.environ, paths.RESULTS_ENV: str(tmp_path)}
    done = subprocess.run([sys.executable, "-m", "harness", "ambient", MAIN.name, "--python", sys.executable],
                          cwd=paths.ROOT, capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    written = json.loads((tmp_path / "ambient" / f"{MAIN.name}.json").read_text())
    assert written["session"] == MAIN.name and written["torch"].split("+")[0] == MAIN.torch
    assert "| `torch.set_float32_matmul_precision` | ✓ 2 |" in done.stdout
    assert "- `torch.set_flush_denormal`: no getter to restore it from" in done.stdout


def test_bad_input_is_one_line_and_writes_nothing(tmp_path):
    env = {**os.environ, paths.RESULTS_ENV: str(tmp_path)}
    for args, says in ((["cpu_torch99"], "error: unknown session 'cpu_torch99'"),
                       (["--python", sys.executable], "error: --python surveys one interpreter: name its one SESSION")):
        done = subprocess.run([sys.executable, "-m", "harness", "ambient", *args], cwd=paths.ROOT,
                              capture_output=True, text=True, env=env, timeout=120)
        assert (done.returncode, done.stderr.strip().splitlines()[-1][:len(says)]) == (2, says)
    assert not (tmp_path / "ambient").exists()
