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

import pytest
import torch
from torch.utils.checkpoint import checkpoint

from harness.casekit import TOLERANCES, OpLog

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
# torch < 2.5 traced under an eager checkpoint's saved-tensor hooks (fixed in 2.5 by PR #123196).
ambient_hooks = pytest.mark.upstream_bug(
    "pytorch/pytorch#113263", raises="CheckpointError", match="A different number of tensors was saved")
# Before 2.5 aot_eager and inductor fail while tracing ("FX to symbolically trace a dynamo-optimized
# function", the same bug), and the failure breaks later checkpoints in the process: not run there.
traced_under_hooks = pytest.mark.skipif(
    "tuple(int(p) for p in torch.__version__.split('.')[:2]) < (2, 5)", reason="torch < 2.5: tracing under the eager "
    "checkpoint's saved-tensor hooks fails (pytorch/pytorch#113263) and leaves later checkpoints in this process broken")
EAGER_CHECKPOINT_BACKENDS = pytest.mark.parametrize("backend", [
    "eager", pytest.param("aot_eager", marks=traced_under_hooks), pytest.param("inductor", marks=traced_under_hooks)])
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
        return [f"{op}:{str(o.dtype).replace('torch.', '')}" for op, o in zip(("mm", "sigmoid", "mse_loss"), outputs)], log.ops
    before, compiled = autocast_state(device), compiled or case.compile(fn)
    x, w = torch.randn(4, 8, device=device, requires_grad=True), torch.randn(8, 8, device=device, requires_grad=True)
    case.check(fn, x, w, compiled=compiled, tolerances=TOLERANCES[dtype])
    (eager_fwd, eager_bwd), (fwd, bwd) = step(fn), step(compiled)
    case.record(forward_dtypes={"eager": eager_fwd, "compiled": fwd}, backward_matmuls={"eager": eager_bwd, "compiled": bwd})
    assert autocast_state(device) == before, "autocast state leaked out of the compiled code"
    assert eager_fwd[0] == f"mm:{dtype}".replace("torch.", "") and len(eager_bwd) == 3, f"eager: {eager_fwd}, {eager_bwd}"
    assert fwd == eager_fwd, f"forward op dtypes: compiled {fwd}, eager {eager_fwd}"
    assert sorted(bwd) == sorted(eager_bwd), f"backward matmuls: compiled {bwd}, eager {eager_bwd}" + (
        "; the checkpointed function was not recomputed" if len(bwd) < len(eager_bwd) else "")


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
            runs[key].append([f"{op}:{str(o.dtype).replace('torch.', '')}" for op, o in zip(("mm", "sigmoid", "mse_loss"), outputs)])
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


@ambient_hooks
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


@ambient_hooks
@pytest.mark.parametrize("device,dtype", DEVICE_DTYPES)
@EAGER_CHECKPOINT_BACKENDS
@pytest.mark.parametrize("fullgraph", [False], ids=["graphbreaks"])
def test_context_fn_restores_autocast_eager_checkpoint_of_compiled(case, device, dtype, backend, fullgraph):
    # The context_fn is the eager checkpoint's: no compile limits on it; the recompute runs the
    # compiled function under the autocast it restores.
    check_eager_checkpoint_runs(case, case.compile(body), device, dtype,
                                context_fn=restore_autocast_context_fn(device))


# --- property cases (harness/properties.py): programs drawn around autocast ---------------------------

import dataclasses  # noqa: E402  (this section stands apart from the hand-written cases above)

from hypothesis import assume  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from harness.properties import explore  # noqa: E402

# What the body does after its matmul; "mm_fp32": a matmul with autocast disabled (float32 inside).
AUTOCAST_OPS = {"sigmoid": "torch.sigmoid(y)", "relu": "torch.relu(y)", "mm": "y @ w", "mean_keep": "y.mean(-1, keepdim=True) * y",
                "softmax": "torch.softmax(y, -1)", "mse": "torch.nn.functional.mse_loss(y, torch.zeros_like(y), reduction='none')",
                "mm_fp32": "mm_fp32(y, w)"}
