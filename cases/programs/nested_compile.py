"""Programs drawn around nested compile (a nested_compile_region, or an inner torch.compile,
called from compiled code) for the family's property cases, and how each is checked against eager."""

import dataclasses

import torch
from hypothesis import strategies as st

from harness.plugin.casekit import Case, GraphRecorder, need
from programs.op_programs import OpProgram, common_knobs

# What the region's body may do to `y` (w: an 8x8 weight, an input of the program too).
BODY_OPS = {"sin": "torch.sin(y)", "tanh": "torch.tanh(y)", "sigmoid": "torch.sigmoid(y)", "relu": "torch.relu(y)",
            "mul2": "y * 2", "add1": "y + 1", "square": "y * y", "mm": "y @ w", "softmax": "torch.softmax(y, -1)"}
CAPTURED_NAME = {"sin": "sin", "tanh": "tanh", "sigmoid": "sigmoid", "relu": "relu", "mm": "matmul",
                 "softmax": "softmax"}
FLOWS = ("chain", "fan", "reuse")  # b(b(x)); b(x) + b(2x); b(x) * b(b(x) * x)
TAILS = ("none", "plus_input", "times_first", "tuple")
SHAPES = ((4, 8), (8,), (2, 3, 8))


@dataclasses.dataclass(frozen=True)
class NestedProgram:
    """`block(x, w)` (its body: ops on y), called `calls` times by `outer(x, w)` as `flow` says; `tail`:
    what outer does with the results; `outputs`: block returns (y,) or (y, its first intermediate)."""
    body: tuple = ("sin", "mul2")
    outputs: int = 1
    calls: int = 2
    flow: str = "chain"
    tail: str = "plus_input"
    shape: tuple = (4, 8)
    dtype: str = "float32"

    @property
    def source(self) -> str:
        lines = ["def block(x, w):", "    y = x"]
        for i, op in enumerate(self.body):
            lines.append(f"    y = {BODY_OPS[op]}")
            if i == 0:
                lines.append("    first = y")
        lines.append("    return y, first" if self.outputs == 2 else "    return y")
        get = "[0]" if self.outputs == 2 else ""
        lines.append("def outer(x, w):")
        if self.flow == "chain":
            calls = [f"    r0 = block(x, w){get}"] + [f"    r{i} = block(r{i - 1}, w){get}"
                                                      for i in range(1, self.calls)]
        elif self.flow == "fan":
            calls = [f"    r0 = block(x, w){get}"] + [f"    r{i} = r{i - 1} + block(x * {i + 1}, w){get}"
                                                      for i in range(1, self.calls)]
        else:  # reuse: each later call takes the previous result times the input
            calls = [f"    r0 = block(x, w){get}"] + [f"    r{i} = r0 * block(r{i - 1} * x, w){get}"
                                                      for i in range(1, self.calls)]
        last = f"r{self.calls - 1}"
        tail = {"none": last, "plus_input": f"{last} + x", "times_first": f"{last} * r0", "tuple": f"{last}, r0"}
        return "\n".join(lines + calls + [f"    return {tail[self.tail]}"])

    def functions(self, wrap=None):
        """(outer, block) of the program; `wrap` wraps block where outer calls it."""
        namespace = {"torch": torch}
        exec(compile(self.source, "<nested program>", "exec"), namespace)
        if wrap is not None:
            namespace["block"] = wrap(namespace["block"])
        return namespace["outer"], namespace["block"]

    def inputs(self, device):
        dtype = getattr(torch, self.dtype)
        return (torch.randn(*self.shape, device=device, dtype=dtype, requires_grad=True),
                torch.randn(8, 8, device=device, dtype=dtype, requires_grad=True) / 3)


nested_programs = st.builds(
    NestedProgram, body=st.lists(st.sampled_from(sorted(BODY_OPS)), min_size=1, max_size=3).map(tuple),
    outputs=st.sampled_from((1, 2)), calls=st.integers(1, 3), flow=st.sampled_from(FLOWS),
    tail=st.sampled_from(TAILS), shape=st.sampled_from(SHAPES), dtype=st.sampled_from(("float32", "float64")))


def check_region_program(case, program, device, backend):
    """The program with block as a nested_compile_region, compiled, against eager: outputs and
    gradients, and the region became one subgraph invoked once per call."""
    region = need("torch.compiler.nested_compile_region")
    recorder = GraphRecorder(backend)
    compiled = torch.compile(program.functions(wrap=region)[0], backend=recorder, fullgraph=case.fullgraph)
    inputs = program.inputs(device)
    try:
        case.check(program.functions()[0], *inputs, compiled=compiled)
    except AssertionError as exc:
        if backend != "inductor" or "gradient" not in str(exc):
            raise
        raise AssertionError(f"[donated_buffer=False: {donation_ab(case, program, inputs, region)}] {exc}") from exc
    calls = [n for gm in recorder.graphs for n in gm.graph.nodes
             if n.op == "call_function" and "invoke_subgraph" in str(n.target)]
    subgraphs = sorted({str(n.args[0].target) for n in calls})
    # A region called once is inlined where Dynamo's config says so (pytorch/pytorch PR #180674).
    inlined = program.calls == 1 and getattr(torch._dynamo.config, "inline_single_use_invoke_subgraph", False)
    case.record(region_calls=len(calls), region_subgraphs=subgraphs, single_use_inlined=inlined)
    expected = (0, 0) if inlined else (program.calls, 1)
    assert (len(calls), len(subgraphs)) == expected, \
        f"region called {len(calls)} times in the graphs for {program.calls} calls, subgraphs {subgraphs}"


