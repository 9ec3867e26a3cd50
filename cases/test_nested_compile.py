"""Nested compile: a `torch.compile`d function or module called from compiled code.

Covers (docs/upstream.md, section 3): inlining of an inner compiled function or submodule into the
outer frame, graph breaks inside the inner function (resumed frames are compiled),
`torch.compiler.disable(fn, recursive=True|False)` on the inner function, a `fullgraph=True`
outer over an inner graph break, an inner compile whose backend or mode differs from the
outer's (pytorch/pytorch#156308, #118758: the inner wrapper's backend, mode and options are
ignored when inlined), `torch.compiler.nested_compile_region` (2.8+), the
`nested_graph_breaks` config (2.9+) and the recompile limit (`cache_size_limit`, renamed
`recompile_limit` in 2.7) reached inside a nested call.

Docs: pytorch docs compile/programming_model (nested_graph_breaks, compiler_disable,
recompilation) and the torch_compile_tutorial section "torch.compile and Nested Calls".

What each case records beyond the harness metrics: `outer_backend_graphs` /
`inner_backend_graphs` (graphs that reached the outer's / the inner wrapper's backend), the
ops those graphs hold where the case is about what was captured, the inductor options each
inductor compilation really got (`inductor_options_*`), the `invoke_subgraph` calls and subgraphs
a `nested_compile_region` became, and the exception a documented failure raises.

Recorded upstream bugs (declared on the cases): `nested_compile_region` with inductor gives a wrong
input gradient for `b(b(x)) + x` (forward right) until 2.15: subgraph inputs inherited donated-buffer
indices, pytorch/pytorch#193960 (PR, first released in 2.15.0); with
`torch._functorch.config.donated_buffer = False` the gradient is right (a case shows it, inductor's
caches off). `nested_compile_region` with backend "eager": `AssertionError: fake_mode should be
enabled for HOPs`, pytorch/pytorch#178520 (fixed by PR #184700, in 2.14.0).
"""

import copy
import dataclasses
import unittest.mock

import pytest
import torch

from harness.plugin.casekit import GraphRecorder, need
from harness.plugin.properties import explore
from programs.nested_compile import (
    NestedOpProgram,
    NestedProgram,
    check_compiled_fn_program,
    check_region_program,
    nested_op_programs,
    nested_programs,
)
from programs.op_programs import check_op_program
from programs.opcall import OpCall, op_calls
from programs.opinfo import about, need_op_db
from shared_declarations import FULLGRAPH_REFUSES_GRAPH_BREAK

# invoke_subgraph's backward, run by eager autograd, looks for a fake mode that only tracing has:
# torch 2.8.0 reads `fake_mode.shape_env` of None (torch/_higher_order_ops/invoke_subgraph.py,
# InvokeSubgraphAutogradOp.backward: `state = _CacheKeyState(fake_mode.shape_env)`); 2.9 asserts
# it first. One bug, one message per range.
REGION_EAGER_FAKE_MODE = (
    pytest.mark.upstream_bug("pytorch/pytorch#178520", raises="AttributeError",
                             match="'NoneType' object has no attribute 'shape_env'", since="2.8", until="2.8"),
    pytest.mark.upstream_bug("pytorch/pytorch#178520", raises="AssertionError",
                             match="fake_mode should be enabled for HOPs", since="2.9"),
)
REGION_DONATED_GRADIENT = pytest.mark.upstream_bug("pytorch/pytorch#193960", raises="AssertionError",
                                                   match="gradient 0: Tensor-likes are not close")


# --- helpers ---------------------------------------------------------------------------

def inner_fn(x):
    return torch.sin(x) * 2 + 1


def outer_fn_of(inner):
    def outer_fn(x):
        return torch.cos(inner(x)) - x
    return outer_fn


class Child(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)

    def forward(self, x):
        return torch.relu(self.lin(x))


class Parent(torch.nn.Module):
    """A parent whose child may be a compiled module (an `OptimizedModule`)."""

    def __init__(self, child):
        super().__init__()
        self.child = child
        self.head = torch.nn.Linear(8, 4)

    def forward(self, x):
        return self.head(self.child(x) + x)



def x_on(device, requires_grad=True):
    return torch.randn(4, 8, device=device, requires_grad=requires_grad)


def counting_eager():
    """A backend that counts graphs and runs them as they are (CompileCounter: all versions)."""
    from torch._dynamo.testing import CompileCounter

    return CompileCounter()


