"""Programs drawn around activation checkpoint (body, use_reentrant, context_fn, nesting, output reuse)
for the family's property cases."""

import dataclasses
import functools

import torch
from hypothesis import strategies as st
from torch.utils.checkpoint import checkpoint

from programs.op_programs import OpProgram, common_knobs
from programs.opcall import on_copies

# What the checkpointed body does after its first matmul (w: 8x8, an input of the program too).
CKPT_OPS = {"sigmoid": "torch.sigmoid(y)", "sin": "torch.sin(y)", "relu": "torch.relu(y)", "mm": "y @ w",
            "mul_x": "y * x", "add1": "y + 1"}
CONTEXT_FNS = ("none", "noop", "sac_save_mm", "sac_recompute")  # noop: what TE 1.5-1.7 always passed
REUSES = {"none": "out", "times_x": "out * x", "twice": "out + torch.sin(out)", "tuple": "out, out * 2"}


@dataclasses.dataclass(frozen=True)
class CheckpointProgram:
    """`fn(x, w)` checkpoints `body` (x @ w, then `ops`), `nesting` checkpoints deep, with
    `use_reentrant` and `context_fn` (non-reentrant only), and uses its output as `reuse` says."""
    ops: tuple = ("sigmoid",)
    use_reentrant: bool = False
    context_fn: str = "none"
    nesting: int = 1
    reuse: str = "none"
    shape: tuple = (4, 8)

    @property
    def source(self) -> str:
        kwargs = f"use_reentrant={self.use_reentrant}" + (
            ", context_fn=context_fn" if self.context_fn != "none" else "")
        lines = ["def body(x, w):", "    y = x @ w"] + [f"    y = {CKPT_OPS[op]}" for op in self.ops] + ["    return y"]
        inner = "body"
        for depth in range(1, self.nesting):
            lines += [f"def level{depth}(x, w):", f"    return checkpoint({inner}, x, w, {kwargs})"]
            inner = f"level{depth}"
        lines += ["def fn(x, w):", f"    out = checkpoint({inner}, x, w, {kwargs})", f"    return {REUSES[self.reuse]}"]
        return "\n".join(lines)

    def function(self):
        namespace = {"torch": torch, "checkpoint": checkpoint, "context_fn": self.make_context_fn()}
        exec(compile(self.source, "<checkpoint program>", "exec"), namespace)
        return namespace["fn"]

    def make_context_fn(self):
        if self.context_fn in ("none", "noop"):
            return torch.utils.checkpoint.noop_context_fn
        policies = torch.utils.checkpoint.CheckpointPolicy
        saved = policies.MUST_SAVE if self.context_fn == "sac_save_mm" else policies.PREFER_RECOMPUTE

        def policy_fn(ctx, op, *args, **kwargs):
            return saved if op == torch.ops.aten.mm.default else policies.PREFER_RECOMPUTE
        return functools.partial(torch.utils.checkpoint.create_selective_checkpoint_contexts, policy_fn)


@st.composite
def checkpoint_programs(draw):
    use_reentrant = draw(st.booleans())
    return CheckpointProgram(
        ops=tuple(draw(st.lists(st.sampled_from(sorted(CKPT_OPS)), max_size=2))), use_reentrant=use_reentrant,
        context_fn="none" if use_reentrant else draw(st.sampled_from(CONTEXT_FNS)),  # reentrant takes none
        nesting=draw(st.integers(1, 2)), reuse=draw(st.sampled_from(sorted(REUSES))),
        shape=draw(st.sampled_from(((4, 8), (2, 4, 8)))))


# --- programs around one op of torch's OpInfo database (cases/programs/op_programs.py) -----------------------

@dataclasses.dataclass(frozen=True)
class CheckpointOpProgram(OpProgram):
    """The op checkpointed (`nesting` deep), with use_reentrant, preserve_rng_state and a context_fn
    (none; TE's no-op; SAC policies saving or recomputing every op)."""
    use_reentrant: bool = False
    preserve_rng_state: bool = True
    context_fn: str = "none"
    nesting: int = 1

    def imports(self) -> list[str]:
        return (["import functools"] if self.context_fn.startswith("sac") else []) + [
            "import torch", "from torch.utils.checkpoint import checkpoint"]

    def definitions(self, params: str) -> str:
        kwargs = f"use_reentrant={self.use_reentrant}, preserve_rng_state={self.preserve_rng_state}"
        lines = []
        if self.context_fn == "noop":
            kwargs += ", context_fn=torch.utils.checkpoint.noop_context_fn"
        elif self.context_fn.startswith("sac"):
            policy = "MUST_SAVE" if self.context_fn == "sac_save" else "PREFER_RECOMPUTE"
            lines += ["def policy(ctx, op, *args, **kwargs):",
                      f"    return torch.utils.checkpoint.CheckpointPolicy.{policy}",
                      "context_fn = functools.partial("
                      "torch.utils.checkpoint.create_selective_checkpoint_contexts, policy)"]
            kwargs += ", context_fn=context_fn"
        inner = "op"
        for depth in range(1, self.nesting):
            lines += [f"def level{depth}({params}):", f"    return checkpoint({inner}, {params}, {kwargs})"]
            inner = f"level{depth}"
        lines += [f"def fn({params}):", f"    return checkpoint({inner}, {params}, {kwargs})"]
        return "\n".join(lines) + "\n"

    def compiled(self, backend: str) -> str:
        return f"OPTIONS = dict({self.compile_options(backend)})\ncompiled = torch.compile(fn, **OPTIONS)\n"

    def extra_checks(self) -> str:
        if self.op_class != "random":
            return ""
        return (
            "# Its plain twin under the same backend: where their forward draws agree, so do their gradients.\n"
            "twin = run(torch.compile(op, **OPTIONS), inputs, seed=0)\n"
            "if all(torch.equal(a, b) for a, b in zip(twin['outputs'], first['outputs'])):\n"
            "    try:\n"
            "        torch.testing.assert_close(first['gradients'], twin['gradients'], equal_nan=True)\n"
            "    except AssertionError as error:\n"
            "        raise AssertionError(f'checkpointed against its plain twin, the same draws: {error}') from None\n")


def checkpoint_op_programs(calls, device):
    """CheckpointOpPrograms around the OpCalls `calls` draws."""
    @st.composite
    def draw(draw):
        use_reentrant = draw(st.booleans())
        return CheckpointOpProgram(
            **{name: draw(knob) for name, knob in common_knobs(calls.map(on_copies), device, False).items()},
            use_reentrant=use_reentrant, preserve_rng_state=draw(st.booleans()),
            context_fn="none" if use_reentrant else draw(st.sampled_from(CONTEXT_FNS)), nesting=draw(st.integers(1, 2)))
    return draw()
