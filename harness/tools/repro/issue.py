"""The issue text of a reproduction (harness.tools.repro): a title, what goes wrong, the torch versions
where the case passes and fails (from the results files at hand, read through harness.core.records), the
script, its output, what was expected, collect_env folded away."""

from __future__ import annotations

import ast
import pathlib
import re
from collections.abc import Sequence

from harness.core import paths, records, versions
from harness.core.markdown import code, fence
from harness.core.outcomes import RAISED, upstream_link
from harness.core.swept import Swept
from harness.tools.scriptrun import printed_outcome


def across_versions(case_id: str, directories) -> list[dict]:
    """What every results file at hand records for the case: torch, session, its line and label,
    outcome, message; oldest torch first."""
    rows = []
    for directory in directories:
        for path in paths.results_files(directory):
            environment, record = records.find_case(path, case_id)
            if environment and record:
                identity = environment["identity"]
                rows.append({"torch": environment.get("torch") or "?", "session": identity["session"],
                             "line": identity["line"], "label": identity["label"],
                             "nightly": identity["row"] == "nightly",
                             "outcome": record["outcome"], "message": record.get("message") or ""})
    return sorted(rows, key=lambda row: (versions.torch_version(row["torch"]), row["session"]))


def boundaries(rows: list[dict]) -> list[tuple[dict, dict]]:
    """Adjacent torch versions along each line's plain rows (no labelled environment, no nightly)
    whose outcomes differ."""
    found = []
    for line in dict.fromkeys(r["line"] for r in rows):
        steps = [r for r in rows if r["line"] == line and r["label"] is None and not r["nightly"]]
        found += [(a, b) for a, b in zip(steps, steps[1:], strict=False) if a["outcome"] != b["outcome"]]
    return found


def _shorten(output: str, head: int = 25, tail: int = 60) -> str:
    lines = output.rstrip().splitlines()
    if len(lines) <= head + tail:
        return "\n".join(lines)
    return "\n".join(lines[:head] + [f"[... {len(lines) - head - tail} lines ...]"] + lines[-tail:])


def _what_went_wrong(info: dict, result: dict) -> tuple[str, str]:
    """(title, paragraph) from the script's run."""
    params = {k: ast.literal_eval(v) for k, v in info["params"].items()
              if v is not None and k in ("backend", "fullgraph")}
    compile_call = f"torch.compile(backend={params.get('backend', 'inductor')!r}" + \
        (", fullgraph=True)" if params.get("fullgraph") else ")")
    version = info["torch"]
    errors = [line for line in result["output"].splitlines()
              if re.match(r"^[\w.]+(Error|Exception|Unsupported)\b.*:", line)]
    error = errors[-1] if errors else ""
    outcome = result["outcome"] or "no outcome"
    subject = info["case"]
    refs = ", ".join(f"[{ref}]({upstream_link(ref) or ref})"
                     for ref in dict.fromkeys(e["ref"] for e in info["expected"]))
    doc = info["doc"].split("\n\n")[0].replace("\n", " ")
    if outcome in RAISED:
        title = f"{compile_call}: `{subject}` fails on torch {version}" + (f": {error[:120]}" if error else "")
        paragraph = (f"With torch {version}, the case runs eagerly and under `{compile_call}`; the compiled run "
                     f"fails: `{error}`.")
        if outcome == "known":
            paragraph += f" This is the upstream bug {refs}."
        elif outcome == "limitation":
            paragraph += f" This is documented behaviour ({refs})."
    elif outcome == "skip":
        title = f"`{subject}` cannot run on torch {version}"
        paragraph = "The script skipped: " + printed_outcome(result["output"])[1]
    else:
        title = f"{compile_call}: `{subject}` agrees with eager on torch {version}"
        paragraph = f"With torch {version}, eager and compiled runs agree and the feature does what it does eagerly."
        if outcome == "fixed":
            paragraph += f" The declared upstream bug ({refs}) no longer reproduces."
    return title, (f"{doc} " if doc else "") + paragraph


def issue_markdown(info: dict, text: str, path: pathlib.Path, result: dict, environment: str,
                   rows: list[dict], full: str | None = None) -> str:
    """The issue; `full`: the whole export, folded below `text` (a reduced script, harness/tools/reduce/command.py)."""
    title, paragraph = _what_went_wrong(info, result)
    lines = [f"### {title}", "", paragraph, ""]
    if rows:
        lines += ["| torch | session | outcome | message |", "|---|---|---|---|"]
        lines += [f"| {r['torch']} | {r['session']} | {r['outcome']} | {r['message'][:100].replace('|', '/')} |"
                  for r in rows]
        lines += [""] + [f"Changes between torch {a['torch']} ({a['outcome']}) and {b['torch']} ({b['outcome']})."
                         for a, b in boundaries(rows)] + [""]
    needs = "torch and lightning" if "lightning" in text else "torch"
    status = "timed out" if result["returncode"] is None else f"exit status {result['returncode']}"
    lines += [f"**Reproduction** (`python {path.name}`, needs only {needs}):", "", fence(text, "python"), ""]
    if full:
        lines += [f"<details><summary>The case as the matrix runs it ({full.count(chr(10))} lines)</summary>", "",
                  fence(full, "python"), "", "</details>", ""]
    lines += [f"**Output** (torch {info['torch']}, {status}):", "", fence(_shorten(result["output"])), "",
              "**Expected**: the compiled run gives the eager run's outputs, dtypes and gradients, and the "
              "feature does under torch.compile what it does eagerly (the script's asserts).", "",
              "<details><summary>collect_env</summary>", "", fence(environment), "", "</details>", ""]
    return "\n".join(lines)


# --- a finding's issue, in PyTorch's bug template ------------------------------------------------------------

def script_title(script_text: str, fallback: str) -> str:
    """The script's own summary: its docstring's first line, or its first comment line."""
    try:
        docstring = ast.get_docstring(ast.parse(script_text)) or ""
    except SyntaxError:
        docstring = ""
    comment = next((line.lstrip("# ").strip() for line in script_text.splitlines() if line.startswith("#")
                    and not line.startswith("#!")), "")
    return (docstring.strip().splitlines() or [comment or fallback])[0]


def pytorch_bug_issue(title: str, script_name: str, script_text: str, failing: list[tuple[str, str]],
                      passing: list[str], expected: str, output: str, environment: str,
                      otherwise: Sequence[tuple[str, str]] = ()) -> str:
    """The text to paste into PyTorch's bug template (🐛 Describe the bug, Versions): what fails, on
    which versions (from a sweep: `failing` as (version, error line), `passing` versions, `otherwise`
    (version, error line) where it fails another way), the script, its output on the newest failing version, what
    was expected, and `collect_env` of that version."""
    error = failing[-1][1] if failing else ""
    lines = [f"**Title:** {title}", "", "### 🐛 Describe the bug", "",
             f"{title}." if not title.endswith(".") else title, ""]
    if failing:
        lines += [Swept(tuple(v for v, _ in failing), tuple(passing), tuple(otherwise)).line(), ""]
    lines += [f"Reproduction (`python {script_name}`, needs only torch):", "", fence(script_text, "python"), "",
              f"Output (torch {failing[-1][0] if failing else '?'}):", "", fence(_shorten(output, head=3, tail=25)), "",
              f"Expected: {expected}", ""]
    if error:
        lines += [f"Error: {code(error[:300])}", ""]
    lines += ["### Versions", "", fence(environment), ""]
    return "\n".join(lines)
