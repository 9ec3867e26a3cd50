"""Activation checkpoint `context_fn` under torch.compile.

Covers `torch.utils.checkpoint.checkpoint` compiled with and without `context_fn`: the plain call,
a library wrapper that always passes `context_fn=noop_context_fn` (the TransformerEngine pattern of
NVIDIA/TransformerEngine#890, Dynamo's `CheckpointHigherOrderVariable` does not recognise the no-op
default and raises `NotImplementedError: checkpoint not implemented for <...> context_fn`), TE's fix
(`torch._disable_dynamo` on the wrapper, NVIDIA/TransformerEngine#894: a graph break with
fullgraph=False, an `Unsupported` error with fullgraph=True), a wrapper that passes context_fn only
when given one, user context_fns (two TorchDispatchModes; plain context managers, which compile
rejects), selective activation checkpointing (public `create_selective_checkpoint_contexts` from 2.5,
private `_pt2_selective_checkpoint_context_fn_gen` in 2.2-2.4), the 2.2-2.4 experimental config flag
that gates any non-default context_fn, `use_reentrant=True`, and the real TE checkpoint where
transformer_engine is installed. See UPSTREAM.md section 1.
"""

import contextlib
import inspect
import unittest.mock

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.checkpoint import checkpoint

from harness.casekit import need

NO_GPU = "no CUDA device: torch.cuda.is_available() is False"

# Refs for documented limitations (the code that raises is the public record).
GATE_REF = "pytorch/pytorch:torch/_higher_order_ops/wrap.py"  # 2.2-2.4 experimental-flag gate
MODES_REF = "pytorch/pytorch:torch/utils/checkpoint.py"  # "must generate a tuple of two TorchDispatchModes"

te_bug = pytest.mark.upstream_bug(
    "NVIDIA/TransformerEngine#890", raises="NotImplementedError",
    match=r"checkpoint not implemented for .* context_fn")
context_fn_gate = pytest.mark.upstream_bug(
    GATE_REF, raises="AssertionError",
    match="Passing context_fn to torch.utils.checkpoint is currently not supported under torch.compile")
modes_required = pytest.mark.upstream_bug(
    MODES_REF, raises="AssertionError", match="must generate a tuple of two `TorchDispatchMode`s")
# TE's fix disables Dynamo on the wrapper: under fullgraph=True calling it is an error by design.
skipped_wrapper_raises = pytest.mark.upstream_bug(
    "NVIDIA/TransformerEngine#894", raises="torch._dynamo.exc.Unsupported",
    match="skipfiles|skip function|marked as skipped")


class Block(torch.nn.Module):
    """Linear, matmul and pointwise ops: something to recompute, and an mm for SAC policies."""

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(8, 8)

    def forward(self, x):
        h = torch.sin(self.linear(x))
        return torch.cos(h @ h.t()) @ h


class Checkpointed(torch.nn.Module):
    """Runs `Block` through `ckpt(block, x, **ckpt_kwargs)`."""

    def __init__(self, ckpt=checkpoint, **ckpt_kwargs):
        super().__init__()
        self.block = Block()
        self.ckpt = ckpt
        self.ckpt_kwargs = ckpt_kwargs

    def forward(self, x):
        return self.ckpt(self.block, x, **self.ckpt_kwargs)


def always_context_fn_checkpoint(fn, *args, context_fn=None, **kwargs):
    """Library wrapper (TE 1.5-1.7 style): always passes context_fn, defaulting to the no-op."""
    return checkpoint(fn, *args, use_reentrant=False,
                      context_fn=context_fn or torch.utils.checkpoint.noop_context_fn, **kwargs)


def optional_context_fn_checkpoint(fn, *args, context_fn=None, **kwargs):
    """Wrapper that forwards context_fn only when the caller gave one."""
    if context_fn is not None:
        kwargs["context_fn"] = context_fn
    return checkpoint(fn, *args, use_reentrant=False, **kwargs)


def disabled_dynamo_checkpoint(*args, **kwargs):
    """TE's fix (PR #894): the same always-context_fn wrapper, hidden from Dynamo."""
    return _DISABLED(*args, **kwargs)


