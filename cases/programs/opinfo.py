"""The ops of torch's own OpInfo database (`op_db`) that programs can draw, and their classes.

Each row explores what its own torch ships tests for: the ops, their sample inputs, which dtypes and
autograd they support, their tolerances. `catalogue()` keeps the ops whose callable has a public
name, whose samples run on the CPU in float32 with that name as OpInfo calls them, and sorts them
into classes by what their first small sample does:

    random          an aten op it dispatches carries the `nondeterministic_seeded` tag
    inplace         it has an in-place Tensor method (`x.add_(...)`): the program mutates a tensor
    view            an output shares its storage with an input
    reduction       an OpInfo of the `ReductionOpInfo` kind
    dtype_changing  an output's dtype is not the first input's
    other           anything else (pointwise, linear algebra, ...)

Sorting runs every op once: that happens in a process of its own (`python opinfo.py OUT`, about
10 s), never in the process cases are forked from, where a kernel would start an OpenMP team that
a forked child then hangs on. Its result is kept in the venv per torch and per this file's text.
`op_db` itself needs `expecttest`; where it cannot be read, `catalogue().error` says why.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import warnings

import torch

OP_CLASSES = ("random", "inplace", "view", "reduction", "dtype_changing", "other")
SAMPLE_SEED = 0  # the samples of an op are drawn from this seed: the same tensors on every run of a row
MAX_SAMPLES = 12  # samples of an op considered (the first ones: OpInfo lists the plain shapes first)
MAX_ELEMENTS = 128  # a sample with more elements in all is not drawn (its script would not be short)
# Public namespaces an op's callable is looked up in, by the OpInfo's name.
NAMESPACES = ("torch", "torch.nn.functional", "torch.special", "torch.linalg", "torch.fft")
# Compiled kernels may reorder a reduction: looser than assert_close's float32 defaults, as in
# harness.casekit.TOLERANCES (each program's script states the figures it compares with).
DEFAULT_TOLERANCES = {"float32": dict(rtol=1e-4, atol=1e-5), "float64": dict(rtol=1e-7, atol=1e-7),
                      "bfloat16": dict(rtol=2e-2, atol=2e-2), "float16": dict(rtol=1e-2, atol=1e-2)}


@dataclasses.dataclass(frozen=True)
class Entry:
    """One OpInfo of the catalogue: its name and variant, the public name of its callable
    ("torch.nn.functional.dropout"), its classes and how many of its samples can be drawn."""
    name: str
    variant: str
    path: str | None  # None: only its in-place Tensor method is drawn
    classes: frozenset
    samples: int

    @property
    def opinfo(self):
        return op_infos()[(self.name, self.variant)]


@dataclasses.dataclass
class Catalogue:
    entries: dict = dataclasses.field(default_factory=dict)  # (name, variant) -> Entry
    error: str | None = None  # why op_db could not be read
    left_out: int = 0  # ops of op_db not drawn (no public callable, no small float32 sample on the CPU)

    def of_class(self, name: str) -> list[tuple[str, str]]:
        return sorted(key for key, entry in self.entries.items() if name in entry.classes)


# --- reading op_db ---------------------------------------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def op_infos() -> dict:
    """op_db by (name, variant_test_name); importing it runs no kernel."""
    from torch.testing._internal.common_methods_invocations import op_db

    _allow_backend_flags()
    return {(op.name, op.variant_test_name): op for op in op_db}


def _allow_backend_flags() -> None:
    """torch's test utilities freeze torch.backends' flags when imported; a case's own code must
    find them as a plain process does."""
    flag = "__allow_nonbracketed_mutation_flag"
    if hasattr(torch.backends, flag):
        setattr(torch.backends, flag, True)


@functools.lru_cache(maxsize=None)
def catalogue() -> Catalogue:
    """The ops of this torch's op_db that can be drawn, from the survey (kept in the venv)."""
    found = _survey_file()
    if found.get("error"):
        return Catalogue(error=found["error"])
    # Read here, at collection, once per worker, so that a case's process need not; except where a GPU
    # is visible: importing op_db then initialises CUDA (common_device_type asks Triton for the GPU's
    # capability), which a process that forks cases must not do (harness.plugin.cudaguard). Each
    # case's process then reads it when it draws (the survey, a process of its own, read it already).
    if not torch.cuda.is_available():
        try:
            op_infos()
        except Exception as exc:
            return Catalogue(error=_describe(exc))
    entries = {(e["name"], e["variant"]): Entry(e["name"], e["variant"], e["path"], frozenset(e["classes"]),
                                                e["samples"]) for e in found["entries"]}
    return Catalogue(entries, None, found["left_out"])


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0]}"[:300]


