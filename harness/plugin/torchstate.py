"""Global torch state one case can leave behind for the next, snapshot once and restored after
every case: Dynamo's caches and counters, Dynamo and inductor config, torch function modes,
autocast, grad mode, default dtype, default saved-tensor hooks, the RNG seed."""

from __future__ import annotations

import copy
import warnings


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
    """The state a process starts its cases from. Taking it imports torch, Dynamo and inductor,
    which is why the runner takes it once, before any case's clock starts."""

    def __init__(self):
        import torch
        import torch._dynamo
        import torch._inductor.config

        self.dynamo_config = _config_values(torch._dynamo.config)
        self.inductor_config = _config_values(torch._inductor.config)
        self.saved_tensor_hooks = _saved_tensor_hooks()
        self.grad = torch.is_grad_enabled()
        self.dtype = torch.get_default_dtype()
        self.modes = torch._C._len_torch_function_stack()
        self.autocast = _autocast_state()

    @staticmethod
    def fresh() -> None:
        """Start a case from an empty compiler cache, zeroed counters and a fixed seed."""
        import torch
        from torch._dynamo.utils import counters

        torch._dynamo.reset()
        counters.clear()
        torch.manual_seed(0)

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
                    for key, value in changed.items():
                        setattr(module, key, value)
        if self.saved_tensor_hooks is None:
            while _saved_tensor_hooks() is not None:  # e.g. left by a checkpoint that raised
                if "saved tensor hooks" not in leaked:
                    leaked.append("saved tensor hooks")
                torch._C._autograd._pop_saved_tensors_default_hooks()
        self.fresh()
        return leaked
