"""One op of the catalogue (cases/programs/opinfo.py) called on one of its samples, as plain code.

An `OpCall` is what hypothesis draws and shrinks (over the class, then the op, then the sample) for
every family's op programs: which op, which of its small samples, called as a function or in place,
in which dtype, with its numbers written as literals or passed as parameters, and a second sample
called afterwards. `materialise()` writes it as code: the call through the op's public name and
each sample's inputs as literal tensors holding their exact values, so that a program's script needs
torch only.
"""

from __future__ import annotations

import dataclasses
import math

import torch

from programs.opinfo import OP_CLASSES, catalogue, drawable, in_place_method, samples_of

# How the op is called: through its public name, or its in-place method on the first input (the
# program mutates its input: AOTAutograd's input mutations) or on a copy of it (a mutation inside).
VARIANTS = ("function", "inplace", "inplace_copy")
PASSABLE = (bool, int, float)  # non-tensor arguments a program may take as parameters


@dataclasses.dataclass(frozen=True)
class OpCall:
    """An op of the catalogue, its `sample`-th small sample, called as `variant` says (VARIANTS).
    `passed`: the sample's numbers and flags are parameters of the program, not literals in its
    call (what Dynamo guards on, or makes symbolic); `then`: a second sample the same program is
    called with afterwards (another shape or argument: a recompile, or dynamic shapes), where its
    call has the same form."""
    op: str
    op_variant: str = ""
    sample: int = 0
    variant: str = "function"
    dtype: str = "float32"
    passed: bool = False
    then: int | None = None

    def entry(self):
        return catalogue().entries[(self.op, self.op_variant)]

    def sample_input(self, index: int):
        dtype = getattr(torch, self.dtype)
        samples = [s for s in samples_of(self.entry().opinfo, dtype) if drawable(s)]
        return samples[index % len(samples)]

    def materialise(self, device: str = "cpu") -> "Materialised":
        """The first sample's call as an expression of parameters (tensors x0, x1, ...; passed
        numbers a0, a1, ...) with each sample's values for them (tensors on `device`)."""
        call, first = self._call(self.sample_input(self.sample))
        values = [first]
        if self.then is not None:
            second_call, second = self._call(self.sample_input(self.then))
            if second_call != call or [type(v) for _, v in second] != [type(v) for _, v in first]:
                raise NotMaterialisable(f"sample {self.then} is called otherwise than sample {self.sample}")
            values.append(second)
        return Materialised(call, [name for name, _ in first],
                            [[value_source(v, device) for _, v in each] for each in values])

    def calls_alike(self) -> list[int]:
        """The other samples whose call has this one's form: what `then` may name."""
        dtype = getattr(torch, self.dtype)
        samples = [s for s in samples_of(self.entry().opinfo, dtype) if drawable(s)]
        form = self._form(samples[self.sample % len(samples)])
        return [i for i, s in enumerate(samples) if i != self.sample % len(samples) and self._form(s) == form]

    def _form(self, sample):
        try:
            call, parameters = self._call(sample)
        except NotMaterialisable:
            return None
        return call, [type(v) for _, v in parameters]

    def _call(self, sample) -> tuple[str, list]:
        parameters: list[tuple[str, object]] = []

        def code(value) -> str:
            if isinstance(value, torch.Tensor) or (self.passed and type(value) in PASSABLE):
                prefix = "x" if isinstance(value, torch.Tensor) else "a"
                parameters.append((f"{prefix}{sum(n.startswith(prefix) for n, _ in parameters)}", value))
                return parameters[-1][0]
            if isinstance(value, (list, tuple)) and not isinstance(value, torch.Size):
                inner = ", ".join(code(v) for v in value)
                return f"[{inner}]" if isinstance(value, list) else f"({inner}{',' if len(value) == 1 else ''})"
            return literal(value)

        first = code(sample.input)
        args = [code(a) for a in sample.args] + [f"{k}={code(v)}" for k, v in sample.kwargs.items()]
        if self.variant in ("inplace", "inplace_copy"):
            target = f"{first}.clone()" if self.variant == "inplace_copy" else first
            call = f"{target}.{in_place_method(self.entry().opinfo)}({', '.join(args)})"
        else:
            call = f"{self.entry().path}({', '.join([first, *args])})"
        return call, parameters


