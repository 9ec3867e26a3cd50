"""The report against a baseline (an earlier run's results) and the report's exit status (the
nightly's colour): regressions and new failing cases fail it, as do expected sessions that have no
complete results file."""

from __future__ import annotations

import functools

from harness.core import sources
from harness.core.outcomes import DECLARED, FAILING, HARD, PASSING
from harness.report.flips import Learned
from harness.report.results import NOT_RUN, SessionResult, opening_line

COMPARISONS = ("regressed", "newly failing", "fixed", "new", "removed", "still failing", "flaky", "flips", "by machine")
COMPARISON_MEANING = {
    "regressed": "passed, or failed only as declared (a known bug, a limitation), in the baseline; fails otherwise now",
    "newly failing": "skipped or flaky in the baseline, fails now",
    "fixed": "failed in the baseline, passes now",
    "new": "not in the baseline's session",
    "removed": "in the baseline, not now (the session finished without it)",
    "still failing": "failed then, fails now in another way",
    "flaky": "its attempts disagree now",
    "flips": "changed, and the cell is known to flip (with the same case code and installs, its outcome has come back "
             "before, in the table's history), or was flaky in the baseline: not counted as a regression or a fix",
    "by machine": "otherwise than in the baseline, which ran the same case code with the same installs on another "
                  "machine: a difference of the machines, not counted as a regression",
}
# What a cell known to flip is not: a change of either way (harness.report.flips).
CHANGES = ("regressed", "newly failing", "fixed", "still failing")
# What tells one machine from another in an environment record: a cell may differ by any of them (inductor's
# C++ kernels are built by the machine's compiler for its CPU's vector instructions).
MACHINE_KEYS = ("cpu", "os", "gpu", "gpu_driver")


def machine(session: SessionResult) -> dict:
    """The machine a session ran on: MACHINE_KEYS of its environment record and the C++ compiler
    collect_env names."""
    collect_env = session.environment.get("collect_env") or ""
    compiler = next((line.split(":", 1)[1].strip() for line in collect_env.splitlines()
                     if line.startswith("GCC version:")), None)
    return {**{key: session.environment.get(key) for key in MACHINE_KEYS}, "compiler": compiler}


def machines_differ(old: SessionResult, now: SessionResult) -> dict:
    """{what differs: {"baseline": ..., "now": ...}} between the machines two runs of a session ran on. A
    fact one record lacks (an older record without collect_env) tells nothing: only facts both give count."""
    then, found = machine(old), machine(now)
    return {key: {"baseline": then[key], "now": found[key]} for key in then
            if then[key] is not None and found[key] is not None and then[key] != found[key]}


def ran_the_same(old: SessionResult, now: SessionResult, family: str | None) -> bool:
    """Both runs ran the family's cases with the same installs (`packages`) and the same project code:
    every source the family reaches by imports (harness.core.sources.family_sources, read from the code at
    hand), by the digests each run kept (`reuse_sources`). Not the reuse keys: those hold the machine too."""
    then, found = old.environment.get("reuse_sources"), now.environment.get("reuse_sources")
    if not then or not found or old.environment.get("packages") != now.environment.get("packages"):
        return False
    reach = _reach().get(family) if family is not None else None  # no family: every source counts
    return all(then.get(path) == found.get(path) for path in {*then, *found} if reach is None or path in reach)


@functools.lru_cache(maxsize=1)
def _reach() -> dict[str, frozenset]:
    return {family: frozenset(reached) for family, reached in sources.family_sources().items()}


def _outcome(session: SessionResult, case: str) -> str:
    if session.absent(case) or case not in session.cases:
        return NOT_RUN
    return session.cases[case]["outcome"]


def status(session: SessionResult, case: str, then: str, now: str) -> str | None:
    if now == NOT_RUN and then != NOT_RUN:
        return "removed" if session.complete and case not in session.cases else None
    if now == NOT_RUN:
        return None
    if then == NOT_RUN:
        return "new"
    if now == "flaky":
        return "flaky"
    if then == "flaky" and now != then:
        return "flips"  # its attempts disagreed then: whichever way it settled now
    if then in PASSING and now in FAILING or then in DECLARED and now in HARD:
        return "regressed"  # a known bug's cell that now fails some other way is no longer that bug
    if then not in PASSING and then not in FAILING and now in FAILING:
        return "newly failing"
    if then in FAILING and now in PASSING:
        return "fixed"
    if then in FAILING and now in FAILING and not (then == now and then in DECLARED):
        return "still failing"  # a declared failure staying declared is no news
    return None


def _add_machine_change(changes: list[dict], session: str, differ: dict) -> None:
    """One entry per distinct change of machine, naming every session that made it: a table re-measured
    on a new machine says so once, not once per row."""
    for change in changes:
        if change["differ"] == differ:
            change["sessions"].append(session)
            return
    changes.append({"sessions": [session], "differ": differ})


