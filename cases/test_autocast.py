"""Autocast with activation checkpointing under torch.compile: does each op compute in the dtype it
does eagerly, in the forward and in the recompute?

The checkpointed function `body` returns each op's result, so its outputs show the dtype each op
computed in: a matmul (autocast: low precision), sigmoid (follows its input), mse_loss (autocast:
float32). Backward's matmuls (harness OpLog) show the recompute and the gradients, with their dtypes.
Covered: autocast entered around the compiled function, inside it around the checkpoint, inside the
checkpointed function, an eager checkpoint of a compiled function (pytorch/pytorch#113263 before
2.5), and a `context_fn` that re-enters the forward's autocast for the recompute (what TE's
checkpoint does; related: pytorch/pytorch#121966, #141896, #144637, #148831). Dtypes: bf16 on CPU,
fp16 and bf16 on CUDA. The device-argument spellings `torch.is_autocast_enabled(device)` /
`torch.get_autocast_dtype(device)` start in 2.4; older torch uses the per-device functions.
"""

import contextlib
import dataclasses

import pytest
import torch
from hypothesis import assume
from torch.utils.checkpoint import checkpoint

from harness.plugin.casekit import TOLERANCES, OpLog
from harness.plugin.properties import explore
from programs.autocast import AutocastOpProgram, AutocastProgram, autocast_op_programs, autocast_programs
from programs.op_programs import check_op_program
from programs.opcall import OpCall, op_calls
from programs.opinfo import about, need_op_db
from shared_declarations import EAGER_CHECKPOINT_OF_COMPILED, FULLGRAPH_REFUSES_GRAPH_BREAK, with_marks

NO_GPU = "no CUDA device: torch.cuda.is_available() is False"
_no_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason=NO_GPU)

DEVICE_DTYPES = [
    pytest.param("cpu", torch.bfloat16, id="cpu-bf16"),
    pytest.param("cuda", torch.float16, id="cuda-fp16", marks=_no_cuda),
    pytest.param("cuda", torch.bfloat16, id="cuda-bf16", marks=_no_cuda),
]

# backend="eager" runs Dynamo's checkpoint op as a plain call: nothing is recomputed (seen on 2.1-2.9;
# 2.13 recomputes).
not_recomputed = pytest.mark.upstream_bug(
    "pytorch/pytorch#160773", raises="AssertionError", match="the checkpointed function was not recomputed")
BACKENDS = pytest.mark.parametrize("backend", [pytest.param("eager", marks=not_recomputed), "aot_eager", "inductor"])
EAGER_CHECKPOINT_BACKENDS = pytest.mark.parametrize("backend", [
    "eager", "aot_eager", "inductor"])
# Documented limitations, as in cases/test_checkpoint.py: a context_fn under compile came with
# pytorch/pytorch#105489 (behind a flag in 2.2-2.4, not traced in 2.1) and must return dispatch modes.
context_fn_limits = pytest.mark.limitation(
    "pytorch/pytorch#105489", raises=("AssertionError", "torch._dynamo.exc.Unsupported"),
    match="Passing context_fn to torch.utils.checkpoint is currently not supported under torch.compile"
          "|call_function args: .*FunctionVariable|must generate a tuple of two `TorchDispatchMode`s")


def body(x, w):
    """mm -> sigmoid -> mse_loss, returning each op's result (gradients flow through the last)."""
    h = x @ w
    s = torch.sigmoid(h)
    return h.detach(), s.detach(), torch.nn.functional.mse_loss(s, torch.zeros_like(s), reduction="none")


def autocast_state(device):
    """(enabled, dtype) of autocast on `device`."""
    if hasattr(torch, "get_autocast_dtype"):  # torch 2.4+; before, one function per device
        return torch.is_autocast_enabled(device), torch.get_autocast_dtype(device)
    return ((torch.is_autocast_cpu_enabled(), torch.get_autocast_cpu_dtype()) if device == "cpu"
            else (torch.is_autocast_enabled(), torch.get_autocast_gpu_dtype()))


