"""A session against another of its own torch row, case by case: a labelled environment against the
row's plain session, the Lightning axis against the row's era Lightning, a CUDA session against the
row's CPU session (each case on the GPU against its CPU twin)."""

from __future__ import annotations

import json

from harness.core import versions
from harness.core.outcomes import PASSING
from harness.report.flips import Learned
from harness.report.results import SessionResult, bug_signature, opening_line


def other_environments(sessions: list[SessionResult], case_ids: list[str]) -> list[dict]:
    """Each labelled session against its own row's plain session: the cases whose outcomes differ."""
    by_name = {s.name: s for s in sessions}
    found = []
    for session in (s for s in sessions if s.label and not s.lightning_of):
        plain = by_name.get(session.plain)
        entry = {"session": session.name, "plain": session.plain, "torch": session.torch,
                 "python": session.environment.get("python"), "plain_missing": plain is None,
                 "compared": 0, "differences": []}
        if plain is not None:
            for case in case_ids:
                if case in session.cases and case in plain.cases and not (session.absent(case) or plain.absent(case)):
                    entry["compared"] += 1
                    ours, theirs = session.cases[case], plain.cases[case]
                    if ours["outcome"] != theirs["outcome"]:
                        entry["differences"].append({"case": case, "plain_outcome": theirs["outcome"],
                                                     "outcome": ours["outcome"],
                                                     "message": opening_line(ours.get("message"))})
        found.append(entry)
    return found


def lightning_differences(sessions: list[SessionResult], case_ids: list[str],
                          learned: Learned | None = None) -> list[dict]:
    """Per torch row with a Lightning-axis session: the cases whose outcome differs between the row's
    era Lightning and the newest Lightning that supports its torch, grouped by bug (the signature of
    the side that does not pass), largest group first, each with the bisection along Lightning. A cell
    known to flip on either side (`learned`, harness.report.flips) is no difference of Lightning: it is
    listed apart (`flips`), with no bisection."""
    learned = learned or Learned({})
    by_name = {s.name: s for s in sessions}
    found = []
    for newest in (s for s in sessions if s.lightning_of):
        era = by_name.get(newest.lightning_of)
        entry = {"session": newest.name, "era_session": newest.lightning_of, "torch": newest.torch,
                 "lightning": newest.environment.get("lightning"), "era_missing": era is None,
                 "era_lightning": era.environment.get("lightning") if era else None, "compared": 0, "groups": [],
                 "flips": []}
        groups: dict[str, dict] = {}
        if era is not None:
            for case in case_ids:
                if case not in newest.cases or case not in era.cases or newest.absent(case) or era.absent(case):
                    continue
                entry["compared"] += 1
                old, new = era.cases[case], newest.cases[case]
                if old["outcome"] == new["outcome"]:
                    continue
                telling = old if new["outcome"] in PASSING else new  # the side that does not pass names the bug
                known = learned.of(newest.name, case) or learned.of(era.name, case)
                if known is not None:
                    entry["flips"].append({"case": case, "era_outcome": old["outcome"], "outcome": new["outcome"],
                                           "flip": known.text()})
                    continue
                signature = bug_signature(telling)
                group = groups.setdefault(signature, {"signature": signature, "cases": [],
                                                      "bisect": f"nox -s bisect -- '{case}' --along lightning "
                                                                f"--torch {versions.torch_version(newest.torch)}"})
                group["cases"].append({"case": case, "era_outcome": old["outcome"], "outcome": new["outcome"],
                                       "message": opening_line(telling.get("message"))})
        for group in groups.values():
            group["changes"] = list(dict.fromkeys(f"{c['era_outcome']} → {c['outcome']}" for c in group["cases"]))
        entry["groups"] = sorted(groups.values(), key=lambda g: (-len(g["cases"]), g["signature"]))
        entry["differences"] = sum(len(g["cases"]) for g in entry["groups"])
        found.append(entry)
    return found


def twin_key(record: dict) -> str | None:
    """What a case on one device shares with its twin on another: its family and every parameter but
    the device (None for a case without a device)."""
    params = dict(record.get("params") or {})
    if not params.pop("device", None):
        return None
    return json.dumps([record.get("family"), params], sort_keys=True, default=str)