def compare(current: list[SessionResult], baseline: list[SessionResult], learned: Learned | None = None) -> dict:
    """Each case of each session present now, against the same session in the baseline. A record
    that skipped for an absent device counts as not run, and so does a family the session did not
    run at all (a run narrowed to some families says nothing of the others). A session whose torch
    build differs from its baseline's is not compared case by case: like with like only. On another
    machine, a cell whose case code and installs are the baseline's and whose outcome differs is `by
    machine`: the machines differ, not torch or the project (ran_the_same). A cell known to flip
    (`learned`: harness.report.flips) that changed is `flips`, never a regression or a fix."""
    learned = learned or Learned({})
    base = {s.name: s for s in baseline}
    rows, builds_differ = [], []
    machines: list[dict] = []
    for session in current:
        old = base.get(session.name)
        if old is None:
            continue  # not in the baseline: nothing to hold it to (`not_in_baseline`)
        if old.torch != session.torch:
            builds_differ.append({"session": session.name, "baseline": old.torch, "now": session.torch})
            continue
        families = {record.get("family") for record in session.cases.values()}
        differ = machines_differ(old, session)
        if differ:
            _add_machine_change(machines, session.name, differ)
        for case in sorted(set(session.cases) | {c for c, r in old.cases.items() if r.get("family") in families}):
            then, now = _outcome(old, case), _outcome(session, case)
            found = status(session, case, then, now)
            record = session.cases.get(case) or {}
            # only a cell whose outcome changed: one failing on both machines is still failing, whatever ran it
            if (found and found not in ("new", "removed", "flaky", "still failing") and differ
                    and ran_the_same(old, session, record.get("family") or old.cases.get(case, {}).get("family"))):
                found = "by machine"
            elif found in CHANGES and learned.of(session.name, case) is not None:
                found = "flips"
            if found:
                rows.append({"session": session.name, "case": case, "status": found, "baseline": then, "now": now,
                             "message": opening_line(record.get("message")), "location": record.get("location")})
    for row in rows:
        row["worse"] = worse(row)
    order = {name: i for i, name in enumerate(COMPARISONS)}
    rows.sort(key=lambda r: (order[r["status"]], r["session"], r["case"]))
    now_names = {s.name for s in current}
    return {"sessions": [s.name for s in baseline], "rows": rows,
            "counts": {name: sum(1 for r in rows if r["status"] == name) for name in COMPARISONS},
            "meaning": COMPARISON_MEANING, "builds_differ": builds_differ, "machines_differ": machines,
            "not_in_baseline": [s.name for s in current if s.name not in base],
            "missing_now": [b.name for b in baseline if b.name not in now_names]}


def worse(row: dict) -> bool:
    """A change for the worse: a case that regressed, or a new (or newly run) case that fails hard."""
    return row["status"] == "regressed" or (row["status"] in ("new", "newly failing") and row["now"] in HARD)


def describe(row: dict) -> str:
    what = {"regressed": "regressed", "new": "new case fails",
            "newly failing": "fails, skipped or flaky in the baseline"}[row["status"]]
    message = opening_line(row["message"], 200)
    change = row["now"] if row["status"] == "new" else f"{row['baseline']} -> {row['now']}"
    return f"{row['session']}: {row['case']}: {what}: {change}" + (f" ({message})" if message else "")


def verdict(data: dict, expect=(), fail_on_regression: bool = True) -> dict:
    """The exit status and its reasons, one line each: 1 when an expected session has no results
    file or is incomplete, or (unless `fail_on_regression` is off) when, against the baseline, a case
    regressed or a new case fails as fail/error/crash/timeout."""
    reasons, notes = [], []
    by_name = {s["name"]: s for s in data["sessions"]}
    for name in expect:
        session = by_name.get(name)
        if session is None:
            reasons.append(f"expected session {name} has no results file")
        elif not session["complete"]:
            reasons.append(f"expected session {name} is {session['state']}")
    for session in data["sessions"]:
        if not session["complete"] and session["name"] not in expect:
            notes.append(f"session {session['name']} is {session['state']}")
    for row in (data["baseline"] or {}).get("rows", []):
        if row["worse"]:
            (reasons if fail_on_regression else notes).append(describe(row))
    for differ in (data["baseline"] or {}).get("builds_differ", []):
        (reasons if fail_on_regression else notes).append(
            f"{differ['session']}: the baseline was measured on torch {differ['baseline']}, this run on torch "
            f"{differ['now']}: not compared (run the baseline's build, or measure and commit the new one)")
    by_machine = sum(1 for row in (data["baseline"] or {}).get("rows", []) if row["status"] == "by machine")
    if by_machine:
        notes.append(f"{by_machine} cells differ from the baseline only as the machines do (same torch build, same "
                     "case code and installs, another machine): shown as 'by machine', not counted as regressions")
    if data.get("previous_unavailable"):
        reasons.append(f"the previous nightly could not be fetched: {data['previous_unavailable']}")
    if not fail_on_regression and data["baseline"] is not None:
        notes.append("--no-fail-on-regression: changes against the baseline do not set the exit status")
    checked = []
    if expect:
        checked.append(f"all {len(expect)} expected sessions are complete")
    if data["baseline"] is not None and fail_on_regression:
        checked.append("nothing regressed against the baseline and no new case fails")
    return {"status": 1 if reasons else 0, "reasons": reasons, "notes": notes, "checked": checked,
            "fail_on_regression": fail_on_regression}
