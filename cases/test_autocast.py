"""Autocast with activation checkpointing under torch.compile.

Covers where autocast is entered relative to the compiled region and the checkpoint: around a
compiled function that checkpoints, inside the compiled function around the checkpoint, inside the
checkpointed function, around an eager checkpoint of a compiled function (the shape of
pytorch/pytorch#121966), and a `context_fn` that re-enters the forward's autocast state for the
recompute (what TE's checkpoint does; related: pytorch/pytorch#121966, #141896 "Recomputed values
... have different metadata", #144637, #148831). Dtypes: bf16 on CPU, fp16 and bf16 on CUDA. Each
case checks output dtypes as well as values and gradients. A non-TorchDispatchMode context_fn hits
the same compile limitations as in the checkpoint family (UPSTREAM.md section 1).
The device-argument spellings `torch.is_autocast_enabled(device)` / `torch.get_autocast_dtype(device)`
start in 2.4; older torch uses the per-device functions.
"""

import contextlib
import copy

import pytest
import torch
from torch.utils.checkpoint import checkpoint

from harness.casekit import TOLERANCES

NO_GPU = "no CUDA device: torch.cuda.is_available() is False"
_no_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason=NO_GPU)

DEVICE_DTYPES = [
    pytest.param("cpu", torch.bfloat16, id="cpu-bf16"),
    pytest.param("cuda", torch.float16, id="cuda-fp16", marks=_no_cuda),
    pytest.param("cuda", torch.bfloat16, id="cuda-bf16", marks=_no_cuda),
]

# Same documented limitations as cases/test_checkpoint.py: a context_fn returning plain context
# managers is gated in 2.2-2.4 and rejected by AOT tracing from 2.5.
context_fn_gate = pytest.mark.upstream_bug(
    "pytorch/pytorch:torch/_higher_order_ops/wrap.py", raises="AssertionError",
    match="Passing context_fn to torch.utils.checkpoint is currently not supported under torch.compile")
modes_required = pytest.mark.upstream_bug(
    "pytorch/pytorch:torch/utils/checkpoint.py", raises="AssertionError",
    match="must generate a tuple of two `TorchDispatchMode`s")


def autocast_state(device):
    """(enabled, dtype) of autocast on `device`, in whichever spelling this torch has."""
    if hasattr(torch, "get_autocast_dtype"):  # 2.4+
        return torch.is_autocast_enabled(device), torch.get_autocast_dtype(device)
    if device == "cpu":
        return torch.is_autocast_cpu_enabled(), torch.get_autocast_cpu_dtype()
    return torch.is_autocast_enabled(), torch.get_autocast_gpu_dtype()


class Block(torch.nn.Module):
    """Two linears (autocast to low precision) around a pointwise op; ends in a linear so the
    output dtype is the autocast dtype. `autocast` set: the block enters autocast itself."""

    def __init__(self, autocast=None):
        super().__init__()
        self.fc1 = torch.nn.Linear(8, 8)
        self.fc2 = torch.nn.Linear(8, 8)
        self.autocast = autocast  # (device, dtype) or None

    def forward(self, x):
        ctx = torch.autocast(*self.autocast[:1], dtype=self.autocast[1]) if self.autocast \
            else contextlib.nullcontext()
        with ctx:
            return self.fc2(torch.nn.functional.gelu(self.fc1(x)))


class CheckpointedBlock(torch.nn.Module):
    def __init__(self, block=None, **ckpt_kwargs):
        super().__init__()
        self.block = block or Block()
        self.ckpt_kwargs = dict(use_reentrant=False, **ckpt_kwargs)

    def forward(self, x):
        return checkpoint(self.block, x, **self.ckpt_kwargs)


class UnderAutocast(torch.nn.Module):
    """Enters autocast, then runs `body`."""

    def __init__(self, body, device, dtype):
        super().__init__()
        self.body = body
        self.device, self.dtype = device, dtype

    def forward(self, x):
        with torch.autocast(self.device, dtype=self.dtype):
            return self.body(x)


def restore_autocast_context_fn(device):
    """A context_fn for `device`. Forward: nothing. Recompute: the autocast state the forward ran
    under (read when checkpoint calls context_fn, in the forward), as TE's checkpoint does."""

    def context_fn():
        enabled, dtype = autocast_state(device)
        return contextlib.nullcontext(), torch.autocast(device, dtype=dtype, enabled=enabled)

    return context_fn


def x_input(device):
    return torch.randn(4, 8, device=device, requires_grad=True)