def _survey_file() -> dict:
    """The survey of this torch, made by a process of its own when the venv has none yet."""
    digest = hashlib.sha256(pathlib.Path(__file__).read_bytes()).hexdigest()[:12]
    name = f"harness-op-survey-{torch.__version__}-{digest}.json".replace("+", "_")
    for folder in (pathlib.Path(sys.prefix), pathlib.Path(tempfile.gettempdir())):
        if (folder / name).is_file():
            return json.loads((folder / name).read_text())
    with tempfile.TemporaryDirectory(prefix="harness-op-survey-") as work:
        out = pathlib.Path(work) / name
        done = subprocess.run([sys.executable, __file__, str(out)], capture_output=True, text=True)
        if done.returncode != 0 or not out.is_file():
            tail = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
            return {"error": f"the op_db survey failed: {tail}"[:300]}
        text = out.read_text()
    if json.loads(text).get("error"):  # not kept: a missing dependency installed later must be seen
        return json.loads(text)
    for folder in (pathlib.Path(sys.prefix), pathlib.Path(tempfile.gettempdir())):
        try:  # written whole, then renamed: another process may be writing it too
            partial = folder / f"{name}.{os.getpid()}"
            partial.write_text(text)
            partial.replace(folder / name)
            break
        except OSError:
            continue
    return json.loads(text)


def survey() -> dict:
    """Every op of op_db run on its small samples, classified (a process of its own). An op is drawn
    called through its public name; one that only has an in-place Tensor method (`x.cauchy_()`) is
    drawn called in place."""
    try:
        ops = op_infos()
    except Exception as exc:  # an old torch's op_db, or one of its dependencies missing
        return {"error": _describe(exc)}
    entries, left_out = [], 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the ops' own deprecation notes: nothing a case shows
        for (name, variant), opinfo in ops.items():
            path, method = _public_path(opinfo), in_place_method(opinfo)
            try:
                if (path is None and method is None) or name.startswith("_") \
                        or torch.float32 not in opinfo.supported_dtypes("cpu"):
                    raise ValueError("not drawn")
                samples = [s for s in samples_of(opinfo) if drawable(s)]
                with _Tags() as tags:
                    outputs = _same_call(opinfo, path, method, samples[0])
                seeded = _seeded(opinfo, samples[1:]) or torch.Tag.nondeterministic_seeded in tags.tags
            except Exception:  # its samples do not run here, or its public name is not what OpInfo calls
                left_out += 1
                continue
            classes = classify(opinfo, samples[0], outputs, tags.tags) | ({"random"} if seeded else set())
            if method:
                classes.add("inplace")
            entries.append({"name": name, "variant": variant, "path": path, "classes": sorted(classes),
                            "samples": len(samples)})
    return {"torch": torch.__version__, "entries": entries, "left_out": left_out}


def _seeded(opinfo, samples) -> bool:
    """Whether any of the samples draws random numbers (dropout draws none with p=0, its first sample)."""
    for sample in samples:
        try:
            with _Tags() as tags:
                opinfo(sample.input, *sample.args, **sample.kwargs)
        except Exception:
            continue
        if torch.Tag.nondeterministic_seeded in tags.tags:
            return True
    return False


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
    # tree_flatten, not tree_leaves: torch 2.1 has no tree_leaves
    return [t for t in torch.utils._pytree.tree_flatten(value)[0] if isinstance(t, torch.Tensor)]


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


