"""Keeping cases apart: per-worker output logs for crash reports, and global torch state
saved and restored around every case."""

from __future__ import annotations

import copy
import json
import os
import pathlib
import warnings

START_MARK = "=== harness: start "


# --- worker output: what a crashed case printed last ---

def redirect_worker_output(directory: pathlib.Path, worker: str) -> None:
    """Point this worker's fd 1 and 2 at a log file. With pytest's capture at sys level only
    (--capture=tee-sys), everything a case prints, C code and faulthandler included, lands
    there, so the controller can quote it when the worker dies."""
    log = os.open(directory / f"{worker}.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)


def mark_case_start(directory: pathlib.Path, worker: str, identity: dict) -> None:
    """Note which case this worker runs now, in its log and in `<worker>.current`."""
    os.write(2, f"\n{START_MARK}{identity['nodeid']}\n".encode())
    (directory / f"{worker}.current").write_text(json.dumps(identity))


def crashed_case(directory: pathlib.Path, worker: str, nodeid: str) -> tuple[dict | None, str]:
    """The identity of the case a dead worker was running and what it printed meanwhile."""
    identity = None
    current = directory / f"{worker}.current"
    if current.exists():
        found = json.loads(current.read_text())
        identity = found if found.get("nodeid") == nodeid else None
    try:
        text = (directory / f"{worker}.log").read_text(errors="replace")
    except OSError:
        return identity, ""
    start = text.rfind(f"{START_MARK}{nodeid}\n")
    if start >= 0:
        text = text[start:].split("\n", 1)[1] if "\n" in text[start:] else ""
    return identity, text


def shorten(output: str, head: int = 1500, tail: int = 2500) -> str:
    """What a record keeps of a dead worker's output: its start (what the case printed) and
    its end (how it died), without the interpreter's list of extension modules."""
    lines = [line for line in output.splitlines() if not line.startswith("Extension modules:")]
    text = "\n".join(lines)
    return text if len(text) <= head + tail else f"{text[:head]}\n[...]\n{text[-tail:]}"


def crash_summary(output: str) -> tuple[str, str]:
    """(outcome, message) for a dead worker from what it printed: pytest-timeout's banner
    means `timeout`, anything else `crash`; the message is the most telling line."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    if any(line.startswith("+") and "Timeout" in line for line in lines):
        return "timeout", next(line.strip("+ ") for line in lines if "Timeout" in line)
    for line in lines:
        if line.startswith("Fatal Python error:"):
            return "crash", line
    return "crash", (f"worker died; last output: {lines[-1]}" if lines else "worker died without output")


# --- global torch state ---

def _autocast_state() -> tuple[bool, bool]:
    """(CPU, CUDA) autocast enabled; the device-argument API from torch 2.4, else the old one."""
    import torch

    try:
        return torch.is_autocast_enabled("cpu"), torch.is_autocast_enabled("cuda")
    except TypeError:
        return torch.is_autocast_cpu_enabled(), torch.is_autocast_enabled()


def _set_autocast_state(state: tuple[bool, bool]) -> None:
    import torch

    try:
        torch.set_autocast_enabled("cpu", state[0])
        torch.set_autocast_enabled("cuda", state[1])
    except TypeError:
        torch.set_autocast_cpu_enabled(state[0])
        torch.set_autocast_enabled(state[1])


def _config_values(module) -> dict:
    """Every flag of a torch config module by value (get_config_copy deep-copies, which some
    versions' configs refuse)."""
    values = {}
    with warnings.catch_warnings():  # reading deprecated flags warns
        warnings.simplefilter("ignore")
        for key in list(module._config):
            value = getattr(module, key)
            try:
                values[key] = copy.copy(value)
            except Exception:
                values[key] = value
    return values


def _differs(a, b) -> bool:
    try:
        return bool(a != b)
    except Exception:  # values without a plain equality (tensors, odd objects)
        return a is not b


def _saved_tensor_hooks():
    """The innermost default saved-tensor hooks (torch 2.5+ can tell; older: None)."""
    import torch

    top = getattr(torch._C._autograd, "_top_saved_tensors_default_hooks", None)
    return top(True) if top is not None else None


class TorchState:
    """What one case can leave behind for the next: Dynamo's caches and counters, Dynamo and
    inductor config, torch function modes, autocast, grad mode, default dtype, RNG."""

    def __init__(self):
        import torch
        import torch._dynamo
        import torch._inductor.config

        self.torch = torch
        self.dynamo_config = _config_values(torch._dynamo.config)
        self.inductor_config = _config_values(torch._inductor.config)
        self.saved_tensor_hooks = _saved_tensor_hooks()
        self.grad = torch.is_grad_enabled()
        self.dtype = torch.get_default_dtype()
        self.modes = torch._C._len_torch_function_stack()
        self.autocast = _autocast_state()

    def fresh(self) -> None:
        """Start a case from a clean compiler and a fixed seed."""
        from torch._dynamo.utils import counters

        self.torch._dynamo.reset()
        counters.clear()
        self.torch.manual_seed(0)

    def restore(self) -> list[str]:
        """Put everything back; returns what the case had left changed."""
        import torch
        import torch._dynamo
        import torch._inductor.config

        leaked = []
        while torch._C._len_torch_function_stack() > self.modes:
            leaked.append("a torch function mode")
            torch._C._pop_torch_function_stack()
        if _autocast_state() != self.autocast:
            leaked.append("autocast")
            _set_autocast_state(self.autocast)
        torch.clear_autocast_cache()
        if torch.is_grad_enabled() != self.grad:
            leaked.append("grad mode")
            torch.set_grad_enabled(self.grad)
        if torch.get_default_dtype() != self.dtype:
            leaked.append("default dtype")
            torch.set_default_dtype(self.dtype)
        for name, module, saved in (("torch._dynamo.config", torch._dynamo.config, self.dynamo_config),
                                    ("torch._inductor.config", torch._inductor.config, self.inductor_config)):
            with warnings.catch_warnings():  # reading deprecated flags warns
                warnings.simplefilter("ignore")
                changed = {key: value for key, value in saved.items() if _differs(getattr(module, key, value), value)}
            if changed:
                leaked.append(name)
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    for key, value in changed.items():
                        setattr(module, key, value)
        if self.saved_tensor_hooks is None:
            while _saved_tensor_hooks() is not None:  # e.g. left by a checkpoint that raised
                if "saved tensor hooks" not in leaked:
                    leaked.append("saved tensor hooks")
                torch._C._autograd._pop_saved_tensors_default_hooks()
        self.fresh()
        return leaked
