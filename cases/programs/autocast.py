"""Programs drawn around autocast (dtype inside, inputs' dtype, where autocast is entered, checkpointed
or not, what torch.compile wraps) for the family's property cases."""

import dataclasses

import torch
from hypothesis import strategies as st
from torch.utils.checkpoint import checkpoint

from programs.op_programs import ContextOpProgram, common_knobs
from programs.opcall import on_copies
from programs.opinfo import DEFAULT_TOLERANCES

# What the body does after its matmul; "mm_fp32": a matmul with autocast disabled (float32 inside).
AUTOCAST_OPS = {"sigmoid": "torch.sigmoid(y)", "relu": "torch.relu(y)", "mm": "y @ w",
                "mean_keep": "y.mean(-1, keepdim=True) * y", "softmax": "torch.softmax(y, -1)",
                "mse": "torch.nn.functional.mse_loss(y, torch.zeros_like(y), reduction='none')",
                "mm_fp32": "mm_fp32(y, w)"}
AUTOCAST_AT = ("outside", "inside_compiled", "inside_body")  # around the compiled call, around the checkpoint, in it
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
    return st.builds(AutocastProgram, device=st.just(device),
                     ops=st.lists(st.sampled_from(sorted(AUTOCAST_OPS)), max_size=3).map(tuple),
                     dtype=st.sampled_from(dtypes), input_dtype=st.sampled_from(("float32", "bfloat16")),
                     autocast_at=st.sampled_from(AUTOCAST_AT), checkpointed=st.booleans(),
                     compiled=st.sampled_from(COMPILED))


# --- programs around one op of torch's OpInfo database (cases/programs/op_programs.py) -----------------------

AUTOCAST_OP_AT = ("inside_compiled", "outside")  # entered in the compiled function, or around its call
NESTED = ("none", "disabled", "enabled")  # a second autocast inside: disabled, or to the same dtype


@dataclasses.dataclass(frozen=True)
class AutocastOpProgram(ContextOpProgram):
    """The op under autocast to `autocast_dtype` (enabled or not, its cache on or off, a second
    autocast nested inside), entered in the compiled function or around its call, checkpointed or not."""
    device: str = "cpu"
    autocast_dtype: str = "bfloat16"
    enabled: bool = True
    cache_enabled: bool = True
    nested: str = "none"
    checkpointed: bool = False

    def imports(self) -> list[str]:
        return ["import torch"] + (["from torch.utils.checkpoint import checkpoint"] if self.checkpointed else [])

    def context(self) -> str:
        return (f"torch.autocast({self.device!r}, dtype=torch.{self.autocast_dtype}, enabled={self.enabled}, "
                f"cache_enabled={self.cache_enabled})")

    def body(self, params: str) -> list[str]:
        call = f"checkpoint(op, {params}, use_reentrant=False)" if self.checkpointed else f"op({params})"
        if self.nested == "none":
            return [f"    return {call}"]
        inner = f"torch.autocast({self.device!r}, enabled=False)" if self.nested == "disabled" else \
            f"torch.autocast({self.device!r}, dtype=torch.{self.autocast_dtype})"
        return [f"    with {inner}:", f"        return {call}"]

    def tolerances(self) -> dict:
        """Autocast's dtype where it is on (the op may compute in it), else the op's own."""
        tolerances = super().tolerances()
        if self.enabled:
            lower = DEFAULT_TOLERANCES[self.autocast_dtype]
            tolerances = {k: max(tolerances.get(k, 0), v) for k, v in lower.items()}
        return tolerances


def autocast_op_programs(calls, device):
    def knobs(checkpointed):
        return st.builds(
            AutocastOpProgram, **common_knobs(calls.map(on_copies) if checkpointed else calls, device,
                                              side_effects=not checkpointed),
            autocast_dtype=st.sampled_from(("bfloat16",) if device == "cpu" else ("float16", "bfloat16")),
            enabled=st.booleans(), cache_enabled=st.booleans(), nested=st.sampled_from(NESTED),
            context_at=st.sampled_from(AUTOCAST_OP_AT), checkpointed=st.just(checkpointed))
    return st.booleans().flatmap(knobs)
