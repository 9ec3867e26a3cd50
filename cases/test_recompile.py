"""Recompiles on purpose: the same compiled code meets another ambient state, and compiles again.

One op of torch's OpInfo database (cases/programs/op_programs.py) is compiled once and called under
a drawn sequence of 2-3 ambient states (cases/programs/recompile.py): every global setter this torch
offers at each value it takes, surveyed from torch's own namespace (cases/programs/ambient.py: the
`torch.set_*`/`use_*`/`enable_*` switches with a getter, per-device ones such as autocast's dtype, the
`torch.backends` flags), entered as a state `SETTER=VALUE`; and autocast entered (bf16 or fp16) or
disabled, `no_grad`, `inference_mode`, a pass-through TorchFunctionMode or TorchDispatchMode entered,
its inputs cast to float64, without requires_grad (or on the CPU, from CUDA). Dynamo recompiles on its guards
with inductor's and AOTAutograd's caches warm in memory, warm on disk (a first pass compiles every
state; a second Python process, same cache directory, nothing in memory, runs the states again in
reverse, served from the on-disk caches: drawn for inductor, the one backend whose compiles are kept
on disk), or off.

The oracle, for every state of the sequence: what the recompiled function gives (outputs with their
dtypes, gradients, inputs after the call, aliasing, side effects; a first and a second call) is what
eager gives under that state, within the op's tolerances widened to the dtype the state may compute
in, and what the same program compiled afresh under that state alone gives (a reset Dynamo, the
caches off), within assert_close's own tolerances for the dtype. A random op is judged by the fresh
compile only (seeded alike). A failure names the state, the cache mode, the call and the oracle:
`after a recompile under <state> (cache memory): compiled against a fresh compile, first call: ...`.

One hand-written case beside it: SDPA's backend switches (`torch.backends.cuda.enable_*_sdp`, read on
the CPU too), changed after a compile. The kernel scaled_dot_product_attention runs is chosen from them,
and AOTAutograd traces that choice into the graph, so the compiled function must give what a fresh
compile under the changed switches gives (docs/findings.md, finding 10). And one where the changed
state is the input's size: a weighted covariance called with another number of observations, the
recompile Dynamo makes for it (automatic dynamic shapes: the size becomes symbolic) must still give
eager's numbers (finding 11). And one where the state is met inside the compiled function, not around it:
the function sets the default dtype, runs an op that reads it when it runs (an integer division, a
factory given no dtype, an integer tensor times a float), and restores it; each call must give eager's
dtype and numbers (finding 12). Beside it the same readers met around the function, called under float32,
float64, then float32: Dynamo guards the default dtype and recompiles, and inductor's caches must not serve
the float32 program (known upstream: pytorch/pytorch#109458 on 2.1, #184405 on 2.5-2.12). And forward-mode AD
met around it: a dual tensor passed in inside `torch.autograd.forward_ad.dual_level()`, afresh or after a plain
call compiled the function (outside the level or inside it); the output must carry eager's tangent (finding 13).
And a global forward hook (`register_module_forward_hook`) registered around the function: it must see what
eager shows it, and the output must be eager's (finding 14). What these cases call:
cases/programs/recompile_hand_written.py.

What each case records: the property's examples and every failing one's script
(`metrics.property`), the op, its class and its oracle; and what its examples drew
(`metrics.property.drawn`: how many times each state and each cache mode, the way the compiled code met
the changed state), beside how many states this torch offered (`states_offered`). The hand-written
cases record the same as `metrics.drawn`: the states they call the compiled code under, and how it met them.
"""

import contextlib
import dataclasses

import pytest
import torch
from torch._dynamo.utils import counters

