"""Programs around one op of torch's OpInfo database, written as plain-torch scripts.

Each family wraps an `OpCall` (cases/programs/opinfo.py) in its feature, with the feature's knobs
drawn too, and writes the whole example as one standalone script: imports, the wrapped function,
the sample's inputs as literal tensors, `torch.compile` with the cell's backend, and the checks.
The property case runs that very text, so the program a record lists, the script `repro` exports
and what `reduce` starts from are one thing.

The checks, by what the op is (an oracle per class; `ORACLES`):
- deterministic ops (every class but random): eager and compiled agree on outputs (dtypes too),
  gradients, the inputs after the call (what an in-place op wrote) and which outputs alias which
  inputs, on a first and a second call, within OpInfo's own tolerances where it declares them;
- random ops, where eager and compiled draw differently by design, what must hold inside one run:
  the same seed gives the same outputs and gradients twice, and the gradient agrees with the
  forward's own draw (torch.autograd.gradcheck of the compiled function, re-seeded before each
  call, in float64). Families add their own: a checkpointed program and its plain twin agree under
  the same backend where their draws agree; a region called twice draws twice.
"""

from __future__ import annotations

import dataclasses
import textwrap

import torch

from cases.programs.opinfo import OpCall

DETERMINISTIC, RANDOM = "agree with eager", "consistent with its own draws"
ORACLES = {"random": RANDOM, "inplace": DETERMINISTIC, "view": DETERMINISTIC, "reduction": DETERMINISTIC,
           "dtype_changing": DETERMINISTIC, "other": DETERMINISTIC}

RUN = '''\
def tensors(out):
    return [o for o in (out if isinstance(out, (tuple, list)) else [out]) if isinstance(o, torch.Tensor)]

def run(f, seed=None, inputs=INPUTS):
    leaves = [x.detach().clone().requires_grad_(x.requires_grad) for x in inputs]
    args = [x.clone() for x in leaves]
    if seed is not None:
        torch.manual_seed(seed)
    outs = tensors(f(*args))
    aliasing = [[o.untyped_storage().data_ptr() == a.untyped_storage().data_ptr() for a in args] for o in outs]
    loss = sum(o.sum() for o in outs if o.requires_grad and not o.is_complex())
    wrt = [x for x in leaves if x.requires_grad]
    grads = torch.autograd.grad(loss, wrt, allow_unused=True) if torch.is_tensor(loss) else ()
    return {"outputs": outs, "inputs after": args, "aliasing": aliasing, "gradients": grads}
'''

AGREE = '''\
expected = run(fn)
for call in ("first", "second"):
    torch.testing.assert_close(run(compiled), expected, equal_nan=True{tolerances},
                               msg=lambda m: f"compiled against eager, {{call}} call: {{m}}")
'''

CONSISTENT = '''\
first = run(compiled, seed=0)
torch.testing.assert_close(run(compiled, seed=0), first, rtol=0, atol=0, equal_nan=True,
                           msg=lambda m: f"the same seed twice: {{m}}")
# The gradient agrees with the forward's own draw: along a direction, against a central difference.
directions = [torch.randn_like(x) if x.requires_grad else torch.zeros_like(x) for x in INPUTS]

def loss_at(t):
    moved = run(compiled, seed=0, inputs=[x + t * d for x, d in zip(INPUTS, directions)])
    return sum(o.sum() for o in moved["outputs"] if o.requires_grad and not o.is_complex())

if first["gradients"]:
    slope = (loss_at(1e-6) - loss_at(-1e-6)) / 2e-6
    along = sum((g * d).sum() for g, d in zip(first["gradients"], [d for x, d in zip(INPUTS, directions) if x.requires_grad])
                if g is not None)
    torch.testing.assert_close(along, slope.detach(), rtol=1e-4, atol=1e-6,
                               msg=lambda m: f"the gradient does not agree with the forward's own draw: {{m}}")
'''