_DISABLED = torch._disable_dynamo(always_context_fn_checkpoint)


class CountingMode(TorchDispatchMode):
    """A pass-through TorchDispatchMode that counts the ops it sees."""

    def __init__(self, seen):
        super().__init__()
        self.seen = seen

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.seen.append(func)
        return func(*args, **(kwargs or {}))


MODE_OPS: list = []


def dispatch_modes_context_fn():
    return CountingMode(MODE_OPS), CountingMode(MODE_OPS)


def nullcontext_context_fn():
    return contextlib.nullcontext(), contextlib.nullcontext()


def x_input(device):
    return torch.randn(4, 8, device=device, requires_grad=True)


def check_logged_under_compile(case, model, x, log, what):
    """case.check, then assert that `log` (filled by the context_fn) grew during the compiled
    run and not only during the eager one: the compiled code honoured the context_fn."""
    log.clear()
    _run_once(model, x)
    eager_entries = len(log)
    log.clear()
    case.check(model, x, runs=1)
    compiled_entries = len(log) - eager_entries
    case.record(**{f"{what}_eager": eager_entries, f"{what}_compiled": compiled_entries})
    assert compiled_entries > 0, f"context_fn never ran under compile ({what})"
    return compiled_entries


def _run_once(model, x):
    import copy

    copy.deepcopy(model)(x.detach().clone().requires_grad_()).sum().backward()


def check_modes_ran(case, device):
    model = Checkpointed(context_fn=dispatch_modes_context_fn, use_reentrant=False).to(device)
    check_logged_under_compile(case, model, x_input(device), MODE_OPS, "mode_ops")


# --- no context_fn --------------------------------------------------------------------------

@pytest.mark.parametrize("fullgraph", [True], ids=["fullgraph"])
def test_plain_checkpoint(case, device, backend, fullgraph):
    case.check(Checkpointed(use_reentrant=False).to(device), x_input(device))


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_use_reentrant_true(case, device, backend, fullgraph):
    case.check(Checkpointed(use_reentrant=True).to(device), x_input(device))


# --- library wrappers -----------------------------------------------------------------------

@te_bug
@pytest.mark.parametrize("backend", ["eager"])
def test_wrapper_always_passes_noop_context_fn(case, device, backend, fullgraph):
    # fullgraph=False does not help: the error is raised inside Dynamo, not as a graph break.
    case.check(Checkpointed(ckpt=always_context_fn_checkpoint).to(device), x_input(device))


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
@pytest.mark.parametrize("fullgraph", [
    pytest.param(False, id="graphbreaks"),
    pytest.param(True, id="fullgraph", marks=skipped_wrapper_raises),
])
def test_wrapper_disable_dynamo_fix(case, device, backend, fullgraph):
    case.check(Checkpointed(ckpt=disabled_dynamo_checkpoint).to(device), x_input(device))
    # The wrapper is skipped: a graph break, and checkpoint runs eagerly.
    assert case.metrics["graph_breaks"] >= 1, case.metrics


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
@pytest.mark.parametrize("fullgraph", [True], ids=["fullgraph"])
def test_wrapper_passes_context_fn_only_when_given(case, device, backend, fullgraph):
    case.check(Checkpointed(ckpt=optional_context_fn_checkpoint).to(device), x_input(device))


# --- user context_fn ------------------------------------------------------------------------

@context_fn_gate
@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_context_fn_dispatch_modes(case, device, backend, fullgraph):
    check_modes_ran(case, device)


@context_fn_gate
@pytest.mark.parametrize("backend", [
    # The eager backend runs the checkpoint HOP eagerly, where any context managers are fine.
    "eager",
    pytest.param("aot_eager", marks=modes_required),
])
def test_context_fn_plain_context_managers(case, device, backend, fullgraph):
    case.check(Checkpointed(context_fn=nullcontext_context_fn, use_reentrant=False).to(device),
               x_input(device))


# --- selective activation checkpointing -----------------------------------------------------