from harness.plugin.casekit import max_abs_diff
from harness.plugin.properties import explore
from programs.op_programs import check_op_program
from programs.opcall import OpCall, op_calls
from programs.opinfo import about, need_op_db
from programs.recompile import RecompileOpProgram, caches_for, recompile_op_programs, state_names
from programs.recompile_hand_written import (
    DEFAULT_DTYPE_READERS,
    DUAL_FUNCTIONS,
    GLOBAL_FORWARD_HOOKS,
    OBSERVATION_COUNTS,
    symbolic_cause,
    under_default_dtype,
    weighted_cov,
    weighted_cov_inputs,
)
from shared_declarations import FULLGRAPH_REFUSES_GRAPH_BREAK

NO_GPU = "no CUDA device: torch.cuda.is_available() is False"
_no_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason=NO_GPU)

OP_CALLS = op_calls()  # this torch's op_db, read at collection: once per worker, before any case forks
PINNED_RECOMPILE_OP = [
    # replayed by `repro` where a cell records no failing example
    RecompileOpProgram(OpCall("sin"), states=("none", "autocast_bf16"), cache="memory"),
    # autocast's dtype changed around the same compiled matmul: the program for the first dtype must
    # not be served for the second (seen on the GPU as bf16 cells computing in fp16)
    RecompileOpProgram(OpCall("mm"), states=("autocast_bf16", "autocast_fp16"), cache="memory"),
    # grad mode and the default dtype, then back to the first state, served from the disk caches
    RecompileOpProgram(OpCall("sin"), states=("no_grad", "torch.set_default_dtype=torch.float64", "no_grad"),
                       cache="disk"),
]


# What the same compiled code gives after autocast's dtype changed around it: the first dtype's program.
# Autocast entered, or switched by its own setters (torch.set_autocast_cpu_enabled=True, ...).
STALE_AUTOCAST_DTYPE = (r"after a recompile under (torch\.autocast\([^)]*\)|torch\.set_autocast_\w+(\('\w+', \.\.\.\))?"
                        r"=\S+) \(cache \w+\): compiled against (eager|a fresh compile), \w+ call: "
                        r"The values for attribute 'dtype' do not match")
# Dynamo did not guard the ambient autocast state, so nothing recompiled (fixed by pull request
# pytorch/pytorch#143592): the graph traced under the first dtype runs under the second. From 2.2: torch
# 2.1's CPU autocast has no float16, so nothing here can show it there (a pass is not a fix).
autocast_not_guarded = pytest.mark.upstream_bug(
    "pytorch/pytorch#112260", raises="AssertionError", match=STALE_AUTOCAST_DTYPE, since="2.2", until="2.6")
# Dynamo recompiles, but AOTAutograd's cache key held whether autocast was on, not its dtype: inductor
# is served the first dtype's program (the pull request that adds the dtype to the key).
autocast_dtype_not_keyed = pytest.mark.upstream_bug(
    "pytorch/pytorch#181564", raises="AssertionError", match=STALE_AUTOCAST_DTYPE, since="2.7", until="2.12")


@pytest.mark.flaky(reruns=0)  # the table's examples are fixed: a second run tells nothing new
@FULLGRAPH_REFUSES_GRAPH_BREAK
@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=_no_cuda)])
@pytest.mark.parametrize("backend", ["eager", pytest.param("aot_eager", marks=autocast_not_guarded),
                                     pytest.param("inductor", marks=[autocast_not_guarded, autocast_dtype_not_keyed])])
def test_property_recompile_op(case, device, backend):
    # One op of torch's OpInfo database and one of its samples, compiled once and called under 2-3
    # ambient states in turn, the caches warm in memory, on disk or off; fullgraph, dynamic shapes,
    # side effects, passed numbers and a second sample drawn too.
    need_op_db()
    # What the examples drew, counted as each is checked; the record's property carries this dict (the
    # explore's `about`), filled in by the end of the run.
    drawn: dict = {"states": {}, "caches": {}}

    def check(program):
        for kind, names in (("states", program.states), ("caches", [program.cache])):
            for name in names:
                drawn[kind][name] = drawn[kind].get(name, 0) + 1
        check_op_program(case, program, backend)

    explore(case, "recompile_op", recompile_op_programs(OP_CALLS, device, backend), check,
            about={**about(), "states_offered": len(state_names(device)), "drawn": drawn},
            pinned=[dataclasses.replace(program, device=device) for program in PINNED_RECOMPILE_OP
                    if program.cache in caches_for(backend)])