def cpu_twins(cuda: SessionResult, cpu: SessionResult) -> dict[str, str]:
    """Each case of the CUDA session that ran on its GPU -> its CPU twin's id in `cpu` (the same
    family and parameters, on the CPU), where the CPU session ran one."""
    on_cpu = {twin_key(r): case for case, r in cpu.cases.items()
              if (r.get("params") or {}).get("device") == "cpu" and not cpu.absent(case)}
    found = {}
    for case, record in cuda.cases.items():
        if (record.get("params") or {}).get("device") == "cuda" and not cuda.absent(case):
            twin = on_cpu.get(twin_key(record))
            if twin is not None:
                found[case] = twin
    return found


def row_cpu_session(cuda: SessionResult, sessions: list[SessionResult]) -> SessionResult | None:
    """The CPU session of the CUDA session's torch row (the same row, label and Lightning)."""
    return next((s for s in sessions if s.device == "cpu" and s.identity["row"] == cuda.identity["row"]
                 and s.label == cuda.label and s.lightning_of is None), None)


def cuda_against_cpu(sessions: list[SessionResult]) -> list[dict]:
    """Per CUDA session: its cases whose outcome on the GPU differs from their CPU twin's in the CPU
    session of the same torch row, grouped by the signature of the side that does not pass."""
    found = []
    for cuda in (s for s in sessions if s.device == "cuda"):
        cpu = row_cpu_session(cuda, sessions)
        twins = cpu_twins(cuda, cpu) if cpu is not None else {}
        entry = {"session": cuda.name, "cpu_session": cpu.name if cpu else None, "torch": cuda.torch,
                 "cuda": cuda.environment.get("cuda"), "gpu": cuda.environment.get("gpu"),
                 "cpu_missing": cpu is None, "compared": len(twins), "groups": []}
        groups: dict[str, dict] = {}
        if cpu is not None:  # without a CPU session there are no twins
            for case, twin in sorted(twins.items()):
                on_gpu, on_cpu = cuda.cases[case], cpu.cases[twin]
                if on_gpu["outcome"] == on_cpu["outcome"]:
                    continue
                telling = on_cpu if on_gpu["outcome"] in PASSING else on_gpu  # the side that does not pass names it
                group = groups.setdefault(bug_signature(telling), {"signature": bug_signature(telling), "cases": []})
                group["cases"].append({"case": case, "twin": twin, "outcome": on_gpu["outcome"],
                                       "cpu_outcome": on_cpu["outcome"],
                                       "message": opening_line(telling.get("message"))})
        for group in groups.values():
            group["changes"] = list(dict.fromkeys(f"{c['cpu_outcome']} on the CPU, {c['outcome']} on the GPU"
                                                  for c in group["cases"]))
        entry["groups"] = sorted(groups.values(), key=lambda g: (-len(g["cases"]), g["signature"]))
        entry["differences"] = sum(len(g["cases"]) for g in entry["groups"])
        found.append(entry)
    return found


def nightly_against_release(current: list[SessionResult], table: list[SessionResult] | None) -> list[dict]:
    """Each session of torch nightly against the newest released plain session of its line, in the
    table it is held to (else in this run): where nightly does worse, a possible upstream regression
    (nightly has no committed table of its own: its pre-release changes every night)."""
    from harness.report.baseline import status, worse  # the one definition of "worse"

    pool = table if table else current
    found = []
    for session in (s for s in current if s.identity["row"] == "nightly"):
        releases = [s for s in pool if s.line == session.line and s.label is None and s.identity["row"] != "nightly"]
        release = max(releases, key=lambda s: s.version, default=None)
        entry = {"session": session.name, "torch": session.torch, "release_session": release and release.name,
                 "release_torch": release and release.torch, "compared": 0, "worse": [], "better": []}
        if release is not None:
            for case, record in sorted(session.cases.items()):
                then = release.cases.get(case)
                if then is None or session.absent(case) or release.absent(case):
                    continue
                entry["compared"] += 1
                found_status = status(session, case, then["outcome"], record["outcome"])
                row = {"case": case, "release": then["outcome"], "nightly": record["outcome"],
                       "message": opening_line(record.get("message")), "status": found_status}
                if found_status and worse({"status": found_status, "now": record["outcome"]}):
                    entry["worse"].append(row)
                elif found_status == "fixed":
                    entry["better"].append(row)
        found.append(entry)
    return found