# --- cases -----------------------------------------------------------------------------

def test_compiled_fn_calls_compiled_fn(case, device, backend, fullgraph):
    # The inner compiled function is called from the outer compiled one; whether its
    # wrapper compiles anything (or is inlined into the outer frame) is recorded.
    outer_backend, inner_backend = GraphRecorder(backend), GraphRecorder(backend)
    inner_c = torch.compile(inner_fn, backend=inner_backend)
    outer_c = torch.compile(outer_fn_of(inner_c), backend=outer_backend, fullgraph=fullgraph)
    case.check(outer_fn_of(inner_fn), x_on(device), compiled=outer_c)
    case.record(outer_backend_graphs=len(outer_backend.graphs), inner_backend_graphs=len(inner_backend.graphs),
                inner_inlined=len(inner_backend.graphs) == 0)
    # Something was compiled, and the inner's sin ran in a compiled graph (outer's or inner's).
    assert len(outer_backend.graphs) + len(inner_backend.graphs) >= 1
    assert "sin" in outer_backend.ops() + inner_backend.ops()


def test_compiled_submodule_in_compiled_parent(case, device, backend, fullgraph):
    inner_backend = GraphRecorder(backend)
    eager_parent = Parent(Child()).to(device)
    # Same weights; only the child is wrapped in its own torch.compile.
    compiled_parent = copy.deepcopy(eager_parent)
    compiled_parent.child = torch.compile(compiled_parent.child, backend=inner_backend)
    outer_backend = GraphRecorder(backend)
    outer_c = torch.compile(compiled_parent, backend=outer_backend, fullgraph=fullgraph)
    case.check(eager_parent, x_on(device), compiled=outer_c)
    ops = sorted(set(outer_backend.ops()) | set(inner_backend.ops()))
    case.record(outer_backend_graphs=len(outer_backend.graphs), inner_backend_graphs=len(inner_backend.graphs),
                inner_inlined=len(inner_backend.graphs) == 0, captured_ops=ops)
    # The child's relu ran in a compiled graph, whichever wrapper compiled it.
    assert "relu" in ops, f"captured ops {ops}"


def _inner_with_break(kind):
    def inner_breaking(x):
        y = torch.sin(x)
        if kind == "graph_break":
            torch._dynamo.graph_break()
        else:
            print("inner_breaking: a print is a graph break")
        return torch.cos(y) + 1
    return inner_breaking


@pytest.mark.parametrize("fullgraph", [False], ids=["graphbreaks"])
@pytest.mark.parametrize("nested_graph_breaks", ["default", "on"])
@pytest.mark.parametrize("breaker", ["graph_break", "print"])
def test_inner_graph_break(case, device, backend, fullgraph, breaker, nested_graph_breaks):
    # The inner compiled function graph-breaks: the resumed frames are compiled. With `nested_graph_breaks`
    # (2.9+) Dynamo resumes inside the nested frame instead of running the whole inner call eagerly.
    if nested_graph_breaks == "on":
        need("torch._dynamo.config.nested_graph_breaks")
    patches = {"nested_graph_breaks": True} if nested_graph_breaks == "on" else {}
    inner = _inner_with_break(breaker)
    outer_backend, inner_backend = GraphRecorder(backend), GraphRecorder(backend)
    inner_c = torch.compile(inner, backend=inner_backend)
    outer_c = torch.compile(outer_fn_of(inner_c), backend=outer_backend, fullgraph=False)
    with torch._dynamo.config.patch(**patches):
        case.check(outer_fn_of(inner), x_on(device), compiled=outer_c)
    total = len(outer_backend.graphs) + len(inner_backend.graphs)
    captured = set(outer_backend.ops()) | set(inner_backend.ops())
    case.record(outer_backend_graphs=len(outer_backend.graphs), inner_backend_graphs=len(inner_backend.graphs),
                backend_graphs=total, captured_ops=sorted(captured))
    # At least two graphs, whichever wrapper got them (graph_break counter: 0 with nested_graph_breaks on in 2.9).
    assert total >= 2, f"{total} graph(s) for code with a graph break in the middle"
    assert {"sin", "cos"} <= captured, f"captured ops {sorted(captured)}"


def _disabled_inner(recursive, calls):
    def deeper(y):
        return torch.erf(y) + 1

    def inner(x):
        calls.append(1)
        return deeper(torch.sinh(x))

    return inner, need("torch.compiler.disable")(inner, recursive=recursive)


