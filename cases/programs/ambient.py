"""The ambient states a torch version lets a user set, read from that torch's own namespace, not listed
by hand: a newer torch's new switches are found without a code change.

A setter is a process-wide switch with a getter to restore it from:

- a function pair in `torch` or a `torch.backends.*` module: `set_X` read back by `get_X`, `is_X` or
  `is_X_enabled`; `use_X` by `are_X_enabled` or `is_X_enabled`; `enable_X` by `X_enabled`;
- a settable attribute of a `torch.backends.*` module (its class's data descriptors: `enabled`,
  `allow_tf32`, `benchmark`, ...).

The values each is drawn at come from its current value's type and from torch: a bool its negation; a
floating dtype every other floating dtype torch defines; an int 1 (2 where it is 1); a string the quoted
words of the setter's docstring; a device the other devices this machine has. Each value is tried: set,
read back, restored, and every other setter and the torch-function mode stack checked to read as before.
A setter none of whose values passes is left out with the reason (no getter; it refuses every value; it
cannot be restored; it leaves a trace). The probe changes process state while it runs (and a setter that
cannot be restored changes it for good): run it in a process of its own, `python ambient.py`, which
prints the JSON of `survey()`.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import json
import pkgutil
import re
import warnings

import torch

# A getter name for each setter name (first found wins), from the setter's prefix.
GETTER_NAMES = {
    "set_": lambda rest: [f"get_{rest}", f"is_{rest}", f"is_{rest}_enabled"],
    "use_": lambda rest: [f"are_{rest}_enabled", f"is_{rest}_enabled"],
    "enable_": lambda rest: [f"{rest}_enabled"],
}
DEVICE_TYPES = ("cpu", "cuda")  # the devices the matrix's sessions run on, for a per-device setting
QUOTED_WORD = re.compile(r"""["']([A-Za-z_][A-Za-z0-9_]*)["']""")


@dataclasses.dataclass(frozen=True)
class Setter:
    """One switch: where it lives, how a script sets and reads it, the values it is drawn at."""

    name: str  # as a user writes it: "torch.set_float32_matmul_precision", "torch.backends.mkldnn.enabled"
    set_source: str  # a callable of one value, as source: "torch.set_float32_matmul_precision"
    get_source: str  # a callable of none, as source: "torch.get_float32_matmul_precision"
    values: tuple = ()  # each a value's source (repr), other than the default
    left_out: str | None = None  # why it is not drawn
    # A backends module's flag its flags() context manager sets: (the module's source, the flag's name).
    # Torch's test utilities, which load the op database, forbid setting such a flag any other way.
    flag: tuple = ()

    def entered(self, value: str) -> str:
        """A context manager's source that sets it to `value` inside and restores it after (a script
        defines `switched` and `flag_set`: cases/programs/recompile.py's HELPERS)."""
        if self.flag:
            module, name = self.flag
            return f"flag_set({module}, {name!r}, {value})"
        return f"switched({self.set_source}, {self.get_source}, {value})"

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, found: dict) -> Setter:
        return cls(**{**found, "values": tuple(found["values"]), "flag": tuple(found.get("flag", ()))})


def namespaces() -> list[tuple[str, object]]:
    """`torch` and each public `torch.backends.*` module this torch ships (imported: one that fails to
    import on this machine is not a namespace here)."""
    found: list[tuple[str, object]] = [("torch", torch)]
    for module in pkgutil.iter_modules(torch.backends.__path__):
        if module.name.startswith("_"):
            continue
        try:
            found.append((f"torch.backends.{module.name}", importlib.import_module(f"torch.backends.{module.name}")))
        except Exception:  # noqa: BLE001 (a backend's module may need what this machine lacks)
            continue
    return found


def _function_pairs(where: str, namespace) -> list[tuple[str, str, str | None]]:
    """(name, setter source, getter source or None) for each public setter function."""
    pairs = []
    for name in sorted(dir(namespace)):
        prefix = next((p for p in GETTER_NAMES if name.startswith(p)), None)
        if prefix is None or not callable(getattr(namespace, name, None)):
            continue
        getter = next((g for g in GETTER_NAMES[prefix](name[len(prefix):]) if callable(getattr(namespace, g, None))),
                      None)
        if getter is None and inspect.isclass(getattr(namespace, name)):
            continue  # a context manager's class (torch.enable_grad), not a switch: set_grad_enabled has a getter
        if getter and _takes_a_device(getattr(namespace, getter)):  # torch.set_autocast_dtype(device_type, ...)
            pairs += [(f"{where}.{name}({device!r}, ...)", f"functools.partial({where}.{name}, {device!r})",
                       f"functools.partial({where}.{getter}, {device!r})") for device in DEVICE_TYPES]
            continue
        pairs.append((f"{where}.{name}", f"{where}.{name}", f"{where}.{getter}" if getter else None))
    return pairs


def _takes_a_device(getter) -> bool:
    """A getter that reads a per-device setting (its one argument the device type)."""
    try:
        getter()
    except TypeError as error:
        return "device_type" in str(error)
    except Exception:  # noqa: BLE001 (it raised for another reason: probe() says which)
        return False
    return False


