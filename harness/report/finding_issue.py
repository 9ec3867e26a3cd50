"""A finding's issue text, ready to paste upstream: what `harness sweep --issue` wrote (PyTorch's bug
template: the script, its output on the newest failing torch, where it fails and passes, collect_env),
with the root cause, the proposed fix and its regression test, and the upstream search, from
results/reductions/findings.toml and fixes/, before its Versions section.

That part of the file lies between two markers and is written again whole each time (`python -m
harness findings`), so the catalogue stays its one source; `--check` says which files differ.
"""

from __future__ import annotations

import pathlib

from harness.core import matrix, records
from harness.core.markdown import fence
from harness.report.findings import Finding
from harness.report.results import ReportError

START = "<!-- the root cause, the proposed fix and the upstream search: `python -m harness findings` writes them " \
        "from results/reductions/findings.toml and fixes/ -->"
END = "<!-- end of what `python -m harness findings` writes -->"
VERSIONS = "### Versions"


def sections(finding: Finding) -> str:
    """The finding's own part of its issue: root cause, proposed fix with its test, upstream search."""
    lines = [START, ""]
    if finding.cause:
        lines += ["### Root cause", "", f"{finding.cause}.", ""]
    if finding.kind and finding.history:
        lines += ["### History", "", f"{finding.kind[0].upper()}{finding.kind[1:]}. {finding.history}. (Each change's "
                  "release is the first whose wheel holds its code.)", ""]
    if finding.fix_path and finding.upstream_test and finding.patch_path.is_file():
        patch = finding.patch_path.read_text(encoding="utf-8")
        against, _, diff = patch.partition("\n\n")
        where = finding.upstream_test
        place = f"class `{where.into}`" if where.into else "a class of its own"
        said = (f"One patch, the fix and its regression test in `{where.file}` ({place}). "
                f"{against.replace(chr(10), ' ')} With it the script above passes, and so do the tests it adds, "
                "which fail without it.")
        if finding.neighbours_path is not None:
            said += (" It also changes what some of their neighbours there expect to be printed (graphs, schemas), "
                     "which the fix changes; they pass with it and fail without it.")
        lines += ["### Proposed fix", "", said, "", fence(diff, "diff"), ""]
    elif finding.fix_path:
        test = finding.regression_test_path
        fix = finding.fix_path.read_text(encoding="utf-8")
        if finding.fix_path == finding.aten_fix_path:  # its first line says which source file, at which commit
            against, _, fix = fix.partition("\n\n")
            said = (f"{against} Checked on torch {matrix.main_session().torch}, whose wheel has no C++ source to "
                    "patch: the file, patched, built against that wheel's headers as kernels that replace the "
                    "wheel's own; with them the script above passes, and so does this regression test, which "
                    "fails without them and with the same file built unpatched.")
        else:
            said = (f"Against torch {matrix.main_session().torch}; with it the script above passes, and so does this "
                    "regression test, which fails without it.")
        lines += ["### Proposed fix", "", said, "",
                  fence(fix, "diff"), "",
                  "<details><summary>The regression test</summary>", "",
                  fence(test.read_text(encoding="utf-8"), "python"), "", "</details>", ""]
    if finding.searched or finding.related:
        lines += ["### Searched upstream", ""]
        lines += [f"No report of this found. Searched: {'; '.join(repr(q) for q in finding.searched)}."
                  if finding.searched else "No report of this found."]
        lines += ["", "Related:", ""] + [f"- {thread}" for thread in finding.related] if finding.related else []
        lines.append("")
    return "\n".join(lines + [END])


def with_sections(text: str, finding: Finding) -> str:
    """The issue text with the finding's part (re)written before its Versions section."""
    if START in text and END in text:
        text = text[:text.index(START)] + text[text.index(END) + len(END):].lstrip("\n")
    at = text.find(f"\n{VERSIONS}\n")
    at = len(text) if at < 0 else at + 1
    return text[:at] + sections(finding) + "\n\n" + text[at:]


def write_issues(catalogue: list[Finding], check: bool = False) -> list[pathlib.Path]:
    """Each finding's issue text brought up to date (with `check`, only compared): the files that
    differed. A finding whose issue text is missing is bad input (sweep --issue writes it)."""
    differed = []
    for finding in catalogue:
        try:
            text = finding.issue_path.read_text(encoding="utf-8")
        except OSError:
            raise ReportError(f"{finding.issue_path}: finding {finding.number}'s issue text is missing "
                              f"(python -m harness sweep {finding.script} --issue writes it)") from None
        wanted = with_sections(text, finding)
        if wanted != text:
            differed.append(finding.issue_path)
            if not check:
                records.write_atomically(finding.issue_path, wanted)
    return differed