# SDPA's backend switches (torch.backends.cuda.enable_*_sdp, read on the CPU too) pick the kernel
# scaled_dot_product_attention runs. Eagerly they are read at each call; AOTAutograd reads them when it
# traces and puts the chosen backend's own op into the graph, so a compiled function must recompile when
# they change, as it does for grad mode or the default dtype.
FUSED_SDPA_BACKENDS = ("flash", "mem_efficient", "cudnn")


def fused_sdpa_backends() -> list[str]:
    """The fused SDPA backends this torch has a switch for."""
    return [name for name in FUSED_SDPA_BACKENDS if hasattr(torch.backends.cuda, f"enable_{name}_sdp")]


@contextlib.contextmanager
def fused_sdpa_switched_off():
    """Every fused SDPA backend this torch has switched off, the math one left on; restored after."""
    cuda = torch.backends.cuda
    names = fused_sdpa_backends()
    before = {name: getattr(cuda, f"{name}_sdp_enabled")() for name in names}
    try:
        for name in names:
            getattr(cuda, f"enable_{name}_sdp")(False)
        yield
    finally:
        for name, enabled in before.items():
            getattr(cuda, f"enable_{name}_sdp")(enabled)


@contextlib.contextmanager
def compile_caches_off():
    """Inductor's FX graph cache and AOTAutograd's cache off, where this torch has them: a fresh compile
    must not be served what the first one compiled."""
    with contextlib.ExitStack() as stack:
        for config, flag in ((torch._inductor.config, "fx_graph_cache"),
                             (torch._functorch.config, "enable_autograd_cache")):
            if hasattr(config, flag):
                stack.enter_context(config.patch(**{flag: False}))
        yield


def attend(q, k, v):
    return torch.nn.functional.scaled_dot_product_attention(q, k, v)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=_no_cuda)])
@pytest.mark.parametrize("backend", ["eager", "aot_eager", "inductor"])
def test_sdpa_backends_switched_after_compile(case, device, backend):
    # Compiled with SDPA's backends at their defaults, then called with the fused ones switched off: what
    # it gives must be what the same function compiled afresh under the switch gives (the switch's own
    # effect, eagerly, checked first: the math backend's numbers differ from the default backend's).
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 3, 16, 8, device=device) for _ in range(3))
    default_eager = attend(q, k, v)
    compiled = case.compile(attend)
    counters.clear()  # Dynamo's own: a recompile for the switch would be a second graph
    first = compiled(q, k, v)
    with fused_sdpa_switched_off():
        switched_eager = attend(q, k, v)
        switched = compiled(q, k, v)
    graphs = counters["stats"]["unique_graphs"]
    if torch.equal(switched_eager, default_eager):
        pytest.skip(f"on this torch the fused SDPA backends give what the math one gives on {device}: "
                    "switching them off changes nothing to see")
    torch._dynamo.reset()
    with fused_sdpa_switched_off(), compile_caches_off():
        fresh = case.compile(attend)(q, k, v)
    switched_state = ",".join(f"torch.backends.cuda.enable_{name}_sdp=False" for name in fused_sdpa_backends())
    case.record(drawn={"states": {"none": 1, switched_state: 1}, "caches": {"memory": 1}},
                graphs=graphs, switch_changes_eager=max_abs_diff([default_eager], [switched_eager]),
                against_fresh=max_abs_diff([fresh], [switched]), as_first_compile=torch.equal(switched, first))
    torch.testing.assert_close(
        switched, fresh, rtol=0, atol=0,
        msg=lambda m: f"after the fused SDPA backends were switched off, the compiled function (Dynamo graphs "
                      f"for both calls: {graphs}) differs from a fresh compile under the switch: {m}")