AUTOCAST_AT = ("outside", "inside_compiled", "inside_body")  # around the compiled call, around the checkpoint, inside it
COMPILED = ("whole", "body")  # what torch.compile wraps: the function with its checkpoint, or the checkpointed body


def mm_fp32(y, w):
    with torch.autocast(y.device.type, enabled=False):
        return y.float() @ w.float()


@dataclasses.dataclass(frozen=True)
class AutocastProgram:
    """`body(x, w)` (x @ w, then `ops`; returns each result) under autocast to `dtype` entered at
    `autocast_at`, checkpointed or not, `compiled` the whole function or only the body; inputs in `input_dtype`."""
    ops: tuple = ("sigmoid", "mse")
    device: str = "cpu"
    dtype: str = "bfloat16"
    input_dtype: str = "float32"
    autocast_at: str = "inside_compiled"
    checkpointed: bool = True
    compiled: str = "whole"

    @property
    def source(self) -> str:
        device = self.device
        autocast = f"torch.autocast({device!r}, dtype=torch.{self.dtype})"
        inside_body = self.autocast_at == "inside_body"
        lines = ["def body(x, w):"] + ([f"    with {autocast}:"] if inside_body else [])
        pad = "        " if inside_body else "    "
        lines += [f"{pad}y = x @ w", f"{pad}results = [y.detach()]"]
        for op in self.ops:
            lines += [f"{pad}y = {AUTOCAST_OPS[op]}", f"{pad}results.append(y.detach())"]
        lines += [f"{pad}return (*results[:-1], y)"]
        call = "checkpoint(body, x, w, use_reentrant=False)" if self.checkpointed else "body(x, w)"
        lines += ["def fn(x, w):"] + ([f"    with {autocast}:", f"        return {call}"]
                                      if self.autocast_at == "inside_compiled" else [f"    return {call}"])
        return "\n".join(lines)

    def functions(self, compile_fn):
        """(eager, compiled) versions of fn, each under autocast where autocast_at is "outside"."""
        made = []
        for compile_body in (False, self.compiled == "body"):
            namespace = {"torch": torch, "checkpoint": checkpoint, "mm_fp32": mm_fp32}
            exec(compile(self.source, "<autocast program>", "exec"), namespace)
            if compile_body:
                namespace["body"] = compile_fn(namespace["body"])
            made.append(namespace["fn"])
        eager, compiled = made[0], made[1] if self.compiled == "body" else compile_fn(made[1])
        if self.autocast_at == "outside":
            wrap = torch.autocast(self.device, dtype=getattr(torch, self.dtype))
            eager, compiled = wrap(eager), wrap(compiled)
        return eager, compiled


def autocast_programs(device):
    dtypes = ("bfloat16",) if device == "cpu" else ("float16", "bfloat16")
    return st.builds(AutocastProgram, device=st.just(device), ops=st.lists(st.sampled_from(sorted(AUTOCAST_OPS)), max_size=3).map(tuple),
                     dtype=st.sampled_from(dtypes), input_dtype=st.sampled_from(("float32", "bfloat16")),
                     autocast_at=st.sampled_from(AUTOCAST_AT), checkpointed=st.booleans(),
                     compiled=st.sampled_from(COMPILED))


PINNED_AUTOCAST = [AutocastProgram(), AutocastProgram(autocast_at="outside"), AutocastProgram(autocast_at="inside_body")]


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
    case.record(forward_dtypes={"eager": eager_fwd, "compiled": fwd}, backward_matmuls={"eager": eager_bwd, "compiled": bwd})
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
@ambient_hooks
@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=_no_cuda)])
@PROPERTY_BACKENDS
def test_property_autocast(case, device, backend, fullgraph):
    # Programs under autocast: the dtype inside and the inputs' outside, where autocast is entered,
    # whether the body is checkpointed, what torch.compile wraps.
    pinned = [dataclasses.replace(program, device=device) for program in PINNED_AUTOCAST]
    explore(case, "autocast", autocast_programs(device),
            lambda program: check_autocast_program(case, program, device, backend), pinned=pinned)
