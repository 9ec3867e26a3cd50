"""Programs around one op of torch's OpInfo database, written as plain-torch scripts.

Each family wraps an `OpCall` (cases/programs/opinfo.py) in its feature, with the feature's knobs
drawn too, and writes the whole example as one standalone script: imports, the op's function `op`,
the family's `fn` around it, each sample's inputs as literals, `torch.compile` with the cell's
backend, and the checks. The property case runs that very text, so the program a record lists,
the script `repro` exports and what `reduce` starts from are one thing.

Knobs every family has: `dynamic` (torch.compile(dynamic=True)), `side_effect` (the op's function
appends to a list: Dynamo must replay it on every call), and the call's own (`passed` numbers, a
`then` sample: recompiles).

The checks, by what the op is (`ORACLES`, one per class):
- deterministic ops (every class but random): eager and compiled agree on outputs (dtypes too),
  gradients, the inputs after the call (what an in-place op wrote), which outputs alias which
  inputs and the side effects, on a first and a second call of each sample, within OpInfo's own
  tolerances where it declares them for inductor;
- random ops, where eager and compiled draw differently by design, what must hold inside one run:
  the same seed gives the same outputs and gradients twice, and the gradient agrees with the
  forward's own draw (along a random direction, against a central difference of the compiled
  function re-seeded before each call, in float64). Families add their own: a checkpointed
  program and its plain twin agree under the same backend where their draws agree; a region
  called twice draws twice where eager does.
"""

from __future__ import annotations

import dataclasses
import itertools
import sys
import types
import unittest.mock

from programs.opcall import OpCall

DETERMINISTIC, RANDOM = "agree with eager", "consistent with its own draws"
ORACLES = {"random": RANDOM, "inplace": DETERMINISTIC, "view": DETERMINISTIC, "reduction": DETERMINISTIC,
           "dtype_changing": DETERMINISTIC, "other": DETERMINISTIC}

RUN = '''\
def run(f, inputs, seed=None):
    leaves = [x.detach().clone().requires_grad_(x.requires_grad) if torch.is_tensor(x) else x for x in inputs]
    args = [x.clone() if torch.is_tensor(x) else x for x in leaves]
    calls = len(SEEN)
    if seed is not None:
        torch.manual_seed(seed)
    out = f(*args)
    effects = len(SEEN) - calls  # in the forward: a checkpoint's recompute repeats them eagerly
    outs = [o for o in (out if isinstance(out, (tuple, list)) else [out]) if torch.is_tensor(o)]
    tensors = [a for a in args if torch.is_tensor(a)]
    aliasing = [[o.untyped_storage().data_ptr() == a.untyped_storage().data_ptr() for a in tensors] for o in outs]
    loss = sum(o.sum() for o in outs if o.requires_grad and not o.is_complex())
    if torch.is_tensor(loss):  # backward(), not autograd.grad: a reentrant checkpoint refuses the latter
        loss.backward()
    grads = [x.grad for x in leaves if torch.is_tensor(x) and x.requires_grad] if torch.is_tensor(loss) else []
    return {"outputs": outs, "inputs after": tensors, "aliasing": aliasing, "gradients": grads,
            "side effects": effects}
'''

AGREE = '''\
for inputs in SAMPLES:
    expected = run(fn, inputs)
    for call in ("first", "second"):
        try:
            torch.testing.assert_close(run(compiled, inputs), expected, equal_nan=True{tolerances})
        except AssertionError as error:
            raise AssertionError(f"compiled against eager, {{call}} call: {{error}}") from None
'''

