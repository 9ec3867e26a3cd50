"""Activation checkpointing under torch.compile: is the checkpointed function really recomputed?

Each case runs `sigmoid(x @ w)` through `torch.utils.checkpoint.checkpoint` eagerly and compiled,
and counts the matmuls that backward runs (harness OpLog): eagerly 3, one recompute and two
gradients (2 without checkpoint). Covered: the plain call, `use_reentrant=True`, an eager checkpoint
of a compiled function, library wrappers that always pass `context_fn=noop_context_fn` (the
TransformerEngine pattern, NVIDIA/TransformerEngine#890), TE's fix (`torch._disable_dynamo` on the
wrapper, NVIDIA/TransformerEngine#894), a wrapper that passes context_fn only when given one, user
context_fns (are their contexts active, at run time, for the forward and for the recompute?),
selective activation checkpointing (does the policy decide what backward recomputes?), the 2.2-2.4
experimental flag, and the real TE checkpoint where it is installed. See docs/upstream.md, section 1.

Features that only some torch versions have are skipped with string conditions, evaluated where
the case runs (a reproduction script checks them itself).
"""

import contextlib
import dataclasses
import functools
import inspect

import pytest
import torch
from hypothesis import assume
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.checkpoint import checkpoint

from harness.plugin.casekit import OpLog
from harness.plugin.properties import explore
from programs.checkpoint import CheckpointOpProgram, CheckpointProgram, checkpoint_op_programs, checkpoint_programs
from programs.op_programs import check_op_program
from programs.opcall import OpCall, op_calls
from programs.opinfo import about, need_op_db
from shared_declarations import EAGER_CHECKPOINT_OF_COMPILED, FULLGRAPH_REFUSES_GRAPH_BREAK, with_marks

NO_GPU = "no CUDA device: torch.cuda.is_available() is False"
FLAG = "_experimental_support_context_fn_in_torch_utils_checkpoint"  # torch 2.2-2.4

# backend="eager" runs Dynamo's checkpoint op as a plain call: nothing is recomputed (seen on 2.1-2.9;
# 2.13 recomputes).
not_recomputed = pytest.mark.upstream_bug(
    "pytorch/pytorch#160773", raises="AssertionError", match="the checkpointed function was not recomputed")
EAGER_NOT_RECOMPUTED = pytest.param("eager", marks=not_recomputed)
# The wrapper's no-op context_fn is not recognised by Dynamo's checkpoint handling
# (CheckpointHigherOrderVariable tests `kwargs["context_fn"] != noop_context_fn`, a VariableTracker
# against a function, always true); what follows that test differs by version, hence one message
# per range. torch 2.1.2 has no context_fn handling there at all: it hands every checkpoint kwarg to
# the FX proxy, and FX cannot put a function into a graph (torch/fx/proxy.py: "argument of type").
# torch 2.2.2 goes on with `context_fn = kwargs.pop("context_fn").fn`
# (torch/_dynamo/variables/higher_order_ops.py, lines 1421-1422), and the no-op, from a module
# Dynamo skips, is a SkipFilesVariable, which has no `.fn`. From 2.3 an if-chain on the tracker's
# class raises NotImplementedError. fullgraph=False does not help: the error is raised inside
# Dynamo, not as a graph break.
TE_890 = "NVIDIA/TransformerEngine#890"
TE_BUG = (
    pytest.mark.upstream_bug(TE_890, raises="NotImplementedError", match="argument of type: <class 'function'>",
                             until="2.1"),
    pytest.mark.upstream_bug(TE_890, raises="AttributeError", match="'SkipFilesVariable' object has no attribute 'fn'",
                             since="2.2", until="2.2"),
    pytest.mark.upstream_bug(TE_890, raises="NotImplementedError",
                             match=r"checkpoint not implemented for .* context_fn", since="2.3"),
)


te_bug = with_marks(TE_BUG)


# Documented limitations: context_fn under compile came with pytorch/pytorch#105489 (behind a flag
# in 2.2-2.4; torch 2.1 cannot trace a checkpoint given one), and must return TorchDispatchModes.
context_fn_gate = pytest.mark.limitation(
    "pytorch/pytorch#105489", raises="AssertionError",
    match="Passing context_fn to torch.utils.checkpoint is currently not supported under torch.compile")
context_fn_untraced = pytest.mark.limitation(
    "pytorch/pytorch#105489", raises="torch._dynamo.exc.Unsupported", match=r"call_function args: .*FunctionVariable")