@pytest.mark.parametrize("weights", ["fweights", "aweights", "both"])
@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=_no_cuda)])
@pytest.mark.parametrize("backend", ["eager", "aot_eager", "inductor"])
def test_weighted_cov_after_observation_count_changes(case, device, backend, weights):
    # One compiled function called with 4, then 5, then 6 observations: each call must give what eager
    # gives for its size (the weights' own effect checked first: weighted and unweighted differ).
    torch.manual_seed(0)
    samples = [weighted_cov_inputs(n, weights, device) for n in OBSERVATION_COUNTS]
    eager = [weighted_cov(x, **given) for x, given in samples]
    assert not torch.allclose(eager[0], torch.cov(samples[0][0])), "the weights change nothing: nothing to see"
    compiled = case.compile(weighted_cov)
    counters.clear()
    try:
        for (x, given), expected in zip(samples, eager, strict=True):
            try:
                got = compiled(x, **given)
            except Exception as error:  # the compile's own failure, named with the size that met it
                raise AssertionError(f"with {x.shape[1]} observations after {OBSERVATION_COUNTS[0]}, the compiled "
                                     f"torch.cov raised {type(error).__name__}: {symbolic_cause(error)}") from error
            torch.testing.assert_close(got, expected, msg=lambda m, n=x.shape[1]: f"with {n} observations: {m}")
    finally:  # what was met, as the property's cells say it; what Dynamo made of it (a graph break: cov eagerly)
        case.record(drawn={"states": {f"observations={n}": 1 for n in OBSERVATION_COUNTS}, "caches": {"memory": 1}},
                    graphs=counters["stats"]["unique_graphs"], graph_breaks=sum(counters["graph_break"].values()))


@pytest.mark.parametrize("reader", sorted(DEFAULT_DTYPE_READERS))
@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=_no_cuda)])
@pytest.mark.parametrize("backend", ["eager", "aot_eager", "inductor"])
def test_default_dtype_set_inside_compiled_function(case, device, backend, reader):
    # The state met another way than by a recompile: the compiled function itself sets the default dtype
    # to float64, runs an op that reads it, and restores it. Each of two calls must give what eager gives
    # (the switch's own effect checked first: the op's dtype under float64 is not its dtype without it).
    read = DEFAULT_DTYPE_READERS[reader]
    x = torch.arange(6, device=device).reshape(2, 3)
    fn = under_default_dtype(read, torch.float64)
    expected = fn(x)
    assert expected.dtype == torch.float64 != read(x).dtype, "the default dtype changes nothing here: nothing to see"
    compiled = case.compile(fn)
    counters.clear()
    try:
        for call in ("first", "second"):
            got = compiled(x)
            torch.testing.assert_close(got, expected, msg=lambda m, c=call: (
                f"with the default dtype set to torch.float64 inside the compiled function, {c} call: {m}"))
            assert torch.get_default_dtype() == torch.float32, "the function's own restore did not hold"
    finally:
        case.record(drawn={"states": {"torch.set_default_dtype=torch.float64": 1}, "caches": {"memory": 1},
                           "met": {"set inside the compiled function": 1}},
                    graphs=counters["stats"]["unique_graphs"], graph_breaks=sum(counters["graph_break"].values()))


# The same readers met around the compiled function: called under float32, float64, then float32 again.
# Dynamo guards the default dtype, so float64 recompiles; inductor's lowering fixes the result dtype in the
# kernel, so its caches must not serve the float32 program to that recompile.
STALE_DEFAULT_DTYPE = (r"with the default dtype torch\.float64 set around the compiled function, call \d: "
                       r"The values for attribute 'dtype' do not match")