CONSISTENT = '''\
for inputs in SAMPLES:
    first = run(compiled, inputs, seed=0)
    try:
        torch.testing.assert_close(run(compiled, inputs, seed=0), first, rtol=0, atol=0, equal_nan=True)
    except AssertionError as error:
        raise AssertionError(f"the same seed twice: {{error}}") from None
# The gradient agrees with the forward's own draw: along a direction, against a central difference.
inputs, first = SAMPLES[0], run(compiled, SAMPLES[0], seed=0)
directions = [torch.randn_like(x) if torch.is_tensor(x) and x.requires_grad else None for x in inputs]

def loss_at(t):
    moved = run(compiled, [x if d is None else x + t * d for x, d in zip(inputs, directions)], seed=0)
    return sum(o.sum() for o in moved["outputs"] if o.requires_grad and not o.is_complex())

if first["gradients"]:
    slope = (loss_at(1e-6) - loss_at(-1e-6)) / 2e-6
    along = sum((g * d).sum() for g, d in zip(first["gradients"], [d for d in directions if d is not None])
                if g is not None)
    try:
        torch.testing.assert_close(along, slope.detach(), rtol=1e-4, atol=1e-6)
    except AssertionError as error:
        raise AssertionError(f"the gradient does not agree with the forward's own draw: {{error}}") from None
'''


@dataclasses.dataclass(frozen=True)
class OpProgram:
    """The op called by a plain function; each family's subclass wraps it in its feature
    (`definitions`) and may compile something else than `fn` (`compiled`)."""
    call: OpCall
    device: str = "cpu"
    fullgraph: bool = False
    dynamic: bool = False
    side_effect: bool = False

    def imports(self) -> list[str]:
        return ["import torch"]

    def definitions(self, params: str) -> str:
        """Source defining `fn(params)` from `op(params)`, the program eager runs."""
        return f"def fn({params}):\n    return op({params})\n"

    def compiled(self, backend: str) -> str:
        """Source defining `compiled`, the program compiled code runs."""
        return f"compiled = torch.compile(fn, {self.compile_options(backend)})\n"

    def compile_options(self, backend: str) -> str:
        return f"backend={backend!r}, fullgraph={self.fullgraph}" + (", dynamic=True" if self.dynamic else "")

    def pre_checks(self) -> str:
        """Checks of the family's own effect that come before the oracle, with their own message
        (the names of RUN in scope)."""
        return ""

    def extra_checks(self) -> str:
        """Checks of the family's own effect, after the oracle (the script's names in scope)."""
        return ""

    @property
    def op_class(self) -> str:
        """The class whose oracle applies: random first (it decides what is comparable)."""
        classes = self.call.entry().classes
        if "random" in classes:
            return "random"
        if self.call.variant != "function":
            return "inplace"
        return next(c for c in ("view", "reduction", "dtype_changing", "other") if c in classes)

    def tolerances(self) -> dict:
        """OpInfo's own tolerance for this op and dtype under inductor, where it declares one."""
        from programs.opinfo import declared_tolerance

        return declared_tolerance(self.call.entry().opinfo, self.call.dtype) or {}

    @property
    def source(self) -> str:
        """The program without its samples and checks: what a record shows of it."""
        made = self.call.materialise(self.device)
        params = ", ".join(made.names)
        seen = "    SEEN.append(1)\n" if self.side_effect else ""
        return f"def op({params}):\n{seen}    return {made.call}\n" + self.definitions(params)

    def script(self, backend: str) -> str:
        made = self.call.materialise(self.device)
        params = ", ".join(made.names)
        seen = "    SEEN.append(1)\n" if self.side_effect else ""
        samples = "".join(f"SAMPLES.append([{', '.join(values)}])\n" for values in made.values)
        oracle = CONSISTENT if self.op_class == "random" else AGREE
        oracle = oracle.format(tolerances="".join(f", {k}={v!r}" for k, v in self.tolerances().items()))
        return "\n".join([
            "\n".join(self.imports()), "SEEN, SAMPLES = [], []\n",
            f"def op({params}):\n{seen}    return {made.call}\n", self.definitions(params),
            samples, self.compiled(backend), RUN, self.pre_checks() + oracle + self.extra_checks()])


