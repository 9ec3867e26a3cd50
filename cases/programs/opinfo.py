"""Ops and their sample inputs from torch's own OpInfo database (`op_db`), as plain code.

Each row explores what its own torch ships tests for: the ops, their sample inputs, which dtypes and
autograd they support, their tolerances and notes. `catalogue()` reads `op_db` of the torch that is
installed (it needs `expecttest`), keeps the ops whose callable has a public name and whose samples
run on the CPU in float32, and sorts them into classes by what their first sample does:

    random          an aten op it dispatches carries the `nondeterministic_seeded` tag
    inplace         it has an in-place variant (`x.add_(...)`): the program mutates a tensor
    view            an output shares its storage with an input
    reduction       an OpInfo of the `ReductionOpInfo` kind
    dtype_changing  an output's dtype is not the first input's
    other           anything else (pointwise, linear algebra, ...)

An `OpCall` names one op, one of its samples and how it is called; it is what hypothesis draws and
shrinks (over the op first, then the sample), and `materialise()` writes it as code: the inputs as
literal tensors and the call as the op's public name, so that a program's script needs torch only.
Where `op_db` cannot be imported (an old torch, a missing dependency), `catalogue().error` says why.
"""

from __future__ import annotations

import dataclasses
import functools
import math

import torch

OP_CLASSES = ("random", "inplace", "view", "reduction", "dtype_changing", "other")
SAMPLE_SEED = 0  # the samples of an op are drawn from this seed: the same tensors on every run of a row
MAX_SAMPLES = 24  # samples of an op considered (the first ones: OpInfo lists the plain shapes first)
MAX_ELEMENTS = 64  # a sample with more elements in all is not drawn (its script would not be short)
# Public namespaces an op's callable is looked up in, by the OpInfo's name.
NAMESPACES = ("torch", "torch.nn.functional", "torch.special", "torch.linalg", "torch.fft")


@dataclasses.dataclass
class Entry:
    """One OpInfo of the catalogue: where it is called from, its classes and what it supports."""
    opinfo: object
    path: str  # the public name of its callable ("torch.nn.functional.dropout")
    classes: frozenset
    samples: int  # how many of its samples can be drawn

    @property
    def key(self) -> tuple[str, str]:
        return self.opinfo.name, self.opinfo.variant_test_name


@dataclasses.dataclass
class Catalogue:
    entries: dict = dataclasses.field(default_factory=dict)  # (name, variant) -> Entry
    error: str | None = None  # why op_db could not be read
    left_out: int = 0  # ops of op_db not drawn (no public callable, no float32 sample on the CPU, too big)

    def of_class(self, name: str) -> list[tuple[str, str]]:
        return sorted(key for key, entry in self.entries.items() if name in entry.classes)


def _public_path(opinfo) -> str | None:
    """The dotted public name of the op's callable: its own where it has one, else its OpInfo name
    looked up in torch's namespaces (OpInfo wraps random ops in a lambda that seeds first)."""
    function = opinfo.op
    names = [opinfo.name] + ([function.__name__] if "<" not in getattr(function, "__name__", "<") else [])
    for name in names:
        for namespace in NAMESPACES:
            path = f"{namespace}.{name}"
            try:
                found = functools.reduce(getattr, path.split(".")[1:], torch)
            except AttributeError:
                continue
            if callable(found) and not isinstance(found, type):
                return path
    return None


def _tensors(value) -> list:
    return [t for t in torch.utils._pytree.tree_leaves(value) if isinstance(t, torch.Tensor)]


class _Tags(torch.utils._python_dispatch.TorchDispatchMode):
    """The tags of every aten op dispatched while active."""

    def __init__(self):
        super().__init__()
        self.tags = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.tags.update(getattr(func, "tags", ()))
        return func(*args, **(kwargs or {}))


def classify(opinfo, sample, outputs, tags) -> set:
    """The classes of one call of an op on a sample (see the module's docstring)."""
    from torch.testing._internal.opinfo.core import ReductionOpInfo

    classes = set()
    inputs = _tensors((sample.input, sample.args, sample.kwargs))
    if torch.Tag.nondeterministic_seeded in tags:
        classes.add("random")
    if isinstance(opinfo, ReductionOpInfo):
        classes.add("reduction")
    storages = {t.untyped_storage().data_ptr() for t in inputs}
    if any(o.untyped_storage().data_ptr() in storages for o in outputs if o.numel()):
        classes.add("view")
    if inputs and any(o.dtype != inputs[0].dtype for o in outputs):
        classes.add("dtype_changing")
    return classes or {"other"}


def samples_of(opinfo, dtype=torch.float32, requires_grad=None) -> list:
    """The op's first MAX_SAMPLES sample inputs on the CPU, drawn from SAMPLE_SEED (OpInfo's
    make_tensor draws from the global generator)."""
    grad = opinfo.supports_autograd if requires_grad is None else requires_grad
    state = torch.random.get_rng_state()
    torch.manual_seed(SAMPLE_SEED)
    try:
        found = []
        for sample in opinfo.sample_inputs("cpu", dtype, requires_grad=grad):
            found.append(sample)
            if len(found) == MAX_SAMPLES:
                break
        return found
    finally:
        torch.random.set_rng_state(state)


def size_of(sample) -> int:
    return sum(t.numel() for t in _tensors((sample.input, sample.args, sample.kwargs)))