modes_required = pytest.mark.limitation(
    "pytorch/pytorch#105489", raises="AssertionError",
    match="must generate a tuple of two `TorchDispatchMode`s")
# Under aot_eager and inductor, AOTAutograd traces the checkpoint's higher-order op
# (torch/_higher_order_ops/wrap.py, tag_activation_checkpoint) with context_fn's modes entered: they
# tag the graph's nodes for saving or recomputation while tracing, and the compiled graph runs plain
# aten ops with no mode entered. The design of #105489; the docs do not tell users so.
modes_enter_only_while_tracing = pytest.mark.limitation(
    "pytorch/pytorch#105489", raises="AssertionError", match="contexts active at run time")
# fullgraph=True refuses the graph break a disabled function makes.
disabled_raises = pytest.mark.limitation(
    "https://docs.pytorch.org/docs/stable/compile/programming_model.compiler_disable.html",
    raises="torch._dynamo.exc.Unsupported", match="skipfiles|skip function|marked as skipped")
# Spellings that only some torch versions have (the flag and the private SAC function: 2.2-2.4).
flag_missing = pytest.mark.skipif(f"not hasattr(torch._dynamo.config, {FLAG!r})",
                                  reason=f"missing: torch._dynamo.config.{FLAG} (torch 2.2-2.4)")
WITH_AND_WITHOUT_FLAG = pytest.mark.parametrize("experimental_flag", [
    pytest.param(False, id="default"), pytest.param(True, id="experimental_flag", marks=flag_missing)])
sac_missing = pytest.mark.skipif("not hasattr(torch.utils.checkpoint, 'create_selective_checkpoint_contexts')",
                                 reason="missing: torch.utils.checkpoint.create_selective_checkpoint_contexts")
private_sac_missing = pytest.mark.skipif(
    "not hasattr(torch.utils.checkpoint, '_pt2_selective_checkpoint_context_fn_gen')",
    reason="missing: torch.utils.checkpoint._pt2_selective_checkpoint_context_fn_gen (torch 2.2-2.4)")
te_missing = pytest.mark.skipif("__import__('importlib.util').util.find_spec('transformer_engine') is None",
                                reason="missing: transformer_engine is not installed")


def mm_sigmoid(x, w):
    return torch.sigmoid(x @ w)


def check_recomputes(case, fn, device, eager_matmuls=3):
    """case.check, then one more step eagerly and compiled: does backward run the matmuls eager's does
    (with a plain checkpoint: 1 recompute + 2 gradients)?"""
    def backward_matmuls(out):
        with OpLog() as log:
            out.sum().backward()
        return log.ops
    x, w = torch.randn(4, 8, device=device, requires_grad=True), torch.randn(8, 8, device=device, requires_grad=True)
    compiled = case.compile(fn)
    case.check(fn, x, w, compiled=compiled)
    eager, got = backward_matmuls(fn(x, w)), backward_matmuls(compiled(x, w))
    case.record(backward_matmuls={"eager": eager, "compiled": got})
    assert len(eager) == eager_matmuls, f"eager backward ran {eager}, expected {eager_matmuls} matmuls"
    assert sorted(got) == sorted(eager), f"backward matmuls: compiled {got}, eager {eager}" + (
        "; the checkpointed function was not recomputed" if len(got) < len(eager) else "")


# --- no context_fn --------------------------------------------------------------------------

@pytest.mark.parametrize("backend", [EAGER_NOT_RECOMPUTED, "aot_eager", "inductor"])
@pytest.mark.parametrize("fullgraph", [True], ids=["fullgraph"])
def test_plain_checkpoint(case, device, backend, fullgraph):
    check_recomputes(case, lambda x, w: checkpoint(mm_sigmoid, x, w, use_reentrant=False), device)


@pytest.mark.parametrize("backend", [EAGER_NOT_RECOMPUTED, "aot_eager", "inductor"])
def test_use_reentrant_true(case, device, backend, fullgraph):
    check_recomputes(case, lambda x, w: checkpoint(mm_sigmoid, x, w, use_reentrant=True), device)