def check_under_autocast(case, model, compiled, device, dtype):
    before = autocast_state(device)
    case.check(model, x_input(device), compiled=compiled, expected_dtype=dtype, tolerances=TOLERANCES[dtype])
    assert autocast_state(device) == before, "autocast state leaked out of the case"


# --- where autocast is entered ----------------------------------------------------------------

@pytest.mark.parametrize("device,dtype", DEVICE_DTYPES)
@pytest.mark.parametrize("fullgraph", [True], ids=["fullgraph"])
def test_autocast_around_compiled_checkpoint(case, device, dtype, backend, fullgraph):
    # Autocast is entered eagerly; the compiled function only checkpoints.
    model = UnderAutocast(CheckpointedBlock(), device, dtype).to(device)
    compiled = copy.deepcopy(model)
    compiled.body.forward = case.compile(compiled.body.forward)
    check_under_autocast(case, model, compiled, device, dtype)


@pytest.mark.parametrize("device,dtype", DEVICE_DTYPES)
@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
@pytest.mark.parametrize("fullgraph", [True], ids=["fullgraph"])
def test_autocast_inside_compiled_around_checkpoint(case, device, dtype, backend, fullgraph):
    model = UnderAutocast(CheckpointedBlock(), device, dtype).to(device)
    check_under_autocast(case, model, None, device, dtype)


@pytest.mark.parametrize("device,dtype", DEVICE_DTYPES)
@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
@pytest.mark.parametrize("fullgraph", [True], ids=["fullgraph"])
def test_autocast_inside_checkpointed_function(case, device, dtype, backend, fullgraph):
    model = CheckpointedBlock(Block(autocast=(device, dtype))).to(device)
    check_under_autocast(case, model, None, device, dtype)


# Eager checkpoint around a compiled function: eager backend only. Where the recompute fails
# inside AOT tracing (aot_eager/inductor on torch <= 2.4: "Detected that you are using FX to
# symbolically trace a dynamo-optimized function"), checkpoint's saved-tensor hooks stay pushed
# and every later checkpoint in the process fails ("Recomputed values ... different metadata").
ONLY_EAGER_BACKEND = pytest.mark.parametrize("backend", ["eager"])


@pytest.mark.parametrize("device,dtype", DEVICE_DTYPES)
@ONLY_EAGER_BACKEND
@pytest.mark.parametrize("fullgraph", [True], ids=["fullgraph"])
def test_eager_checkpoint_of_compiled_function_under_autocast(case, device, dtype, backend, fullgraph):
    # The pytorch/pytorch#121966 shape: checkpoint is eager, the checkpointed function compiled;
    # the recompute runs the compiled function again from backward.
    model = UnderAutocast(CheckpointedBlock(), device, dtype).to(device)
    compiled = copy.deepcopy(model)
    compiled.body.block.forward = case.compile(compiled.body.block.forward)
    check_under_autocast(case, model, compiled, device, dtype)


# --- a context_fn that restores autocast for the recompute ------------------------------------

@context_fn_gate
@pytest.mark.parametrize("device,dtype", DEVICE_DTYPES)
@pytest.mark.parametrize("backend", [
    # The eager backend runs the checkpoint HOP eagerly, where plain context managers are fine.
    "eager",
    pytest.param("aot_eager", marks=modes_required),
])
@pytest.mark.parametrize("fullgraph", [True], ids=["fullgraph"])
def test_context_fn_restores_autocast_for_recompute(case, device, dtype, backend, fullgraph):
    model = UnderAutocast(CheckpointedBlock(context_fn=restore_autocast_context_fn(device)), device, dtype)
    check_under_autocast(case, model.to(device), None, device, dtype)


@pytest.mark.parametrize("device,dtype", DEVICE_DTYPES)
@ONLY_EAGER_BACKEND
@pytest.mark.parametrize("fullgraph", [False], ids=["graphbreaks"])
def test_context_fn_restores_autocast_eager_checkpoint_of_compiled(case, device, dtype, backend,
                                                                   fullgraph):
    # Eager checkpoint with the same context_fn around a compiled function: no compile limits on
    # the context_fn, the recompute runs the compiled function under the restored autocast.
    model = UnderAutocast(CheckpointedBlock(context_fn=restore_autocast_context_fn(device)), device, dtype)
    model = model.to(device)
    compiled = copy.deepcopy(model)
    compiled.body.block.forward = case.compile(compiled.body.block.forward)
    check_under_autocast(case, model, compiled, device, dtype)