def drawable(sample) -> bool:
    """A sample a short script can hold: small, dense, real tensors, none of them empty."""
    tensors = _tensors((sample.input, sample.args, sample.kwargs))
    return (sum(t.numel() for t in tensors) <= MAX_ELEMENTS
            and all(t.layout == torch.strided and not t.dtype.is_complex and t.numel() for t in tensors))


@functools.lru_cache(maxsize=None)
def catalogue() -> Catalogue:
    """The ops of this torch's op_db that can be drawn, classified by their first small sample."""
    try:
        from torch.testing._internal.common_methods_invocations import op_db
    except Exception as exc:  # an old torch's op_db, or one of its dependencies missing
        return Catalogue(error=f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:300])
    finally:
        _allow_backend_flags()
    found = Catalogue()
    for opinfo in op_db:
        path = _public_path(opinfo)
        if path is None or opinfo.name.startswith("_") or torch.float32 not in opinfo.supported_dtypes("cpu"):
            found.left_out += 1
            continue
        try:
            samples = [s for s in samples_of(opinfo) if drawable(s)]
            with _Tags() as tags:
                outputs = _same_call(opinfo, path, samples[0])
        except Exception:  # its samples do not run here, or its public name is not what OpInfo calls
            found.left_out += 1
            continue
        classes = classify(opinfo, samples[0], outputs, tags.tags)
        if in_place_method(opinfo):
            classes.add("inplace")
        found.entries[(opinfo.name, opinfo.variant_test_name)] = Entry(opinfo, path, frozenset(classes), len(samples))
    return found


def _same_call(opinfo, path: str, sample) -> list:
    """The outputs of OpInfo's own call of `sample`, checked against the call of its public name
    (for a random op: the same shapes and dtypes; else the same values)."""
    function = functools.reduce(getattr, path.split(".")[1:], torch)
    torch.manual_seed(SAMPLE_SEED)
    outputs = _tensors(opinfo(sample.input, *sample.args, **sample.kwargs))
    torch.manual_seed(SAMPLE_SEED)
    public = _tensors(function(sample.input, *sample.args, **sample.kwargs))
    same = len(public) == len(outputs) and all(
        a.shape == b.shape and a.dtype == b.dtype and (torch.equal(a, b) or a.dtype.is_floating_point)
        for a, b in zip(public, outputs))
    if not same:
        raise ValueError(f"{path} is not what OpInfo {opinfo.name} calls")
    return outputs


def in_place_method(opinfo) -> str | None:
    """The name of the op's in-place Tensor method (`add_`), where it has one."""
    name = getattr(opinfo.inplace_variant, "__name__", "")
    return name if name.endswith("_") and callable(getattr(torch.Tensor, name, None)) else None


def _allow_backend_flags() -> None:
    """torch's test utilities freeze torch.backends' flags when imported; a case's own code must
    find them as a plain process does."""
    flag = "__allow_nonbracketed_mutation_flag"
    if hasattr(torch.backends, flag):
        setattr(torch.backends, flag, True)


# --- one drawn call, as code ---------------------------------------------------------------------------------

VARIANTS = ("function", "inplace")


@dataclasses.dataclass(frozen=True)
class OpCall:
    """An op of the catalogue, its `sample`-th small sample, called as a function or in place."""
    op: str
    op_variant: str = ""
    sample: int = 0
    variant: str = "function"
    dtype: str = "float32"

    def entry(self) -> Entry:
        return catalogue().entries[(self.op, self.op_variant)]

    def sample_input(self):
        entry = self.entry()
        dtype = getattr(torch, self.dtype)
        samples = [s for s in samples_of(entry.opinfo, dtype) if drawable(s)]
        return samples[min(self.sample, len(samples) - 1)]

    def materialise(self) -> "Materialised":
        """The sample as literal tensors named x0, x1, ... and the call as an expression of them."""
        entry, sample = self.entry(), self.sample_input()
        names: list[tuple[str, torch.Tensor]] = []

        def code(value) -> str:
            if isinstance(value, torch.Tensor):
                names.append((f"x{len(names)}", value))
                return names[-1][0]
            if isinstance(value, (list, tuple)) and not isinstance(value, torch.Size):
                inner = ", ".join(code(v) for v in value)
                return f"[{inner}]" if isinstance(value, list) else f"({inner}{',' if len(value) == 1 else ''})"
            return literal(value)

        first = code(sample.input)
        args = [code(a) for a in sample.args] + [f"{k}={code(v)}" for k, v in sample.kwargs.items()]
        if self.variant == "inplace":
            method = in_place_method(entry.opinfo)
            call = f"{first}.{method}({', '.join(args)})"
        else:
            call = f"{entry.path}({', '.join([first, *args])})"
        return Materialised(call, [(name, tensor_source(t), t.requires_grad) for name, t in names])


@dataclasses.dataclass(frozen=True)
class Materialised:
    call: str  # "torch.add(x0, x1, alpha=2)"
    inputs: list  # (name, constructor source, requires_grad)

    @property
    def names(self) -> list[str]:
        return [name for name, _, _ in self.inputs]


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


def tensor_source(tensor: torch.Tensor) -> str:
    """`torch.tensor(<values>, dtype=...)` holding the tensor's exact values (float32 round-trips
    through Python's float repr), requiring grad where it does."""
    values = tensor.detach().tolist()
    if tensor.dtype.is_complex:
        raise NotMaterialisable("complex tensors are not drawn")
    text = repr(values).replace("inf", "float('inf')").replace("nan", "float('nan')")
    grad = ", requires_grad=True" if tensor.requires_grad else ""
    return f"torch.tensor({text}, dtype={tensor.dtype}{grad})"
