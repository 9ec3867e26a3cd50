"""A case's identity: `family/variant[parameters]`, the one name that records, the regression table,
reproductions and bisect use.

The family is the case file without `test_` (`cases/test_checkpoint.py` -> `checkpoint`), the
variant the test function without `test_`. The parameters appear in one order whatever order the
case's decorators stack them in: the shared ones first (CASE_PARAMS), then the case's own in the
order of its signature, e.g. `autocast/autocast_inside_checkpointed_function[cpu-bf16-inductor-fullgraph]`.

A case id is built here (case_identity) and read back here only (parse); so is pytest's node id of a
case (`cases/test_checkpoint.py::test_plain_checkpoint[...]`: nodeid_file, is_nodeid).
"""

from __future__ import annotations

import ast
import dataclasses
import difflib
import inspect
import os
import pathlib
from typing import TypedDict

from harness.core import paths
from harness.core.errors import BadInput

# Recorded under `params` by name; the rest go to `params["extra"]`. Also the order of the id.
CASE_PARAMS = ("device", "dtype", "backend", "fullgraph")


TEST_PREFIX = "test_"  # of a case file and of a case's test function


class CaseIdentity(TypedDict):
    """Who a collected case is, as records carry it."""
    case: str  # the id
    family: str
    params: dict  # the shared parameters by name, `variant`, and the case's own under `extra`
    nodeid: str  # pytest's


@dataclasses.dataclass(frozen=True)
class CaseId:
    """A case id's parts: `family/variant[params]` (params: the text between the brackets, if any)."""
    family: str
    variant: str
    params: str | None = None

    @property
    def in_family(self) -> str:
        """`variant[params]`: the id within its family (JUnit's testcase name)."""
        return self.variant + (f"[{self.params}]" if self.params is not None else "")

    def __str__(self) -> str:
        return f"{self.family}/{self.in_family}"


def parse(case_id: str) -> CaseId:
    """The parts of a case id; BadInput for a text that is no case id."""
    family, slash, rest = case_id.partition("/")
    variant, bracket, params = rest.partition("[")
    if not slash or not family or not variant or (bracket and not params.endswith("]")):
        raise BadInput(f"unknown case {case_id!r}: not a case id (expected family/variant[params])")
    return CaseId(family, variant, params[:-1] if bracket else None)


def without_test_prefix(name: str) -> str:
    return name[len(TEST_PREFIX):] if name.startswith(TEST_PREFIX) else name


def family_of(path: str | os.PathLike) -> str:
    """A case file's family: `cases/test_checkpoint.py` -> `checkpoint`."""
    return without_test_prefix(pathlib.PurePath(str(path)).stem)


def source_family(path: str) -> str | None:
    """The family whose case file a source is, by its path from the checkout's root ('/'-separated, as
    results keep their sources): `cases/test_checkpoint.py` -> `checkpoint`; None for a source every
    family shares (the harness, cases/conftest.py, cases/programs/)."""
    pure = pathlib.PurePosixPath(path)
    return family_of(pure) if pure.parent.name == "cases" and pure.name.startswith(TEST_PREFIX) else None


def family_files(cases: pathlib.Path = paths.CASES) -> dict[str, pathlib.Path]:
    """Every family and its case file, by family name."""
    return {family_of(p): p for p in sorted(pathlib.Path(cases).glob(f"{TEST_PREFIX}*.py"))}


def nodeid_file(nodeid: str) -> str:
    """The file part of a node id (`cases/test_x.py::test_y[...]` -> `cases/test_x.py`); a path is its own."""
    return nodeid.partition("::")[0]


def is_nodeid(text: str) -> bool:
    """Whether `text` names a test in a file (a node id), not a file or directory."""
    return "::" in text


def function_name(item) -> str:
    """The test function of a collected item, without its parameters."""
    return getattr(item, "originalname", None) or item.name.partition("[")[0]


class UnknownCase(BadInput):
    """No case has this id; the message lists the closest ones."""

    def __init__(self, case_id: str, ids: list[str]):
        close = difflib.get_close_matches(case_id, ids, n=5, cutoff=0.6)
        close += [c for c in difflib.get_close_matches(case_id, ids, n=5, cutoff=0.0) if c not in close]
        super().__init__(f"unknown case {case_id!r}; closest case ids:\n" + "\n".join(f"  {c}" for c in close[:5]))


def check_exists(case_id: str, cases: pathlib.Path = paths.CASES) -> None:
    """BadInput unless the family and variant of the id exist in cases/, read from the source: a
    mistyped id is refused before any venv is built (its parameters are checked by collection)."""
    found = parse(case_id)
    files = family_files(cases)
    if found.family not in files:
        close = difflib.get_close_matches(found.family, list(files), n=3)
        raise BadInput(f"unknown case family {found.family!r} in {case_id!r} (families: {', '.join(close or files)})")
    tree = ast.parse(files[found.family].read_text())
    variants = [without_test_prefix(node.name) for node in tree.body
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith(TEST_PREFIX)]
    if found.variant not in variants:
        close = difflib.get_close_matches(found.variant, variants, n=3)
        hint = f" (did you mean {', '.join(f'{found.family}/{c}' for c in close)}?)" if close else ""
        raise BadInput(f"unknown case {case_id!r}: {files[found.family].relative_to(cases.parent)} has no "
                       f"{TEST_PREFIX}{found.variant}{hint}")


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
    groups: list[tuple[str, ...]] = []
    seen: set[str] = set()
    for name in callspec.params:
        if name in seen:
            continue
        names = together.get(name, (name,))
        seen.update(names)
        groups.append(names)
    ids = list(getattr(callspec, "_idlist", ()))
    if len(ids) != len(groups):  # a parametrization we cannot map: keep pytest's own id
        return [(tuple(callspec.params), callspec.id)]
    return list(zip(groups, ids, strict=True))


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


def case_identity(item) -> CaseIdentity:
    """`case` (the id), `family`, `params` and pytest's `nodeid` of a collected case."""
    family = family_of(item.path)
    variant = without_test_prefix(function_name(item))
    callspec = getattr(item, "callspec", None)
    raw = dict(callspec.params) if callspec else {}
    params = {key: _plain(raw[key]) for key in CASE_PARAMS if key in raw}
    params["variant"] = variant
    extra = {k: _plain(v) for k, v in raw.items() if k not in CASE_PARAMS}
    if extra:
        params["extra"] = extra
    case_id = CaseId(family, variant, canonical_params_id(item) if callspec else None)
    return CaseIdentity(case=str(case_id), family=family, params=params, nodeid=item.nodeid)


COLLECTION_ERROR = "collection-error"  # the variant of a case file that cannot be collected: no test function's name


def collection_identity(path: str) -> CaseIdentity:
    """The record's identity of a case file that cannot be collected (`cases/test_x.py` -> `x/collection-error`):
    its node id is the file, which a later run collects again."""
    case_id = CaseId(family_of(path), COLLECTION_ERROR)
    return CaseIdentity(case=str(case_id), family=case_id.family, params={"variant": COLLECTION_ERROR}, nodeid=path)


def identity_from_nodeid(nodeid: str) -> CaseIdentity:
    """What a record can say of a case known only by its node id (its process died before
    telling more): its parameters in pytest's order."""
    path, _, name = nodeid.partition("::")
    function, bracket, params = name.partition("[")
    case_id = CaseId(family_of(path), without_test_prefix(function), params[:-1] if bracket else None)
    return CaseIdentity(case=str(case_id), family=case_id.family, params={"variant": case_id.variant}, nodeid=nodeid)