@dataclasses.dataclass(frozen=True)
class ContextOpProgram(OpProgram):
    """The op run inside a context manager (`context()`), entered in the compiled function or
    around the compiled function's call (`context_at`)."""
    context_at: str = "inside_compiled"

    def context(self) -> str:
        raise NotImplementedError

    def body(self, params: str) -> list[str]:
        """The lines that run inside the context, indented for a function's body."""
        return [f"    return op({params})"]

    def definitions(self, params: str) -> str:
        body = self.body(params)
        if self.context_at == "outside":
            return "\n".join([f"def body({params}):", *body, f"def fn({params}):",
                              f"    with {self.context()}:", f"        return body({params})"]) + "\n"
        return "\n".join([f"def fn({params}):", f"    with {self.context()}:",
                          *("    " + line for line in body)]) + "\n"

    def compiled(self, backend: str) -> str:
        if self.context_at != "outside":
            return super().compiled(backend)
        return (f"compiled_body = torch.compile(body, {self.compile_options(backend)})\n\n"
                f"def compiled(*args):\n    with {self.context()}:\n        return compiled_body(*args)\n")


def common_knobs(calls, device: str, side_effects: bool = True) -> dict:
    """The strategies of the knobs every family's op program has (for hypothesis's builds).
    `side_effects=False` where the op runs inside a higher-order op (checkpoint, a region), which
    refuses a Python side effect by design (Dynamo's "HOP: Unsafe side effect")."""
    from hypothesis import strategies as st

    return dict(call=calls, device=st.just(device), fullgraph=st.booleans(), dynamic=st.booleans(),
                side_effect=st.booleans() if side_effects else st.just(False))


SCRIPT_MODULE = "op_program"
_runs = itertools.count()


def run_script(script: str) -> dict:
    """Run an op program's script as a module of its own, from the seed every case starts with.
    The module is registered under a name of its own per run: Dynamo looks a function's globals up
    by its module's name, and a name another run had may find that run's module."""
    import torch

    for name in [n for n in sys.modules if n.startswith(f"{SCRIPT_MODULE}_")]:
        del sys.modules[name]
    module = types.ModuleType(f"{SCRIPT_MODULE}_{next(_runs)}")
    module.__file__ = f"<{SCRIPT_MODULE}>"
    sys.modules[module.__name__] = module
    torch.manual_seed(0)
    exec(compile(script, module.__file__, "exec"), module.__dict__)
    return module.__dict__


def without_compile(fn=None, **options):
    """torch.compile as the identity: what a program's script runs as its control."""
    return fn if fn is not None else (lambda function: function)


def check_op_program(case, program: OpProgram, backend: str) -> None:
    """The example's script run twice: without compile (the control: torch.compile returns the
    function itself, so every check must hold; where one does not, the example is not one its
    oracle can judge, and hypothesis draws another), then as written, from a reset Dynamo. The
    record names the op, its class and its oracle."""
    import torch
    from hypothesis import assume

    from programs.opcall import NotMaterialisable
    from programs.opinfo import catalogue

    # A pinned example whose op this torch's op_db lacks, or whose sample has no literal form: not run.
    assume((program.call.op, program.call.op_variant) in catalogue().entries)
    try:
        script = program.script(backend)
    except NotMaterialisable:
        assume(False)
    try:
        with unittest.mock.patch("torch.compile", without_compile):
            run_script(script)
    except Exception:
        assume(False)
    case.record(op=program.call.op + (f".{program.call.op_variant}" if program.call.op_variant else ""),
                op_class=program.op_class, oracle=ORACLES[program.op_class])
    torch._dynamo.reset()
    try:
        run_script(script)
    except torch._dynamo.exc.Unsupported as exc:
        if program.fullgraph and runs_without_fullgraph(program, backend):
            raise FullgraphRefused(f"fullgraph=True refused a graph break the program has (without fullgraph it "
                                   f"runs and its checks hold): {str(exc).strip().splitlines()[0][:300]}") from exc
        raise


class FullgraphRefused(Exception):
    """fullgraph=True raised for a graph break, and the same program without fullgraph passes: what
    torch.compile documents fullgraph to do, not a bug (a limitation the op properties declare)."""


def runs_without_fullgraph(program: OpProgram, backend: str) -> bool:
    import torch

    torch._dynamo.reset()
    try:
        run_script(dataclasses.replace(program, fullgraph=False).script(backend))
    except Exception:
        return False
    return True
