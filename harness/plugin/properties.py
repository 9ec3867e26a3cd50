"""Property-based cases: hypothesis draws small programs around a feature; each one is checked
against eager from a reset Dynamo.

A property case calls `explore(case, name, strategy, check, pinned=...)`:

    def test_property_region(case, device, backend, fullgraph):
        explore(case, "region", region_programs(), lambda program: check_program(case, program, device),
                pinned=[RegionProgram(...)])

Two modes, read here and nowhere else:
- the table (default): a fixed seed per property, derandomized, `TABLE_EXAMPLES[backend]` drawn
  examples plus every pinned one, no shrinking. Every example runs even after one fails, so the
  record lists every failing example; one failure is raised as it is, several as an
  ExceptionGroup (harness.core.outcomes classifies each: a failure no declaration matches wins).
- explore (`HARNESS_EXPLORE=N`, `nox -s explore`): N examples from a fresh seed (or
  `HARNESS_EXPLORE_SEED`), and hypothesis shrinks what fails, each error signature apart (an
  `ExampleFailure` class per signature, raised from the example's own exception); it raises as
  hypothesis reports it (one shrunk failure, or a group of distinct ones), and the record lists
  the shrunk example of each signature with how the case's declarations classify it.

The record (`metrics.property`) carries the mode, the seed, how many examples ran and each failing
example: its program (source), figures and error.
"""

from __future__ import annotations

import itertools
import json
import os
import random
import sys
import zlib
from typing import Optional, TypedDict

import hypothesis
from hypothesis import HealthCheck, Phase

from harness.core import outcomes, timings
from harness.core.pytestrun import EXPLORE_ENV

if sys.version_info < (3, 11):  # hypothesis depends on the backport there
    from exceptiongroup import ExceptionGroup

SEED_ENV = "HARNESS_EXPLORE_SEED"
# Examples drawn per property and cell in the table: where bugs live (AOTAutograd, inductor) more.
TABLE_EXAMPLES = {"eager": 1, "aot_eager": 2, "inductor": 3}
SLOW_CHECKS = [HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large,
               HealthCheck.large_base_example]
KEPT_FAILURES = 5  # failing examples a record lists in full (the table)
KEPT_SIGNATURES = 20  # explore: a shrunk failing example per signature, at most this many


def explore_examples() -> int:
    """N of HARNESS_EXPLORE=N (explore mode), 0 for the table."""
    value = os.environ.get(EXPLORE_ENV, "").strip()
    return int(value) if value else 0


def mode_settings(name: str, backend: str) -> tuple[dict, hypothesis.settings, int]:
    """(what the record says about the mode, hypothesis's settings, the seed)."""
    common = dict(deadline=None, database=None, suppress_health_check=SLOW_CHECKS, print_blob=True)
    explore_n = explore_examples()
    if explore_n:
        seed = int(os.environ.get(SEED_ENV) or random.SystemRandom().getrandbits(32))
        # report_multiple_bugs off: a round stops drawing at its first failure, so what it ran after that
        # is hypothesis's shrinking (and explaining), which the budget does not count
        return ({"mode": "explore", "seed": seed, "max_examples": explore_n},
                hypothesis.settings(max_examples=explore_n, derandomize=False, report_multiple_bugs=False, **common),
                seed)
    seed = zlib.crc32(name.encode())  # the same examples on every row, whatever else changes in the file
    examples = TABLE_EXAMPLES.get(backend, 2)
    return ({"mode": "table", "seed": seed, "max_examples": examples},
            hypothesis.settings(max_examples=examples, derandomize=True, phases=[Phase.explicit, Phase.generate],
                                **common), seed)


def reset_example() -> None:
    """Each example starts where a fresh process would: no compiled code, no counters, no recompile
    limit reached, and the seed the matrix starts every case with (so that one example replayed
    alone, by `repro`, draws the inputs it drew in the table)."""
    import torch
    import torch._dynamo
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    torch.manual_seed(0)


def error_line(exc: BaseException) -> str:
    lines = [line.strip() for line in outcomes.exception_text(exc).splitlines() if line.strip()]
    return f"{type(exc).__name__}: {lines[0][:300] if lines else ''}"


def signature_of(exc: BaseException) -> str:
    return outcomes.bug_signature(type(exc).__name__, outcomes.exception_text(exc))


class ExampleFailure(Exception):
    """What explore mode raises to hypothesis for a failing example: one class per error signature
    (`failure_class`), raised from the example's own exception. Hypothesis shrinks each distinct
    failure apart by its class and place: without this, every failure of a program's script (one
    assert, one line) would be one failure to it, and only one would be shrunk."""
    signature: str  # the signature its class stands for (failure_class sets it)


_FAILURE_CLASSES: dict[str, type] = {}


def failure_class(signature: str) -> type:
    if signature not in _FAILURE_CLASSES:
        _FAILURE_CLASSES[signature] = type("ExampleFailure", (ExampleFailure,), {"signature": signature})
    return _FAILURE_CLASSES[signature]


class RoundMark(TypedDict):
    """Explore: where the current round started drawing, and where it stopped (its first new failure)."""
    start: int  # examples run before the round
    first_failure: Optional[int]