def check_dtypes(case, fn, device, dtype, compiled=None):
    """case.check, then one more step eagerly and compiled (`compiled`: the case's compile of fn):
    the dtype of each op of the forward, and the matmuls of backward (1 recompute + 2 gradients)."""
    def step(f):
        outputs = f(x, w)
        with OpLog() as log:
            sum(o.float().sum() for o in outputs).backward()
        return [f"{op}:{str(o.dtype).replace('torch.', '')}"
                for op, o in zip(("mm", "sigmoid", "mse_loss"), outputs, strict=True)], log.ops
    before, compiled = autocast_state(device), compiled or case.compile(fn)
    x, w = torch.randn(4, 8, device=device, requires_grad=True), torch.randn(8, 8, device=device, requires_grad=True)
    case.check(fn, x, w, compiled=compiled, tolerances=TOLERANCES[dtype])
    (eager_fw, eager_bw), (fw, bw) = step(fn), step(compiled)
    case.record(forward_dtypes=dict(eager=eager_fw, compiled=fw), backward_matmuls=dict(eager=eager_bw, compiled=bw))
    assert autocast_state(device) == before, "autocast state leaked out of the compiled code"
    assert eager_fw[0] == f"mm:{dtype}".replace("torch.", "") and len(eager_bw) == 3, f"eager: {eager_fw}, {eager_bw}"
    assert fw == eager_fw, f"forward op dtypes: compiled {fw}, eager {eager_fw}"
    assert sorted(bw) == sorted(eager_bw), f"backward matmuls: compiled {bw}, eager {eager_bw}" + (
        "; the checkpointed function was not recomputed" if len(bw) < len(eager_bw) else "")


# --- where autocast is entered ----------------------------------------------------------------

@pytest.mark.parametrize("device,dtype", DEVICE_DTYPES)
@BACKENDS
@pytest.mark.parametrize("fullgraph", [True], ids=["fullgraph"])
def test_autocast_around_compiled_checkpoint(case, device, dtype, backend, fullgraph):
    # Autocast is entered eagerly (torch.autocast as a decorator), around the compiled function, which
    # only checkpoints.
    def ckpt(x, w):
        return checkpoint(body, x, w, use_reentrant=False)
    eager, compiled = torch.autocast(device, dtype=dtype)(ckpt), torch.autocast(device, dtype=dtype)(case.compile(ckpt))
    check_dtypes(case, eager, device, dtype, compiled=compiled)


@pytest.mark.parametrize("device,dtype", DEVICE_DTYPES)
@BACKENDS
@pytest.mark.parametrize("fullgraph", [True], ids=["fullgraph"])
def test_autocast_inside_compiled_around_checkpoint(case, device, dtype, backend, fullgraph):
    def fn(x, w):
        with torch.autocast(device, dtype=dtype):
            return checkpoint(body, x, w, use_reentrant=False)
    check_dtypes(case, fn, device, dtype)


@pytest.mark.parametrize("device,dtype", DEVICE_DTYPES)
@BACKENDS
@pytest.mark.parametrize("fullgraph", [True], ids=["fullgraph"])
def test_autocast_inside_checkpointed_function(case, device, dtype, backend, fullgraph):
    def autocast_body(x, w):
        with torch.autocast(device, dtype=dtype):
            return body(x, w)
    check_dtypes(case, lambda x, w: checkpoint(autocast_body, x, w, use_reentrant=False), device, dtype)


# --- an eager checkpoint of a compiled function -------------------------------------------------

def check_eager_checkpoint_runs(case, compiled_body, device, dtype, **checkpoint_kwargs):
    """An eager checkpoint, under autocast, of body and of compiled_body: case.check, then each run
    of the function in one step (forward, recompute) with the dtype of each of its ops. (OpLog
    cannot watch this backward: under a dispatch mode the compiled function runs eagerly.)"""
    runs = {"eager": [], "compiled": []}
    def step_fn(fn, key):  # fn under an eager checkpoint, under autocast; notes each run of fn in runs[key]
        def run(x, w):
            outputs = fn(x, w)
            runs[key].append([f"{op}:{str(o.dtype).replace('torch.', '')}"  # case.check reports a count that differs
                              for op, o in zip(("mm", "sigmoid", "mse_loss"), outputs, strict=False)])
            return outputs
        def step(x, w):
            with torch.autocast(device, dtype=dtype):
                return checkpoint(run, x, w, use_reentrant=False, **checkpoint_kwargs)
        return step
    x, w = torch.randn(4, 8, device=device, requires_grad=True), torch.randn(8, 8, device=device, requires_grad=True)
    case.check(step_fn(body, "eager"), x, w, compiled=step_fn(compiled_body, "compiled"), tolerances=TOLERANCES[dtype])
    for key, fn in (("eager", body), ("compiled", compiled_body)):
        runs[key].clear()
        with torch.utils.checkpoint.set_checkpoint_early_stop(False):  # the recompute runs to its end
            sum(o.float().sum() for o in step_fn(fn, key)(x, w)).backward()
    case.record(function_runs_per_step=runs)
    assert len(runs["eager"]) == 2, f"eager checkpoint ran the function {len(runs['eager'])} times, not 2"
    assert runs["compiled"] == runs["eager"], \
        f"runs (forward, recompute) and their op dtypes: compiled {runs['compiled']}, eager {runs['eager']}"