@with_marks(EAGER_CHECKPOINT_OF_COMPILED)
@pytest.mark.parametrize("backend", ["eager", "aot_eager", "inductor"])
@pytest.mark.parametrize("fullgraph", [True], ids=["fullgraph"])
def test_eager_checkpoint_of_compiled_function(case, device, backend, fullgraph):
    # The checkpoint is eager, the checkpointed function compiled: the recompute calls it again.
    # (OpLog cannot watch this backward: a dispatch mode makes the compiled function run eagerly.)
    compiled_fn, runs = case.compile(mm_sigmoid), {"eager": 0, "compiled": 0}

    def counted(fn, key):
        def run(x, w):
            runs[key] += 1
            return fn(x, w)
        return lambda x, w: checkpoint(run, x, w, use_reentrant=False)

    x, w = torch.randn(4, 8, device=device, requires_grad=True), torch.randn(8, 8, device=device, requires_grad=True)
    case.check(counted(mm_sigmoid, "eager"), x, w, compiled=counted(compiled_fn, "compiled"))
    runs.update(eager=0, compiled=0)
    for key, fn in (("eager", mm_sigmoid), ("compiled", compiled_fn)):
        counted(fn, key)(x, w).sum().backward()
    case.record(function_runs_per_step=runs)
    assert runs["eager"] == 2, f"eager checkpoint ran the function {runs['eager']} times, expected 2"
    assert runs["compiled"] == runs["eager"], f"compiled function ran {runs['compiled']} times per step, " \
        f"eager {runs['eager']} (forward + recompute)"


# --- library wrappers -----------------------------------------------------------------------

def always_context_fn_checkpoint(fn, *args, context_fn=None):
    """Library wrapper (TE 1.5-1.7 style): always passes context_fn, defaulting to the no-op."""
    return checkpoint(fn, *args, use_reentrant=False, context_fn=context_fn or torch.utils.checkpoint.noop_context_fn)


@te_bug
@pytest.mark.parametrize("backend", [EAGER_NOT_RECOMPUTED, "aot_eager"])
def test_wrapper_always_passes_noop_context_fn(case, device, backend, fullgraph):
    """TE#890 on every torch, one message per version range: the evidence is at TE_BUG."""
    check_recomputes(case, lambda x, w: always_context_fn_checkpoint(mm_sigmoid, x, w), device)


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
@pytest.mark.parametrize("fullgraph", [pytest.param(False, id="graphbreaks"),
                                       pytest.param(True, id="fullgraph", marks=disabled_raises)])
def test_wrapper_disable_dynamo_fix(case, device, backend, fullgraph):
    # TE's fix (NVIDIA/TransformerEngine#894): the wrapper hidden from Dynamo; its checkpoint runs eagerly.
    wrapper = torch._disable_dynamo(always_context_fn_checkpoint)
    check_recomputes(case, lambda x, w: torch.cos(wrapper(mm_sigmoid, x, w)), device)
    assert case.metrics["graph_breaks"] >= 1, f"no graph break at the disabled wrapper: {case.metrics}"


@pytest.mark.parametrize("backend", [EAGER_NOT_RECOMPUTED, "aot_eager"])
@pytest.mark.parametrize("fullgraph", [True], ids=["fullgraph"])
def test_wrapper_passes_context_fn_only_when_given(case, device, backend, fullgraph):
    def wrapper(fn, *args, context_fn=None, **kwargs):
        if context_fn is not None:
            kwargs["context_fn"] = context_fn
        return checkpoint(fn, *args, use_reentrant=False, **kwargs)

    check_recomputes(case, lambda x, w: wrapper(mm_sigmoid, x, w), device)


# --- user context_fn: are its contexts active for the forward and for the recompute? ----------

def check_contexts_active(case, context_fn, seen, device):
    """Which of context_fn's two contexts ("forward", "recompute"; they add their names to `seen`)
    were active, at run time, in one forward and one backward: compiled (the first run, which
    traces, and a later one) as eagerly."""
    def fn(x, w):
        return checkpoint(mm_sigmoid, x, w, use_reentrant=False, context_fn=context_fn)
    x, w = torch.randn(4, 8, device=device, requires_grad=True), torch.randn(8, 8, device=device, requires_grad=True)
    compiled, contexts = case.compile(fn), {}
    case.check(fn, x, w, compiled=compiled)
    torch._dynamo.reset()  # the first compiled step below traces again
    for step, f in (("eager", fn), ("compiled_first_run", compiled), ("compiled", compiled)):
        seen.clear()
        out = f(x, w)
        forward = len(seen)
        out.sum().backward()
        contexts[step] = {"forward_pass": sorted(set(seen[:forward])), "backward_pass": sorted(set(seen[forward:]))}
    case.record(contexts=contexts)
    assert "forward" in contexts["eager"]["forward_pass"] and "recompute" in contexts["eager"]["backward_pass"], \
        contexts
    if case.backend != "eager":  # what the design promises: the forward context is entered while tracing
        assert "forward" in contexts["compiled_first_run"]["forward_pass"], f"contexts never entered: {contexts}"
    assert contexts["compiled"] == contexts["eager"], f"contexts active at run time: {contexts}"