@pytest.mark.parametrize("fullgraph", [False], ids=["graphbreaks"])
@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
@pytest.mark.parametrize("recursive", [True, False], ids=["recursive", "nonrecursive"])
def test_inner_compiler_disable(case, device, backend, fullgraph, recursive):
    # The disabled function's own frame runs eagerly (sinh never reaches a graph); with
    # recursive=False the functions it calls are still compiled (erf reaches a graph), with
    # recursive=True they run eagerly too.
    calls = []
    inner, inner_disabled = _disabled_inner(recursive, calls)
    recorder = GraphRecorder(backend)
    outer_c = torch.compile(outer_fn_of(inner_disabled), backend=recorder, fullgraph=False)
    case.check(outer_fn_of(inner), x_on(device), compiled=outer_c)
    ops = recorder.ops()
    case.record(backend_graphs=len(recorder.graphs), captured_ops=ops, inner_calls=len(calls))
    assert len(calls) == 3, f"inner ran {len(calls)} times for 1 eager + 2 compiled runs"
    assert "sinh" not in ops, f"the disabled frame was traced: {ops}"
    if recursive:
        assert "erf" not in ops, f"recursive=True, yet a callee of the disabled function was traced: {ops}"
    else:
        assert "erf" in ops, f"recursive=False, yet the callee of the disabled function was not compiled: {ops}"


@pytest.mark.parametrize("fullgraph", [True], ids=["fullgraph"])
@pytest.mark.parametrize("breaker", ["graph_break", "print"])
def test_fullgraph_outer_over_inner_graph_break(case, device, backend, fullgraph, breaker):
    # Documented (programming model, fullgraph=True): any graph break, nested ones included, is
    # an error. The figure: what calling the fullgraph outer raised.
    from torch._dynamo.exc import Unsupported

    inner = _inner_with_break(breaker)
    outer_full = torch.compile(outer_fn_of(torch.compile(inner, backend=backend)), backend=backend,
                               fullgraph=True)
    raised = None
    try:
        outer_full(x_on(device))
    except Exception as exc:  # the figure is which exception, if any
        raised = exc
    case.record(fullgraph_raises=type(raised).__name__ if raised else None,
                fullgraph_message=str(raised).strip().splitlines()[0][:200] if raised else None)
    assert isinstance(raised, Unsupported), f"fullgraph=True over an inner graph break raised {raised!r}"
    # The same nesting without fullgraph still matches eager.
    torch._dynamo.reset()
    outer_c = torch.compile(outer_fn_of(torch.compile(inner, backend=backend)), backend=backend)
    case.check(outer_fn_of(inner), x_on(device), compiled=outer_c)


@pytest.mark.parametrize("fullgraph", [False, True], ids=["graphbreaks", "fullgraph"])
def test_inner_different_backend(case, device, backend, fullgraph):
    # Inner wrapper: a counting backend that runs graphs eagerly; outer: the case's backend by
    # name. Whether any graph reaches the inner backend is the finding (the public record says
    # none: the inner is inlined and its backend ignored); outputs must match either way.
    inner_counter = counting_eager()
    inner_c = torch.compile(inner_fn, backend=inner_counter)
    outer_c = torch.compile(outer_fn_of(inner_c), backend=backend, fullgraph=fullgraph)
    case.check(outer_fn_of(inner_fn), x_on(device), compiled=outer_c)
    nested_count = inner_counter.frame_count
    # The counting backend does count when the inner is called on its own, so a zero
    # above means "not used", not "not counting".
    torch._dynamo.reset()
    inner_c(x_on(device))
    case.record(inner_backend_graphs=nested_count, inner_backend_graphs_standalone=inner_counter.frame_count
                - nested_count, inner_backend_ignored=nested_count == 0)
    assert inner_counter.frame_count > nested_count, "the counting backend never compiled the inner alone"


def inductor_options(run) -> list:
    """The option sets (`config_patches`) inductor's compile_fx got while `run()` ran."""
    import torch._inductor.compile_fx as compile_fx_module

    with unittest.mock.patch.object(compile_fx_module, "compile_fx", wraps=compile_fx_module.compile_fx) as spy:
        run()
    return sorted({repr(sorted((call.kwargs.get("config_patches") or {}).items())) for call in spy.call_args_list})