def _same_call(opinfo, path: str | None, method: str | None, sample) -> list:
    """The outputs of OpInfo's own call of `sample`, checked against the call of its public name, or
    of its in-place method on a copy (for a random op: the same shapes and dtypes; else the same values)."""
    torch.manual_seed(SAMPLE_SEED)
    outputs = _tensors(opinfo(sample.input, *sample.args, **sample.kwargs))
    torch.manual_seed(SAMPLE_SEED)
    if path is not None:
        public = _tensors(functools.reduce(getattr, path.split(".")[1:], torch)(sample.input, *sample.args,
                                                                                  **sample.kwargs))
    else:
        public = _tensors(getattr(sample.input.detach().clone(), method)(*sample.args, **sample.kwargs))
    same = len(public) == len(outputs) and all(
        a.shape == b.shape and a.dtype == b.dtype and (torch.equal(a, b) or a.dtype.is_floating_point)
        for a, b in zip(public, outputs, strict=True))
    if not same:
        raise ValueError(f"{path or method} is not what OpInfo {opinfo.name} calls")
    return outputs


def in_place_method(opinfo) -> str | None:
    """The name of the op's in-place Tensor method (`add_`), where it has one."""
    name = getattr(opinfo.inplace_variant, "__name__", "")
    return name if name.endswith("_") and callable(getattr(torch.Tensor, name, None)) else None


# --- samples --------------------------------------------------------------------------------------------------

def samples_of(opinfo, dtype=torch.float32, requires_grad=None) -> list:
    """The op's first MAX_SAMPLES sample inputs on the CPU, drawn from SAMPLE_SEED (OpInfo's
    make_tensor draws from the global generator, whose state is left as it was)."""
    grad = opinfo.supports_autograd if requires_grad is None else requires_grad
    state = torch.random.get_rng_state()
    torch.manual_seed(SAMPLE_SEED)
    try:
        # The OpInfo's own function: its sample_inputs() wrapper inspects the call stack for the
        # running test on every call (seconds over the database, under pytest's deep stack). Small
        # inputs where the function offers them (the elementwise ones: 5x5 instead of 20x20).
        try:
            return _first(opinfo.sample_inputs_func(opinfo, "cpu", dtype, grad, small_inputs_only=True))
        except TypeError:  # a function without **kwargs
            torch.manual_seed(SAMPLE_SEED)
            return _first(opinfo.sample_inputs_func(opinfo, "cpu", dtype, grad))
    finally:
        torch.random.set_rng_state(state)


def _first(samples) -> list:
    found = []
    for sample in samples:
        found.append(sample)
        if len(found) == MAX_SAMPLES:
            break
    return found


def drawable(sample) -> bool:
    """A sample a short script can hold: small, dense, real tensors, none of them empty."""
    tensors = _tensors((sample.input, sample.args, sample.kwargs))
    return (sum(t.numel() for t in tensors) <= MAX_ELEMENTS
            and all(t.layout == torch.strided and not t.dtype.is_complex and t.numel() for t in tensors))


def declared_tolerance(opinfo, dtype: str) -> dict:
    """The tolerance to compare compiled with eager for this op: OpInfo's own override for
    inductor's OpInfo test on the CPU and this dtype where it declares a looser one, else the default."""
    from torch.testing._internal.common_device_type import toleranceOverride
    from torch.testing._internal.opinfo.core import DecorateInfo

    chosen = dict(DEFAULT_TOLERANCES.get(dtype, DEFAULT_TOLERANCES["float32"]))
    for info in opinfo.decorators:
        if not (isinstance(info, DecorateInfo) and info.cls_name == "TestInductorOpInfo"
                and info.device_type in (None, "cpu")):
            continue
        for decorator in info.decorators:
            declared = getattr(decorator, "d", {}).get(getattr(torch, dtype)) if isinstance(
                decorator, toleranceOverride) else None
            if declared is not None:
                chosen = {"rtol": max(chosen["rtol"], declared.rtol), "atol": max(chosen["atol"], declared.atol)}
    return chosen


# --- what a property case asks of it ----------------------------------------------------------------------------

def need_op_db() -> None:
    """Skips the case, naming why, where this torch's op_db cannot be read."""
    import pytest

    if catalogue().error:
        pytest.skip(f"missing: torch's OpInfo database (op_db) cannot be read on this torch: {catalogue().error}")


def about() -> dict:
    """What a property's record says of the ops this torch offers: how many, per class, left out."""
    found = catalogue()
    return {"op_db": {"ops": len(found.entries), "left_out": found.left_out,
                      "by_class": {name: len(found.of_class(name)) for name in OP_CLASSES}}}


if __name__ == "__main__":  # the survey, in a process of its own: python opinfo.py OUT
    pathlib.Path(sys.argv[1]).write_text(json.dumps(survey()))