def _attribute_pairs(where: str, namespace) -> list[tuple[str, str, str | None]]:
    """(name, setter source, getter source) for each settable attribute of a backends module."""
    if where == "torch":
        return []
    return [(f"{where}.{name}", f"functools.partial(setattr, {where}, {name!r})", f"(lambda: {where}.{name})")
            for name, descriptor in sorted(vars(type(namespace)).items())
            if not name.startswith("_") and hasattr(descriptor, "__set__") and hasattr(descriptor, "__get__")
            and not isinstance(descriptor, property)]  # a property here is read-only facts (available_dsls)


def _flags(where: str, namespace) -> dict[str, tuple[str, str]]:
    """By setter name: the flags a backends module's flags() context manager takes (cudnn's, mkldnn's)."""
    flags = getattr(namespace, "flags", None)
    if where == "torch" or not callable(flags):
        return {}
    try:
        taken = inspect.signature(flags).parameters
    except (TypeError, ValueError):
        return {}
    return {f"{where}.{name}": (where, name) for name in taken if hasattr(namespace, name)}


def _resolve(source: str):
    import functools  # noqa: F401 (named by attribute setters' source)

    return eval(source, {"torch": torch, "functools": functools})  # noqa: S307 (our own source text)


def candidates(current, setter) -> list:
    """The values to try, from the current value's type and from torch."""
    if isinstance(current, bool) or current is None:
        return [not current] if isinstance(current, bool) else [True, False]
    if isinstance(current, torch.dtype):
        # the floating dtypes torch computes in (float8 and float4 are storage formats: no op runs in them)
        dtypes = {d for d in vars(torch).values() if isinstance(d, torch.dtype) and d.is_floating_point
                  and d.itemsize >= 2}
        return sorted((d for d in dtypes if d != current), key=str)
    if isinstance(current, int):
        return [2 if current == 1 else 1]
    if isinstance(current, str):
        words = QUOTED_WORD.findall(inspect.getdoc(setter) or "")
        return list(dict.fromkeys(w for w in words if w != current))
    if isinstance(current, torch.device):
        # the devices that compute here ("meta" computes nothing to compare)
        here = ["cpu", *(["cuda"] if torch.cuda.is_available() else [])]
        return [torch.device(d) for d in here if d != current.type]
    return []


def _source(value) -> str:
    return repr(value) if not isinstance(value, torch.device) else f"torch.device({value.type!r})"


def _snapshot(getters: list) -> list:
    states = []
    for get in getters:
        try:
            states.append(repr(get()))
        except Exception as error:  # noqa: BLE001 (a getter that raises reads as its error)
            states.append(type(error).__name__)
    return [*states, torch._C._len_torch_function_stack()]


def _said(error: Exception) -> str:
    """An error as its type and its first line (none where it says nothing)."""
    return f"{type(error).__name__}: {(str(error).splitlines() or [''])[0]}"


def probe(name: str, set_source: str, get_source: str | None, others: list) -> Setter:
    """One setter's values, each tried and restored; `others`: every getter, read before and after."""
    if get_source is None:
        return Setter(name, set_source, "", left_out="no getter to restore it from")
    set_to, get = _resolve(set_source), _resolve(get_source)
    try:
        before = get()
    except Exception as error:  # noqa: BLE001
        return Setter(name, set_source, get_source, left_out=f"its getter raises: {type(error).__name__}: {error}")
    tried = candidates(before, set_to)
    if not tried:
        shown = f" {before!r}" if isinstance(before, (bool, int, str, torch.device, torch.dtype)) else ""
        why = f"no other value derivable from its {type(before).__name__} value{shown}"
        return Setter(name, set_source, get_source, left_out=why)
    values, refusals = [], []
    for value in tried:
        reference = _snapshot(others)
        try:
            set_to(value)
        except Exception as error:  # noqa: BLE001 (a value this setter refuses is not drawn)
            refusals.append(_said(error))
            continue
        read = get()
        try:
            set_to(before)
        except Exception as error:  # noqa: BLE001
            return Setter(name, set_source, get_source,
                          left_out=f"cannot be restored: {_said(error)}")
        if _snapshot(others) != reference:
            return Setter(name, set_source, get_source, left_out=f"setting it to {value!r} and back leaves a trace "
                                                                 "(a getter or the mode stack reads otherwise)")
        if read == value or (isinstance(value, torch.device) and read.type == value.type):
            values.append(_source(value))
    if not values:
        why = refusals[0] if refusals else "its getter never reads back what it was set to"
        return Setter(name, set_source, get_source, left_out=f"refuses every value derived: {why}")
    return Setter(name, set_source, get_source, values=tuple(values))


def survey() -> dict:
    """Every setter of this torch: drawn (with its values) or left out (with why)."""
    found = namespaces()
    pairs = [pair for where, namespace in found
             for pair in (*_function_pairs(where, namespace), *_attribute_pairs(where, namespace))]
    flags = {name: flag for where, namespace in found for name, flag in _flags(where, namespace).items()}
    getters = [_resolve(get) for _, _, get in pairs if get is not None]
    with warnings.catch_warnings():  # the deprecated setters say so at every call: still a user's switches
        warnings.simplefilter("ignore")
        setters = [dataclasses.replace(probe(name, set_source, get_source, getters), flag=flags.get(name, ()))
                   for name, set_source, get_source in pairs]
    return {"torch": torch.__version__, "setters": [s.as_dict() for s in setters]}


if __name__ == "__main__":
    print(json.dumps(survey(), indent=1))