@pytest.mark.parametrize("fullgraph", [False], ids=["graphbreaks"])
@pytest.mark.parametrize("backend", ["inductor"])
@pytest.mark.parametrize("inner_mode", ["reduce-overhead", "max-autotune-no-cudagraphs"])
def test_inner_different_mode(case, device, backend, fullgraph, inner_mode):
    # The inner wrapper asks for another inductor mode than the outer; inlined, the outer's
    # mode wins (pytorch/pytorch#118758). Figures: the inductor option sets compile_fx got, nested
    # and for the inner alone. Elementwise ops only: nothing to autotune.
    inner_c = torch.compile(inner_fn, backend="inductor", mode=inner_mode)
    outer_c = torch.compile(outer_fn_of(inner_c), backend="inductor")
    nested = inductor_options(lambda: case.check(outer_fn_of(inner_fn), x_on(device), compiled=outer_c))
    torch._dynamo.reset()
    alone = inductor_options(lambda: inner_c(x_on(device)))
    inner_options = [options for options in alone if options != "[]"]
    case.record(inner_mode=inner_mode, inductor_options_nested=nested, inductor_options_inner_alone=alone,
                inner_options_used_nested=bool(set(inner_options) & set(nested)))
    assert case.metrics["graphs"] >= 1
    # The spy sees options: the inner alone compiles with its mode's options.
    assert inner_options, f"inner compiled alone with mode={inner_mode} got inductor options {alone}"


def region_block(x):
    return torch.sin(x) * 2 + 1


def region_outer_of(block):
    return lambda x: block(block(x)) + x


def check_region(case, device, backend, fullgraph):
    """The region called twice, compiled (inductor's caches off) against eager: one subgraph, two calls."""
    import torch._functorch.config
    import torch._inductor.config

    region = need("torch.compiler.nested_compile_region")
    recorder = GraphRecorder(backend)
    compiled = torch.compile(region_outer_of(region(region_block)), backend=recorder, fullgraph=fullgraph)
    try:
        with torch._inductor.config.patch(force_disable_caches=True):
            case.record(caches_disabled=torch._inductor.config.force_disable_caches,
                        donated_buffer=torch._functorch.config.donated_buffer)
            case.check(region_outer_of(region_block), x_on(device), compiled=compiled)
    finally:
        calls = [n for gm in recorder.graphs for n in gm.graph.nodes
                 if n.op == "call_function" and "invoke_subgraph" in str(n.target)]
        subgraphs = sorted({str(n.args[0].target) for n in calls})
        case.record(backend_graphs=len(recorder.graphs), region_calls=len(calls), region_subgraphs=subgraphs)
    assert (len(calls), len(subgraphs)) == (2, 1), f"region called {len(calls)} times, subgraphs {subgraphs}"


@pytest.mark.parametrize("backend", [pytest.param("eager", marks=REGION_EAGER_FAKE_MODE), "aot_eager",
                                     pytest.param("inductor", marks=REGION_DONATED_GRADIENT)])
def test_nested_compile_region(case, device, backend, fullgraph):
    # A region marked with nested_compile_region (2.8+) called twice from the compiled outer.
    check_region(case, device, backend, fullgraph)


@pytest.mark.parametrize("backend", ["inductor"])
def test_nested_compile_region_without_donated_buffers(case, device, backend, fullgraph):
    # The same with AOTAutograd's donated buffers off: the mechanism of pytorch/pytorch#193960.
    need("torch._functorch.config.donated_buffer")
    with torch._functorch.config.patch(donated_buffer=False):
        check_region(case, device, backend, fullgraph)


@pytest.mark.parametrize("fullgraph", [False], ids=["graphbreaks"])
@pytest.mark.parametrize("backend", ["eager"])
def test_recompile_limit_in_nested_call(case, device, backend, fullgraph):
    # Each python int k is a constant of the compiled code (dynamic=False), so each new k
    # recompiles the nested call. With the limit at 2, later k run eagerly: results must still
    # match eager, and fewer graphs than distinct k get compiled.
    import torch._dynamo.config as dynamo_config

    limit_name = "recompile_limit" if hasattr(dynamo_config, "recompile_limit") else "cache_size_limit"
    ks = range(6)

    def inner(x, k):
        return torch.sin(x) * k + k

    def outer_of(inner_call):
        def outer(x, k):
            return torch.cos(inner_call(x, k)) - x
        return outer

    def over_ks(outer):
        def run(x):
            return torch.stack([outer(x, k) for k in ks])
        return run

    recorder = GraphRecorder(backend)
    inner_c = torch.compile(inner, backend=recorder, dynamic=False)
    outer_c = torch.compile(outer_of(inner_c), backend=recorder, dynamic=False)
    with unittest.mock.patch.object(dynamo_config, limit_name, 2):
        case.check(over_ks(outer_of(inner)), x_on(device), compiled=over_ks(outer_c))
    case.record(limit_config=limit_name, limit=2, distinct_k=len(ks), backend_graphs=len(recorder.graphs))
    assert len(recorder.graphs) < len(ks), f"{len(recorder.graphs)} graphs for {len(ks)} values of k"