def stale_default_dtype_marks(reader):
    # torch 2.1's Dynamo did not guard the default dtype: nothing recompiled (fixed in 2.2). From 2.5
    # inductor's FX graph cache key lacked it (from 2.7 AOTAutograd's cache, keyed on the same details,
    # serves it too): a factory's graph spells its dtype, so its key differed until then.
    return [pytest.mark.upstream_bug("pytorch/pytorch#109458", raises="AssertionError", match=STALE_DEFAULT_DTYPE,
                                     until="2.1"),
            pytest.mark.upstream_bug("pytorch/pytorch#184405", raises="AssertionError", match=STALE_DEFAULT_DTYPE,
                                     since="2.7" if reader == "factory_without_dtype" else "2.5", until="2.12")]


@pytest.mark.parametrize(("backend", "reader"), [
    pytest.param(backend, reader, marks=stale_default_dtype_marks(reader) if backend == "inductor" else ())
    for backend in ("eager", "aot_eager", "inductor") for reader in sorted(DEFAULT_DTYPE_READERS)])
@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=_no_cuda)])
def test_default_dtype_changed_around_compiled_function(case, device, backend, reader):
    # Each call under its default dtype must give what eager gives under it (the switch's own effect
    # checked first: the op's dtype under float64 is not its dtype under float32).
    read = DEFAULT_DTYPE_READERS[reader]
    x = torch.arange(6, device=device).reshape(2, 3)
    compiled = case.compile(read)
    dtypes = (torch.float32, torch.float64, torch.float32)
    counters.clear()
    try:
        for call, dtype in enumerate(dtypes, 1):
            torch.set_default_dtype(dtype)
            try:
                expected = read(x)
                assert expected.dtype == dtype, f"under {dtype} the op gives {expected.dtype}: nothing to see"
                got = compiled(x)
            finally:
                torch.set_default_dtype(torch.float32)
            torch.testing.assert_close(got, expected, msg=lambda m, c=call, d=dtype: (
                f"with the default dtype {d} set around the compiled function, call {c}: {m}"))
    finally:
        case.record(drawn={"states": {f"torch.set_default_dtype={d}": dtypes.count(d) for d in dtypes},
                           "caches": {"memory": 1}, "met": {"set around the compiled function": 1}},
                    graphs=counters["stats"]["unique_graphs"])


# Forward-mode AD met around the compiled function: called with a dual tensor inside
# torch.autograd.forward_ad.dual_level(), its output must carry eager's tangent. Met afresh (its first call
# is the dual one), or after a plain call compiled the function, outside the level or inside it.
DUAL_MET = ("afresh", "after_plain_call_outside_level", "after_plain_call_inside_level")
# Inductor's generated code computes the primal alone (where it calls an extern kernel with out=, a matmul,
# that kernel raises for the tangent instead); until 2.13 nothing stopped it (from 2.14 the pull request
# pytorch/pytorch#189644 graph-breaks on a tangent-carrying input, at trace time only). The failure's first
# line names the meeting only as afresh or after a plain call: one bug, whichever symptom, is one card.
DROPPED_TANGENT = r"under a dual level, (afresh|after a plain call): the compiled function dropped the tangent"
tangent_dropped = pytest.mark.upstream_bug("pytorch/pytorch#187284", raises="AssertionError", match=DROPPED_TANGENT,
                                           until="2.13")