def _saves_mm(op):
    return op in (torch.ops.aten.mm.default, torch.ops.aten.addmm.default)


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
@pytest.mark.parametrize("fullgraph", [True], ids=["fullgraph"])
def test_sac_create_selective_checkpoint_contexts(case, device, backend, fullgraph):
    create = need("torch.utils.checkpoint.create_selective_checkpoint_contexts")
    policy_enum = need("torch.utils.checkpoint.CheckpointPolicy")
    decisions = []

    def policy(ctx, op, *args, **kwargs):
        decisions.append(op)
        return policy_enum.MUST_SAVE if _saves_mm(op) else policy_enum.PREFER_RECOMPUTE

    def context_fn():
        return create(policy)

    model = Checkpointed(context_fn=context_fn, use_reentrant=False).to(device)
    check_logged_under_compile(case, model, x_input(device), decisions, "policy_calls")
    assert any(_saves_mm(op) for op in decisions), "the SAC policy never saw the matmuls"


@context_fn_gate
@pytest.mark.parametrize("backend", ["aot_eager"])
@pytest.mark.parametrize("fullgraph", [True], ids=["fullgraph"])
def test_sac_private_context_fn_gen(case, device, backend, fullgraph):
    # 2.2-2.4 spelling; without the experimental flag the gate rejects it.
    gen = need("torch.utils.checkpoint._pt2_selective_checkpoint_context_fn_gen")
    decisions = []

    def policy(mode, op, *args, **kwargs):
        decisions.append(op)
        return _saves_mm(op)

    def context_fn():
        return gen(policy)

    model = Checkpointed(context_fn=context_fn, use_reentrant=False).to(device)
    check_logged_under_compile(case, model, x_input(device), decisions, "policy_calls")
    assert any(_saves_mm(op) for op in decisions), "the SAC policy never saw the matmuls"


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
@pytest.mark.parametrize("fullgraph", [True], ids=["fullgraph"])
@pytest.mark.parametrize("variant_fn", ["dispatch_modes", "private_sac"])
def test_experimental_context_fn_flag(case, device, backend, fullgraph, variant_fn):
    flag = "_experimental_support_context_fn_in_torch_utils_checkpoint"
    need(f"torch._dynamo.config.{flag}")
    with unittest.mock.patch.object(torch._dynamo.config, flag, True):
        if variant_fn == "dispatch_modes":
            check_modes_ran(case, device)
        else:
            gen = need("torch.utils.checkpoint._pt2_selective_checkpoint_context_fn_gen")
            decisions = []

            def context_fn():
                return gen(lambda mode, op, *a, **k: decisions.append(op) or _saves_mm(op))

            model = Checkpointed(context_fn=context_fn, use_reentrant=False).to(device)
            check_logged_under_compile(case, model, x_input(device), decisions, "policy_calls")
            assert any(_saves_mm(op) for op in decisions), "the SAC policy never saw the matmuls"
    assert getattr(torch._dynamo.config, flag) is False, "flag not restored"


# --- the real TransformerEngine checkpoint --------------------------------------------------

def _te_checkpoint():
    need("transformer_engine.pytorch")
    import transformer_engine.pytorch as te

    ckpt = getattr(te, "checkpoint", None) or need("transformer_engine.pytorch.distributed.checkpoint")
    params = inspect.signature(ckpt).parameters
    if "distribute_saved_activations" in params and \
            params["distribute_saved_activations"].kind is inspect.Parameter.POSITIONAL_OR_KEYWORD:
        # Old signature: checkpoint(fn, distribute_saved_activations, get_rng_state_tracker, tp_group, *args)
        return lambda fn, *args, **kw: ckpt(fn, False, None, None, *args, **kw)
    return ckpt


@te_bug
@pytest.mark.parametrize("device", [pytest.param(
    "cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason=NO_GPU))])
@pytest.mark.parametrize("backend", ["eager"])
@pytest.mark.parametrize("fullgraph", [
    pytest.param(False, id="graphbreaks"),
    pytest.param(True, id="fullgraph", marks=skipped_wrapper_raises),
])
def test_transformer_engine_checkpoint(case, device, backend, fullgraph):
    te_ckpt = _te_checkpoint()
    case.check(Checkpointed(ckpt=te_ckpt, use_reentrant=False).to(device), x_input(device))