# --- property cases (harness/plugin/properties.py): programs drawn around nested compile ---------------------

# The hand-written case's program, always in the table.
PINNED_NESTED = [NestedProgram(body=("sin", "mul2", "add1"), calls=2, flow="chain", tail="plus_input")]
# Found by this property on 2.15 (inductor): `r0 = b(x); return r0 * b(r0 * x)` with b = sin gives a
# wrong x gradient, with donated_buffer=False too (not #193960); no upstream report found (2026-11).
PINNED_REGION = PINNED_NESTED + [NestedProgram(body=("sin",), calls=2, flow="reuse", tail="none", shape=(8,))]


# A wrong gradient that donated_buffer=False rights (the mechanism of #193960).
REGION_WRONG_GRADIENT = pytest.mark.upstream_bug(
    "pytorch/pytorch#193960", raises="AssertionError",
    match=r"^\[donated_buffer=False: right\] gradient \d+: Tensor-likes are not close")


@pytest.mark.flaky(reruns=0)  # the table's examples are fixed: a second run tells nothing new
@pytest.mark.parametrize("backend", [pytest.param("eager", marks=REGION_EAGER_FAKE_MODE), "aot_eager",
                                     pytest.param("inductor", marks=REGION_WRONG_GRADIENT)])
def test_property_nested_compile_region(case, device, backend, fullgraph):
    # Programs that call a nested_compile_region (2.8+) 1-3 times, its outputs flowing on.
    need("torch.compiler.nested_compile_region")
    explore(case, "nested_compile_region", nested_programs,
            lambda program: check_region_program(case, program, device, backend), pinned=PINNED_REGION)


@pytest.mark.flaky(reruns=0)  # the table's examples are fixed: a second run tells nothing new
def test_property_nested_compiled_fn(case, device, backend, fullgraph):
    # The same programs, block a torch.compile'd function called from the compiled outer (inlined).
    explore(case, "nested_compiled_fn", nested_programs,
            lambda program: check_compiled_fn_program(case, program, device, backend), pinned=PINNED_NESTED)


# --- property cases over torch's own op database (cases/programs/op_programs.py) ---------------------

OP_CALLS = op_calls()  # this torch's op_db, read at collection: once per worker, before any case forks
PINNED_NESTED_OP = [
    NestedOpProgram(OpCall("sin"), wrap="compiled"),  # replayed by `repro` where a cell records no failing example
    # Found here (README, "Found here"): a region returning a conjugate view (ihfft), called twice;
    # a region around a factory (no tensor input), called twice, under inductor; inductor's
    # avg_pool2d backward with a 1-element padding tuple.
    NestedOpProgram(OpCall("fft.ihfft"), wrap="region", calls=2),
    NestedOpProgram(OpCall("ones", sample=1), wrap="region", calls=2),
    NestedOpProgram(OpCall("nn.functional.avg_pool2d"), wrap="compiled"),
]


@pytest.mark.flaky(reruns=0)  # the table's examples are fixed: a second run tells nothing new
@FULLGRAPH_REFUSES_GRAPH_BREAK
@pytest.mark.parametrize("backend", ["eager", "aot_eager", "inductor"])
def test_property_nested_compile_op(case, device, backend):
    # One op of torch's OpInfo database and one of its samples, in a function compiled code calls:
    # a nested_compile_region, its own torch.compile (another backend), torch.compiler.disable, a
    # graph break; called once or twice; fullgraph, dynamic shapes, side effects, passed numbers and
    # a second sample drawn too.
    need_op_db()
    explore(case, "nested_compile_op", nested_op_programs(OP_CALLS, device),
            lambda program: check_op_program(case, program, backend), about=about(),
            pinned=[dataclasses.replace(program, device=device) for program in PINNED_NESTED_OP])