@with_marks(EAGER_CHECKPOINT_OF_COMPILED)
@pytest.mark.parametrize("device,dtype", DEVICE_DTYPES)
@EAGER_CHECKPOINT_BACKENDS
@pytest.mark.parametrize("fullgraph", [True], ids=["fullgraph"])
def test_eager_checkpoint_of_compiled_function_under_autocast(case, device, dtype, backend, fullgraph):
    # The pytorch/pytorch#121966 shape: the recompute runs the compiled function again from backward.
    check_eager_checkpoint_runs(case, case.compile(body), device, dtype)


# --- a context_fn that restores autocast for the recompute --------------------------------------

def restore_autocast_context_fn(device):
    """A context_fn for `device`. Forward: nothing. Recompute: the autocast state the forward ran
    under (read when checkpoint calls context_fn, in the forward), as TE's checkpoint does."""
    def context_fn():
        enabled, dtype = autocast_state(device)
        return contextlib.nullcontext(), torch.autocast(device, dtype=dtype, enabled=enabled)
    return context_fn


@context_fn_limits
@pytest.mark.parametrize("device,dtype", DEVICE_DTYPES)
@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
@pytest.mark.parametrize("fullgraph", [True], ids=["fullgraph"])
def test_context_fn_restores_autocast_for_recompute(case, device, dtype, backend, fullgraph):
    context_fn = restore_autocast_context_fn(device)
    def fn(x, w):
        with torch.autocast(device, dtype=dtype):
            return checkpoint(body, x, w, use_reentrant=False, context_fn=context_fn)
    check_dtypes(case, fn, device, dtype)


@with_marks(EAGER_CHECKPOINT_OF_COMPILED)
@pytest.mark.parametrize("device,dtype", DEVICE_DTYPES)
@EAGER_CHECKPOINT_BACKENDS
@pytest.mark.parametrize("fullgraph", [False], ids=["graphbreaks"])
def test_context_fn_restores_autocast_eager_checkpoint_of_compiled(case, device, dtype, backend, fullgraph):
    # The context_fn is the eager checkpoint's: no compile limits on it; the recompute runs the
    # compiled function under the autocast it restores.
    check_eager_checkpoint_runs(case, case.compile(body), device, dtype,
                                context_fn=restore_autocast_context_fn(device))


# --- property cases (harness/plugin/properties.py): programs drawn around autocast ---------------------------

PINNED_AUTOCAST = [AutocastProgram(), AutocastProgram(autocast_at="outside"),
                   AutocastProgram(autocast_at="inside_body")]