@pytest.mark.parametrize("met", DUAL_MET)
@pytest.mark.parametrize("function", sorted(DUAL_FUNCTIONS))
@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=_no_cuda)])
@pytest.mark.parametrize("backend", ["eager", "aot_eager", pytest.param("inductor", marks=tangent_dropped)])
def test_dual_tensor_met_by_compiled_function(case, device, backend, function, met):
    # The state's own effect checked first: eagerly, the dual level gives the output a tangent.
    fwad = torch.autograd.forward_ad
    fn, x = DUAL_FUNCTIONS[function], torch.randn(4, 4, device=device)
    tangent = torch.randn(4, 4, device=device)
    with fwad.dual_level():
        expected = fwad.unpack_dual(fn(fwad.make_dual(x, tangent)))
    assert expected.tangent is not None, "eagerly the output carries no tangent: nothing to see"
    compiled = case.compile(fn)
    when = "afresh" if met == "afresh" else "after a plain call"
    symptom = None  # recorded: the failure's first line names the bug, not how it showed
    counters.clear()
    try:
        if met == "after_plain_call_outside_level":
            compiled(x)
        with fwad.dual_level():
            if met == "after_plain_call_inside_level":
                compiled(x)
            try:
                got = fwad.unpack_dual(compiled(fwad.make_dual(x, tangent)))
            except RuntimeError as error:
                symptom = f"the call raised RuntimeError: {str(error).strip().splitlines()[0]}"
                raise AssertionError(f"under a dual level, {when}: the compiled function dropped the tangent\n"
                                     f"{met}: {symptom}") from error
        symptom = None if got.tangent is not None else "the output carries no tangent"
        assert got.tangent is not None, (f"under a dual level, {when}: the compiled function dropped the tangent\n"
                                         f"{met}: {symptom}")
        for part in ("primal", "tangent"):
            torch.testing.assert_close(getattr(got, part), getattr(expected, part), msg=lambda m, p=part: (
                f"under a dual level, {when}: the {p} is not eager's\n{met}: {m}"))
    finally:
        plain_first = {"none": 1} if met != "afresh" else {}
        case.record(drawn={"states": {"torch.autograd.forward_ad.dual_level": 1, **plain_first},
                           "caches": {"memory": 1}, "met": {met.replace("_", " "): 1}},
                    graphs=counters["stats"]["unique_graphs"], graph_breaks=sum(counters["graph_break"].values()),
                    symptom=symptom)


# A global forward hook around the compiled function, registered before it compiles, as a debugging session
# does: it must see what eager shows it (the module the function calls, with that module's output), and the
# function must give eager's output. A failure's first line says what the hook met (a module or an output
# eager never gives it, the module more or fewer times, or only another output); the hook and how it showed
# follow, and are recorded (`metrics.symptom`).
@pytest.mark.parametrize("hook", sorted(GLOBAL_FORWARD_HOOKS))
@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=_no_cuda)])
@pytest.mark.parametrize("backend", ["eager", "aot_eager", "inductor"])
def test_global_forward_hook_around_compiled_function(case, device, backend, hook):
    torch.manual_seed(0)
    layer, x = torch.nn.Linear(4, 4).to(device), torch.randn(2, 4, device=device)

    def fn(x):
        return layer(x) + 1
    plain, seen, symptom, met = fn(x), [], None, None
    handle = torch.nn.modules.module.register_module_forward_hook(GLOBAL_FORWARD_HOOKS[hook](seen))
    try:
        expected, eager_seen = fn(x), list(seen)  # the hook's own effect, eagerly
        assert hook != "returns_a_new_output" or not torch.equal(expected, plain), "the hook changes nothing"
        assert eager_seen == (["Linear"] if hook == "records_the_module" else []), f"eagerly it saw {eager_seen}"
        compiled = case.compile(fn)
        for call in ("first", "second"):
            seen.clear()
            try:
                got = compiled(x)
            except Exception as error:  # raised in the hook or past it
                met = "the hook met a module or an output eager never gives it"
                symptom = f"{call} call raised {type(error).__name__}: {(str(error).strip().splitlines() or [''])[0]}"
            else:
                if set(seen) - set(eager_seen) or len(seen) != len(eager_seen):
                    met = ("the hook met a module or an output eager never gives it" if set(seen) - set(eager_seen)
                           else "the hook ran another number of times than eagerly")
                    symptom = f"{call} call: the hook was called on {seen}, eagerly on {eager_seen}"
                elif not torch.allclose(got, expected):
                    met = "the output is not eager's"
                    symptom = f"{call} call: at most {max_abs_diff([got], [expected])} off"
            assert symptom is None, f"with a global forward hook around the compiled function, {met}\n{hook}: {symptom}"
    finally:
        handle.remove()
        case.record(drawn={"states": {"torch.nn.modules.module.register_module_forward_hook": 1},
                           "caches": {"memory": 1}, "met": {"set around the compiled function": 1}}, symptom=symptom)