@context_fn_gate
@context_fn_untraced
@WITH_AND_WITHOUT_FLAG
@pytest.mark.parametrize("backend", ["eager", pytest.param("aot_eager", marks=modes_enter_only_while_tracing),
                                     pytest.param("inductor", marks=modes_enter_only_while_tracing)])
def test_context_fn_dispatch_modes(case, device, backend, fullgraph, experimental_flag):
    seen = []
    def noting(name):  # a dispatch mode that adds `name` to `seen` for each op that runs while it is active
        class Noting(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                seen.append(name)
                return func(*args, **(kwargs or {}))
        return Noting()
    flag = {"_experimental_support_context_fn_in_torch_utils_checkpoint": True} if experimental_flag else {}
    with torch._dynamo.config.patch(flag):
        check_contexts_active(case, lambda: (noting("forward"), noting("recompute")), seen, device)


@context_fn_gate
@context_fn_untraced
@pytest.mark.parametrize("backend", ["eager", pytest.param("aot_eager", marks=modes_required)])
def test_context_fn_plain_context_managers(case, device, backend, fullgraph):
    seen = []

    @contextlib.contextmanager
    def entered(name):
        seen.append(name)
        yield

    check_contexts_active(case, lambda: (entered("forward"), entered("recompute")), seen, device)


# --- selective activation checkpointing: the policy decides what backward recomputes --------

@sac_missing
@pytest.mark.parametrize("policy", ["MUST_SAVE", "PREFER_RECOMPUTE"])
@pytest.mark.parametrize("fullgraph", [True], ids=["fullgraph"])
def test_sac_policy(case, device, backend, fullgraph, policy):
    policies = torch.utils.checkpoint.CheckpointPolicy

    def policy_fn(ctx, op, *args, **kwargs):
        return getattr(policies, policy) if op == torch.ops.aten.mm.default else policies.PREFER_RECOMPUTE

    context_fn = functools.partial(torch.utils.checkpoint.create_selective_checkpoint_contexts, policy_fn)
    # MUST_SAVE on mm: backward runs the 2 gradient matmuls only; PREFER_RECOMPUTE: 3.
    check_recomputes(case, lambda x, w: checkpoint(mm_sigmoid, x, w, use_reentrant=False, context_fn=context_fn),
                     device, eager_matmuls=2 if policy == "MUST_SAVE" else 3)


@context_fn_gate
@private_sac_missing  # the flag exists exactly where this spelling does
@pytest.mark.parametrize("experimental_flag", [pytest.param(False, id="default"),
                                               pytest.param(True, id="experimental_flag")])
@pytest.mark.parametrize("fullgraph", [True], ids=["fullgraph"])
def test_sac_private_context_fn_gen(case, device, backend, fullgraph, experimental_flag):
    def context_fn():  # the 2.2-2.4 spelling of SAC: save the mm (eager backward then runs 2 matmuls)
        return torch.utils.checkpoint._pt2_selective_checkpoint_context_fn_gen(
            lambda mode, op, *args, **kwargs: op == torch.ops.aten.mm.default)
    with torch._dynamo.config.patch(_experimental_support_context_fn_in_torch_utils_checkpoint=experimental_flag):
        check_recomputes(case, lambda x, w: checkpoint(mm_sigmoid, x, w, use_reentrant=False, context_fn=context_fn),
                         device, 2)


# --- the real TransformerEngine checkpoint --------------------------------------------------

@te_bug
@te_missing
@pytest.mark.parametrize("device", [pytest.param(
    "cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason=NO_GPU))])
@pytest.mark.parametrize("backend", ["aot_eager"])
@pytest.mark.parametrize("fullgraph", [pytest.param(False, id="graphbreaks"),
                                       pytest.param(True, id="fullgraph", marks=disabled_raises)])
def test_transformer_engine_checkpoint(case, device, backend, fullgraph):
    import transformer_engine.pytorch as te

    # TE < 1.5: checkpoint(function, distribute_saved_activations, get_rng_state_tracker, tp_group, *args)
    legacy = ((False, None, None) if "distribute_saved_activations" in inspect.signature(te.checkpoint).parameters
              else ())
    check_recomputes(case, lambda x, w: te.checkpoint(mm_sigmoid, *legacy, x, w, use_reentrant=False), device)


# --- property cases (harness/plugin/properties.py): programs drawn around checkpoint ------------------------

PINNED_CHECKPOINT = [CheckpointProgram(), CheckpointProgram(context_fn="noop")]


def check_checkpoint_program(case, program, device):
    """case.check, then one more step eagerly and compiled: backward runs the matmuls eager's does
    (recompute and gradients, SAC policies included)."""
    if program.context_fn.startswith("sac"):
        assume(hasattr(torch.utils.checkpoint, "create_selective_checkpoint_contexts"))  # 2.5+
    fn = program.function()
    x = torch.randn(*program.shape, device=device, requires_grad=True)
    w = torch.randn(8, 8, device=device, requires_grad=True)
    compiled = case.compile(fn)
    case.check(fn, x, w, compiled=compiled)

    def backward_matmuls(outputs):
        with OpLog() as log:
            sum(o.sum() for o in (outputs if isinstance(outputs, tuple) else (outputs,))).backward()
        return log.ops
    eager, got = backward_matmuls(fn(x, w)), backward_matmuls(compiled(x, w))
    case.record(backward_matmuls={"eager": eager, "compiled": got})
    gradients = 2 * (1 + program.ops.count("mm"))  # each matmul's two input gradients
    assert len(eager) >= gradients, f"eager backward ran {eager}, fewer than {gradients} gradient matmuls"
    # Where backward needs an activation of the body (any op but add1 follows a matmul) and eager's
    # checkpoint recomputed it, compiled code must recompute too; how much is the partitioner's choice.
    if any(op != "add1" for op in program.ops) and len(eager) > gradients:
        assert len(got) > gradients, f"backward matmuls: compiled {got}, eager {eager}; the checkpointed " \
            "function was not recomputed"


@pytest.mark.flaky(reruns=0)  # the table's examples are fixed: a second run tells nothing new
@te_bug
@pytest.mark.parametrize("backend", [EAGER_NOT_RECOMPUTED, "aot_eager", "inductor"])
def test_property_checkpoint(case, device, backend, fullgraph):
    # Checkpointed programs: body, use_reentrant, context_fn (none, TE's no-op, SAC policies),
    # nesting, the output reused after the checkpoint.
    explore(case, "checkpoint", checkpoint_programs(), lambda program: check_checkpoint_program(case, program, device),
            pinned=PINNED_CHECKPOINT)


# --- property cases over torch's own op database (cases/programs/op_programs.py) ---------------------

OP_CALLS = op_calls()  # this torch's op_db, read at collection: once per worker, before any case forks
# Each declaration below has a pinned example that meets it on every row, so that a cell declaring a
# bug runs into it (else a cell whose drawn examples missed it would say "fixed").
PINNED_CHECKPOINT_OP = [
    CheckpointOpProgram(OpCall("sin"), context_fn="noop"),  # NVIDIA/TransformerEngine#890
    # Found here (README, "Found here"): a random op checkpointed where nothing needs a gradient, an
    # inference graph, fails to compile with aot_eager and inductor from 2.13.
    CheckpointOpProgram(OpCall("rand_like", dtype="float64")),
    # Found here (README, "Found here"): dropout (p=0.5, training) checkpointed, backend="eager": the
    # recompute draws a fresh mask, so the gradient is not the forward's, from 2.12 (explore found it).
    CheckpointOpProgram(OpCall("nn.functional.dropout", sample=2, dtype="float64")),
]


@pytest.mark.flaky(reruns=0)  # the table's examples are fixed: a second run tells nothing new
@FULLGRAPH_REFUSES_GRAPH_BREAK
@te_bug
@pytest.mark.parametrize("backend", ["eager", "aot_eager", "inductor"])
def test_property_checkpoint_op(case, device, backend):
    # One op of torch's OpInfo database and one of its samples, checkpointed: use_reentrant,
    # preserve_rng_state, context_fn (none, TE's no-op, SAC policies), nesting; fullgraph, dynamic
    # shapes, passed numbers and a second sample drawn too.
    need_op_db()
    explore(case, "checkpoint_op", checkpoint_op_programs(OP_CALLS, device),
            lambda program: check_op_program(case, program, backend), about=about(),
            pinned=[dataclasses.replace(program, device=device) for program in PINNED_CHECKPOINT_OP])