@dataclasses.dataclass(frozen=True)
class Materialised:
    call: str  # "torch.add(x0, x1, alpha=a0)"
    names: list  # the call's parameters, in order: ["x0", "x1", "a0"]
    values: list  # per sample called, the source of each parameter's value


def value_source(value, device: str = "cpu") -> str:
    return tensor_source(value, device) if isinstance(value, torch.Tensor) else literal(value)


class NotMaterialisable(ValueError):
    """A sample argument with no literal form (a callable, say): the example is not drawn."""


def literal(value) -> str:
    """Python source for a non-tensor argument of a sample."""
    if isinstance(value, float) and not math.isfinite(value):
        return f"float({str(value)!r})"
    if isinstance(value, (bool, int, float, complex, str, type(None))):
        return repr(value)
    if isinstance(value, (torch.dtype, torch.memory_format, torch.layout)):
        return str(value)
    if isinstance(value, torch.device):
        return f"torch.device({str(value)!r})"
    if isinstance(value, torch.Size):
        return f"torch.Size({list(value)!r})"
    if isinstance(value, slice):
        return f"slice({value.start!r}, {value.stop!r}, {value.step!r})"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{literal(k)}: {literal(v)}" for k, v in value.items()) + "}"
    raise NotMaterialisable(f"no literal for a {type(value).__name__} argument")


def tensor_source(tensor: torch.Tensor, device: str = "cpu") -> str:
    """`torch.tensor(<values>, dtype=...)` holding the tensor's exact values (float32 round-trips
    through Python's float repr), requiring grad where it does."""
    values = tensor.detach().tolist()
    if tensor.dtype.is_complex:
        raise NotMaterialisable("complex tensors are not drawn")
    text = repr(values).replace("inf", "float('inf')").replace("nan", "float('nan')")
    where = f", device={device!r}" if device != "cpu" else ""
    grad = ", requires_grad=True" if tensor.requires_grad else ""
    return f"torch.tensor({text}, dtype={tensor.dtype}{where}{grad})"


def op_calls(classes=OP_CLASSES):
    """OpCalls of the catalogue: a class first (so that each is reached, however few its ops), then
    one of its ops, one of its samples and how it is called; shrinking goes to the first op of the
    first class and to the first sample."""
    from hypothesis import strategies as st

    found = catalogue()
    reachable = [c for c in classes if found.of_class(c)]

    @st.composite
    def draw(draw):
        op_class = draw(st.sampled_from(reachable))
        name, variant = draw(st.sampled_from(found.of_class(op_class)))
        entry = found.entries[(name, variant)]
        dtype = "float64" if "random" in entry.classes and torch.float64 in entry.opinfo.supported_dtypes("cpu") \
            else "float32"
        in_place = op_class == "inplace" or entry.path is None  # some ops are only an in-place method
        call = OpCall(name, variant, draw(st.integers(0, entry.samples - 1)),
                      draw(st.sampled_from(VARIANTS[1:])) if in_place else "function", dtype, draw(st.booleans()))
        alike = call.calls_alike()
        return dataclasses.replace(call, then=draw(st.none() | st.sampled_from(alike)) if alike else None)
    return draw()


def on_copies(call: OpCall) -> OpCall:
    """The call with an in-place op applied to a copy of its input: inside a checkpoint, a mutated
    input is what the recompute would see (eager raises, or differs, by design)."""
    return dataclasses.replace(call, variant="inplace_copy") if call.variant == "inplace" else call