def donation_ab(case, program, inputs, region) -> str:
    """A wrong gradient again with AOTAutograd's donated buffers off (inductor's caches off, so that
    the A/B compiles afresh): "right" points at pytorch/pytorch#193960, "wrong too" at something else."""
    import torch._functorch.config
    import torch._inductor.config

    if not hasattr(torch._functorch.config, "donated_buffer"):
        return "not available"
    torch._dynamo.reset()
    compiled = torch.compile(program.functions(wrap=region)[0], backend="inductor", fullgraph=case.fullgraph)
    with torch._functorch.config.patch(donated_buffer=False), torch._inductor.config.patch(force_disable_caches=True):
        try:
            Case("inductor", case.fullgraph).check(program.functions()[0], *inputs, compiled=compiled, runs=1)
        except AssertionError:
            return "wrong too"
    return "right"


def check_compiled_fn_program(case, program, device, backend):
    """The program with block wrapped in its own torch.compile, called from the compiled outer:
    outputs and gradients match eager, and the body's ops ran in a compiled graph (outer's or inner's)."""
    outer_backend, inner_backend = GraphRecorder(backend), GraphRecorder(backend)
    compiled = torch.compile(program.functions(wrap=lambda fn: torch.compile(fn, backend=inner_backend))[0],
                             backend=outer_backend, fullgraph=case.fullgraph)
    case.check(program.functions()[0], *program.inputs(device), compiled=compiled)
    captured = set(outer_backend.ops()) | set(inner_backend.ops())
    case.record(outer_backend_graphs=len(outer_backend.graphs), inner_backend_graphs=len(inner_backend.graphs),
                captured_ops=sorted(captured))
    missing = {CAPTURED_NAME[op] for op in program.body if op in CAPTURED_NAME} - captured
    assert not missing, f"ops of the inner compiled function not in any compiled graph: {sorted(missing)}"


# --- programs around one op of torch's OpInfo database (cases/programs/op_programs.py) -----------------------

# How the op's function is made when compiled code calls it: a nested_compile_region (2.8+), its own
# torch.compile (with `inner_backend`), torch.compiler.disable (recursive or not), or plain with a
# graph break before it.
WRAPS = ("region", "compiled", "disable", "disable_nonrecursive", "graph_break")


@dataclasses.dataclass(frozen=True)
class NestedOpProgram(OpProgram):
    """`fn` calls the op's function `calls` times, the function wrapped as `wrap` says."""
    wrap: str = "region"
    inner_backend: str = "eager"
    calls: int = 1

    def definitions(self, params: str) -> str:
        wrapped = {"region": "torch.compiler.nested_compile_region(op)",
                   "compiled": f"torch.compile(op, backend={self.inner_backend!r})",
                   "disable": "torch.compiler.disable(op)",
                   "disable_nonrecursive": "torch.compiler.disable(op, recursive=False)"}.get(self.wrap)
        lines = [f"inner = {wrapped}" if wrapped else "inner = op", f"def fn({params}):"]
        if self.wrap == "graph_break":
            lines.append("    torch._dynamo.graph_break()")
        if self.calls == 1:
            lines.append(f"    return inner({params})")
        else:  # a second call on copies of the inputs: what the first did to them is not the second's business
            copies = ", ".join(f"{p}.clone()" if p.startswith("x") else p for p in params.split(", "))
            lines += [f"    first = inner({params})", f"    return first, inner({copies})"]
        return "\n".join(lines) + "\n"

    def extra_checks(self) -> str:
        if self.op_class != "random" or self.calls == 1:
            return ""
        return (
            "# Called twice, the function draws twice, as eagerly.\n"
            "torch.manual_seed(0)\n"
            "eager_draws = [o for o in fn(*SAMPLES[0]) if torch.is_tensor(o)]\n"
            "draws = [o for o in first['outputs']]\n"
            "# (only where the draws are many and differ in many places: two small ones may agree by chance)\n"
            "if len(draws) == 2 and draws[0].numel() >= 32"
            " and (eager_draws[0] != eager_draws[1]).float().mean() > 0.25:\n"
            "    assert not torch.equal(*draws), 'compiled, the two calls drew the same values'\n")


# fullgraph=True refuses a graph break and a disabled function by design: not drawn together.
BREAKS = {"graph_break", "disable", "disable_nonrecursive"}


def nested_op_programs(calls, device):
    def knobs(wrap):
        return st.builds(NestedOpProgram, **common_knobs(calls, device, side_effects=wrap != "region"),
                         wrap=st.just(wrap), inner_backend=st.sampled_from(("eager", "aot_eager", "inductor")),
                         calls=st.integers(1, 2))
    return st.sampled_from(WRAPS).flatmap(knobs).filter(lambda p: not (p.fullgraph and p.wrap in BREAKS))
