"""A case's identity: `family/variant[parameters]`, the one name that records, the regression table,
reproductions and bisect use.

The family is the case file without `test_` (`cases/test_checkpoint.py` -> `checkpoint`), the
variant the test function without `test_`. The parameters appear in one order whatever order the
case's decorators stack them in: the shared ones first (CASE_PARAMS), then the case's own in the
order of its signature, e.g. `autocast/autocast_inside_checkpointed_function[cpu-bf16-inductor-fullgraph]`.
"""

from __future__ import annotations

import inspect
import pathlib

# Recorded under `params` by name; the rest go to `params["extra"]`. Also the order of the id.
CASE_PARAMS = ("device", "dtype", "backend", "fullgraph")


def without_test_prefix(name: str) -> str:
    return name[len("test_"):] if name.startswith("test_") else name


def family_of(path) -> str:
    return without_test_prefix(pathlib.PurePath(str(path)).stem)


def _plain(value):
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return str(value).replace("torch.", "")


def _id_groups(item) -> list[tuple[tuple[str, ...], str]]:
    """(argnames, id) of each parametrization of the item, in the order pytest applied them:
    one entry per parametrize call (`"device,dtype"` is one call with one id)."""
    callspec = item.callspec
    together = {}
    for marker in item.iter_markers("parametrize"):
        argnames = marker.args[0] if marker.args else marker.kwargs["argnames"]
        names = tuple(n.strip() for n in argnames.split(",")) if isinstance(argnames, str) else tuple(argnames)
        for name in names:
            together[name] = names
    groups, seen = [], set()
    for name in callspec.params:
        if name in seen:
            continue
        names = together.get(name, (name,))
        seen.update(names)
        groups.append(names)
    ids = list(getattr(callspec, "_idlist", ()))
    if len(ids) != len(groups):  # a parametrization we cannot map: keep pytest's own id
        return [(tuple(callspec.params), callspec.id)]
    return list(zip(groups, ids))


def canonical_params_id(item) -> str:
    """The item's parameter ids, shared parameters first, then the case's in signature order."""
    try:
        signature = list(inspect.signature(item.function).parameters)
    except (TypeError, ValueError):
        signature = []

    def rank(names):
        return min(CASE_PARAMS.index(n) if n in CASE_PARAMS else
                   len(CASE_PARAMS) + (signature.index(n) if n in signature else len(signature))
                   for n in names)

    groups = sorted(_id_groups(item), key=lambda group: rank(group[0]))
    return "-".join(text for _, text in groups)


def case_identity(item) -> dict:
    """`case` (the id), `family`, `params` and pytest's `nodeid` of a collected case."""
    family = family_of(item.path)
    variant = without_test_prefix(getattr(item, "originalname", None) or item.name.split("[")[0])
    callspec = getattr(item, "callspec", None)
    raw = dict(callspec.params) if callspec else {}
    params = {key: _plain(raw[key]) for key in CASE_PARAMS if key in raw}
    params["variant"] = variant
    extra = {k: _plain(v) for k, v in raw.items() if k not in CASE_PARAMS}
    if extra:
        params["extra"] = extra
    case_id = f"{family}/{variant}" + (f"[{canonical_params_id(item)}]" if callspec else "")
    return {"case": case_id, "family": family, "params": params, "nodeid": item.nodeid}


def identity_from_nodeid(nodeid: str) -> dict:
    """What a record can say of a case known only by its node id (its process died before
    telling more)."""
    path, _, name = nodeid.partition("::")
    function, _, params = name.partition("[")
    variant = without_test_prefix(function)
    family = family_of(path)
    return {"case": f"{family}/{variant}" + (f"[{params}" if params else ""), "family": family,
            "params": {"variant": variant}, "nodeid": nodeid}