def check_autocast_program(case, program, device, backend):
    """case.check (outputs with their dtypes: the dtype each op computed in), then one more step
    eagerly and compiled: backward's matmuls and their dtypes agree, and no autocast state leaks."""
    if program.compiled == "body" and program.checkpointed:  # an eager checkpoint of a compiled body
        assume(torch_version() >= (2, 5) or backend == "eager")  # below: the process's later checkpoints break
    eager, compiled = program.functions(case.compile)
    dtype = getattr(torch, program.input_dtype)
    x = torch.randn(4, 8, device=device, dtype=dtype, requires_grad=True)
    # Inputs scaled so that values stay near 1 through a few ops: bfloat16's rounding, not the
    # program's growth, should be what the tolerances cover.
    w = (torch.randn(8, 8, device=device) / 3).to(dtype).requires_grad_()
    before = autocast_state(device)
    case.check(eager, x, w, compiled=compiled, tolerances=TOLERANCES[getattr(torch, program.dtype)])

    def step(f):
        outputs = f(x, w)
        with OpLog() as log:
            outputs[-1].float().sum().backward()
        return [str(o.dtype).replace("torch.", "") for o in outputs], log.ops
    (eager_fwd, eager_bwd), (fwd, bwd) = step(eager), step(compiled)
    case.record(forward_dtypes={"eager": eager_fwd, "compiled": fwd},
                backward_matmuls={"eager": eager_bwd, "compiled": bwd})
    assert autocast_state(device) == before, "autocast state leaked out of the compiled code"
    assert fwd == eager_fwd, f"forward op dtypes: compiled {fwd}, eager {eager_fwd}"
    assert sorted(bwd) == sorted(eager_bwd), f"backward matmuls: compiled {bwd}, eager {eager_bwd}" + (
        "; the checkpointed function was not recomputed" if len(bwd) < len(eager_bwd) else "")


def torch_version():
    return tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2])


# Compiled backward runs under the forward's autocast: an autocast(enabled=False) matmul's gradients
# come out in low precision (eager: float32). Open upstream; seen here on 2.15 with aot_eager and inductor.
backward_ignores_disabled = pytest.mark.upstream_bug(
    "pytorch/pytorch#179804", raises="AssertionError",
    match=r"backward matmuls: compiled \[[^\]]*bfloat16[^\]]*\], eager \[[^\]]*float32")
# An eager checkpoint, under autocast, of a compiled body whose recompute's metadata differs.
recompute_metadata = pytest.mark.upstream_bug(
    "pytorch/pytorch#141896", raises="CheckpointError",
    match="Recomputed values for the following tensors have different metadata")
PROPERTY_BACKENDS = pytest.mark.parametrize("backend", [
    pytest.param("eager", marks=not_recomputed),
    pytest.param("aot_eager", marks=[backward_ignores_disabled, recompute_metadata]),
    pytest.param("inductor", marks=[backward_ignores_disabled, recompute_metadata])])


@pytest.mark.flaky(reruns=0)  # the table's examples are fixed: a second run tells nothing new
@with_marks(EAGER_CHECKPOINT_OF_COMPILED)
@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=_no_cuda)])
@PROPERTY_BACKENDS
def test_property_autocast(case, device, backend, fullgraph):
    # Programs under autocast: the dtype inside and the inputs' outside, where autocast is entered,
    # whether the body is checkpointed, what torch.compile wraps.
    pinned = [dataclasses.replace(program, device=device) for program in PINNED_AUTOCAST]
    explore(case, "autocast", autocast_programs(device),
            lambda program: check_autocast_program(case, program, device, backend), pinned=pinned)


# --- property cases over torch's own op database (cases/programs/op_programs.py) ---------------------

OP_CALLS = op_calls()  # this torch's op_db, read at collection: once per worker, before any case forks
PINNED_AUTOCAST_OP = [
    AutocastOpProgram(OpCall("sin")),  # replayed by `repro` where a cell records no failing example
    # Found here (README, "Found here"): compiled, vector_norm(x, ord=0) of a tensor that is not a
    # leaf does not require grad (eagerly it does), so the backward raises.
    AutocastOpProgram(OpCall("linalg.vector_norm", sample=4), enabled=False),
]


@pytest.mark.flaky(reruns=0)  # the table's examples are fixed: a second run tells nothing new
@FULLGRAPH_REFUSES_GRAPH_BREAK
@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=_no_cuda)])
@pytest.mark.parametrize("backend", ["eager", "aot_eager", "inductor"])
def test_property_autocast_op(case, device, backend):
    # One op of torch's OpInfo database and one of its samples under autocast: its dtype, enabled,
    # cache, a nested autocast, entered inside or around the compiled function, checkpointed or not;
    # fullgraph, dynamic shapes, side effects, passed numbers and a second sample drawn too.
    need_op_db()
    explore(case, "autocast_op", autocast_op_programs(OP_CALLS, device),
            lambda program: check_op_program(case, program, backend), about=about(),
            pinned=[dataclasses.replace(program, device=device) for program in PINNED_AUTOCAST_OP])