@dataclasses.dataclass(frozen=True)
class OpProgram:
    """The op called in a plain function; families override `definitions` with their feature."""
    call: OpCall

    imports = ("import torch",)

    def definitions(self, call: str, params: str) -> str:
        return f"def fn({params}):\n    return {call}\n"

    def compiled(self, backend: str, fullgraph: bool) -> str:
        return f"compiled = torch.compile(fn, backend={backend!r}, fullgraph={fullgraph})\n"

    def extra_checks(self) -> str:
        """Checks of the family's own effect, after the oracle (the script's names in scope)."""
        return ""

    @property
    def op_class(self) -> str:
        """The class whose oracle applies: random first (it decides what is comparable)."""
        classes = self.call.entry().classes
        if "random" in classes:
            return "random"
        if self.call.variant == "inplace":
            return "inplace"
        return next(c for c in ("view", "reduction", "dtype_changing", "other") if c in classes)

    def tolerances(self) -> dict | None:
        return None

    def script(self, backend: str, fullgraph: bool) -> str:
        made = self.call.materialise()
        params = ", ".join(made.names)
        inputs = "".join(f"{name} = {source}\n" for name, source, _ in made.inputs)
        inputs += f"INPUTS = [{params}{',' if len(made.names) == 1 else ''}]\n"
        oracle = CONSISTENT if self.op_class == "random" else AGREE
        tolerances = self.tolerances()
        oracle = oracle.format(tolerances="".join(f", {k}={v!r}" for k, v in (tolerances or {}).items()))
        return "\n".join(["\n".join(self.imports) + "\n", self.definitions(made.call, params), inputs,
                          self.compiled(backend, fullgraph), RUN, oracle + self.extra_checks()])


# --- checkpoint ------------------------------------------------------------------------------------------------

CONTEXT_FNS = ("none", "noop", "sac_save", "sac_recompute")


@dataclasses.dataclass(frozen=True)
class CheckpointOpProgram(OpProgram):
    """The op checkpointed (`nesting` deep), with use_reentrant, preserve_rng_state and a context_fn."""
    use_reentrant: bool = False
    preserve_rng_state: bool = True
    context_fn: str = "none"
    nesting: int = 1

    @property
    def imports(self):
        return ("import functools" if self.context_fn.startswith("sac") else "", "import torch",
                "from torch.utils.checkpoint import checkpoint")

    def definitions(self, call: str, params: str) -> str:
        kwargs = f"use_reentrant={self.use_reentrant}, preserve_rng_state={self.preserve_rng_state}"
        lines = []
        if self.context_fn == "noop":
            kwargs += ", context_fn=torch.utils.checkpoint.noop_context_fn"
        elif self.context_fn.startswith("sac"):
            policy = "MUST_SAVE" if self.context_fn == "sac_save" else "PREFER_RECOMPUTE"
            lines += ["def policy(ctx, op, *args, **kwargs):",
                      f"    return torch.utils.checkpoint.CheckpointPolicy.{policy}",
                      "context_fn = functools.partial(torch.utils.checkpoint.create_selective_checkpoint_contexts, policy)"]
            kwargs += ", context_fn=context_fn"
        lines += [f"def body({params}):", f"    return {call}"]
        inner = "body"
        for depth in range(1, self.nesting):
            lines += [f"def level{depth}({params}):", f"    return checkpoint({inner}, {params}, {kwargs})"]
            inner = f"level{depth}"
        lines += [f"def fn({params}):", f"    return checkpoint({inner}, {params}, {kwargs})"]
        return "\n".join(lines) + "\n"

    def extra_checks(self) -> str:
        if self.op_class != "random":
            return ""
        return textwrap.dedent('''\
            # Its plain twin under the same backend: where their forward draws agree, so do their gradients.
            plain = torch.compile(body, backend=BACKEND)
            twin = run(plain, seed=0)
            if all(torch.equal(a, b) for a, b in zip(twin["outputs"], first["outputs"])):
                torch.testing.assert_close(first["gradients"], twin["gradients"], equal_nan=True,
                                           msg=lambda m: f"checkpointed against its plain twin, the same draws: {m}")
            ''')

    def compiled(self, backend: str, fullgraph: bool) -> str:
        return f"BACKEND = {backend!r}\n" + super().compiled(backend, fullgraph).replace(repr(backend), "BACKEND", 1)