def explore(case, name: str, strategy, check, pinned=(), about=None) -> None:
    """Run `check(program)` for each program drawn from `strategy` (and each of `pinned`), as the mode
    says. `about`: what the record should say of the program space (the ops this torch offers, say).
    A check that records `op_class` has each example counted by it (`examples_by_class`).

    Explore mode runs hypothesis in rounds, each from the next seed, until the run has used its N
    examples: a round ends at its first new failure, which hypothesis then shrinks; later rounds
    pass over failures of a signature already shrunk, and over known ones (what the case declares
    for this torch), recording them, so that one bug does not end the exploration. The pinned
    examples are the table's: explore draws afresh."""
    summary, settings, seed = mode_settings(name, case.backend)
    summary.update(about or {})
    table = summary["mode"] == "table"
    declared = getattr(case, "declared", [])
    failures: list[tuple[object, BaseException, dict]] = []
    # explore: the last failing example of each signature (hypothesis replays its shrunk one last)
    shrunk: dict[str, tuple[object, BaseException, dict]] = {}
    settled: set[str] = set()  # explore: signatures shrunk in an earlier round, or known
    ran = []
    drawn = 0  # explore: the examples hypothesis drew, what the budget counts (not its shrinking's runs)
    this_round = RoundMark(start=0, first_failure=None)  # explore: where the round stopped drawing
    by_class: dict[str, int] = {}

    def run(program):
        reset_example()
        case.metrics.clear()
        ran.append(program)
        try:
            check(program)
        except (MemoryError, hypothesis.errors.HypothesisException):
            raise
        except Exception as exc:
            failures.append((program, exc, dict(case.metrics)))
            if table:
                return
            signature = signature_of(exc)
            if signature in settled:  # its example is kept: shrunk, or the first of a known failure
                shrunk.setdefault(signature, failures[-1])
                return
            shrunk[signature] = failures[-1]
            if outcomes.classify_exception(exc, declared)[0] == "fail":
                if this_round["first_failure"] is None:
                    this_round["first_failure"] = len(ran)
                raise failure_class(signature)(error_line(exc)) from exc  # hypothesis shrinks it
            settled.add(signature)
        finally:
            if "op_class" in case.metrics:  # judged, passing or failing (not an example hypothesis rejected)
                by_class[case.metrics["op_class"]] = by_class.get(case.metrics["op_class"], 0) + 1

    errors: list[BaseException] = []
    try:
        if table:
            test = hypothesis.given(program=strategy)(run)
            for program in reversed(list(pinned)):
                test = hypothesis.example(program=program)(test)
            hypothesis.seed(seed)(settings(test))()
        else:
            for round_seed in itertools.count(seed):  # each round draws what is left of the budget
                left = hypothesis.settings(settings, max_examples=max(1, summary["max_examples"] - drawn))
                this_round.update({"start": len(ran), "first_failure": None})
                found = explore_round(strategy, run, left, round_seed)
                drawn += (this_round["first_failure"] or len(ran)) - this_round["start"]
                if found is None or drawn >= summary["max_examples"]:
                    break
                errors.append(found)
                # what hypothesis shrank to; a signature the shrinking moved away from stays open, for a
                # later round (where the shrunk one no longer fails) to shrink
                settled.update(failure.signature for failure in failed_examples(found))
                summary.setdefault("hypothesis_notes", [n for n in getattr(found, "__notes__", []) if n.strip()][:6])
    except BaseException as exc:
        summary["hypothesis_notes"] = [n for n in getattr(exc, "__notes__", []) if n.strip()][:6]
        raise
    finally:
        kept = failures[-KEPT_FAILURES:] if table else list(shrunk.values())[-KEPT_SIGNATURES:]
        summary.update(examples_run=len(ran), **({} if table else {"examples_drawn": drawn}),
                       pinned=len(pinned) if table else 0, examples_failed=len(failures),
                       **({"examples_by_class": by_class} if by_class else {}),
                       failing_examples=[described(p, e, m, declared) for p, e, m in kept])
        case.record(property=json.loads(json.dumps(summary, default=repr)))  # what a record can carry
    if table and failures:
        raise_failures([e for _, e, _ in failures], summary)
    if not table and (errors or failures):  # the new failures, shrunk; else the known ones
        raise_failures(errors or [e for _, e, _ in failures], summary)


def explore_round(strategy, run, settings, seed) -> BaseException | None:
    """One round of explore mode: hypothesis from `seed`; the failure it raised (shrunk), if any."""
    try:
        hypothesis.seed(seed)(settings(hypothesis.given(program=strategy)(run)))()
    except hypothesis.errors.HypothesisException:
        raise
    except Exception as exc:
        if not failed_examples(exc):
            raise
        return exc
    return None


def failed_examples(exc: BaseException) -> list[ExampleFailure]:
    """The ExampleFailures hypothesis raised: one, or a group of distinct ones."""
    return [leaf for leaf in outcomes.leaf_exceptions(exc) if isinstance(leaf, ExampleFailure)]


def described(program, exc: BaseException, metrics: dict, declared: list) -> dict:
    """What a record lists of a failing example: its program, figures, error and signature, and how
    the case's declarations for this torch classify it (`known` with its reference, or `fail`: new)."""
    outcome, reference = outcomes.classify_exception(exc, declared)
    figures = {k: v for k, v in metrics.items() if k not in timings.METRIC_KEYS}  # times: not the table's to keep
    return {"program": getattr(program, "source", repr(program)), "figures": repr(program), "metrics": figures,
            "error": error_line(exc), "signature": signature_of(exc), "outcome": outcome, "reference": reference}


def raise_failures(errors: list[BaseException], summary: dict) -> None:
    """One distinct failure as it is; several (by class and first line) as an ExceptionGroup."""
    distinct: dict[str, BaseException] = {}
    for exc in errors:
        distinct.setdefault(error_line(exc), exc)
    if len(distinct) == 1:
        raise errors[-1]
    raise ExceptionGroup(f"{summary['examples_failed']} of {summary['examples_run']} examples failed, "
                         f"{len(distinct)} ways: " + " | ".join(distinct), list(distinct.values()))
