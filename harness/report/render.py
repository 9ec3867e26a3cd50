"""The regression table: `python -m harness report` merges results files (harness.report.analysis
works out what they say) and renders REPORT.md and report.html from the same sections through Jinja2
templates (harness/report/templates), beside report.json (the data both are rendered from).

Both open newest first on what a maintainer comes for: what fails on the newest torch, grouped by
bug, with the commands that reproduce and bisect it; the known bugs by the reference each case
matched; regressions and fixes per version step; then the sessions and (on the page) the grid.
REPORT.md stays short enough for GitHub: the full matrix and every transition are on the page.
"""

# No `from __future__ import annotations`: `annotations()` below (the CLI's ::error lines) takes the name.
import datetime
import json
import os
import pathlib
import re
from typing import Any

import jinja2

from harness.core import paths, records, versions
from harness.core.outcomes import OUTCOMES, upstream_link
from harness.report import analysis, cards, comparisons, findings, flips, page, results, staleness, strip
from harness.report import baseline as against
from harness.report.results import NOT_RUN

TEMPLATES = pathlib.Path(__file__).with_name("templates")
SYMBOLS = {**{name: o.symbol for name, o in OUTCOMES.items()}, NOT_RUN: "·"}
CELL_TEXT = {**{name: o.cell for name, o in OUTCOMES.items()}, NOT_RUN: "-"}
MEANING = {**{name: o.meaning for name, o in OUTCOMES.items()},
           NOT_RUN: "no record: the session stopped early or lacks the case (a Lightning-axis session runs only "
                    "the cases that use Lightning)"}
ABSENT_SYMBOL, ABSENT_TEXT = "–", "no device"
REUSED_MARK = "↺"
# The sections both renderings carry, in this order: (anchor, title).
SECTIONS = (("failing", "Failing on the newest torch"), ("known", "Known bugs and documented limitations"),
            ("transitions", "Regressions and fixes between torch versions"),
            ("lightning", "Where Lightning changes an outcome"),
            ("cuda", "Where the GPU changes an outcome"), ("nightly-torch", "Torch nightly against the newest release"),
            ("other-environments", "Other environments of a row"), ("baseline", "Against the baseline"),
            ("previous", "Against the previous run (for information)"),
            ("sessions", "Sessions"), ("matrix", "Matrix"))
MD_LINE_LIMIT = 380
# Cards of failures REPORT.md shows, about 11 lines each (report.html shows every one; the strip above the
# cards, a line per bug, names every bug): the committed table's REPORT.md stays within 250 lines, and each
# bug found adds a line to the strip.
MD_CARDS = 8


def build(directories, baseline_dirs=None, expect=(), fail_on_regression: bool = True, previous_dirs=None,
          previous_unavailable: str | None = None, previous_source=None, nights_dirs=None) -> dict:
    """`baseline_dirs`: what the runs are held to (the nightly's: the committed table); `previous_dirs`:
    an informational comparison (the night before, or the table as last committed: `previous_source`
    says which commit, or why there is none), which never sets the exit status, or
    `previous_unavailable`: why it could not be had, which does; `nights_dirs`: earlier nights' results
    (outside git), read only to learn which cells flip."""
    sessions = results.load_dirs(directories)
    earlier = results.load_dirs(baseline_dirs) if baseline_dirs else None
    night_before = results.load_dirs(previous_dirs) if previous_dirs else None
    case_ids, rows = analysis.grid(sessions)
    # the cells known to flip, from the table's history in git (the baseline's, for results outside git)
    # and earlier nights (the night before, and --nights)
    # one night's session beside another's of the same name: each directory is read alone
    nights = [*(night_before or ()), *(s for night in nights_dirs or () for s in results.load_dirs([night]))]
    learned = flips.learn_all(directories, sessions, history=baseline_dirs or (), nights=nights)
    data: dict[str, Any] = {  # report.json: what every rendering reads
        "schema": records.SCHEMA_VERSION,
        "sessions": [analysis.session_row(s, case_ids, {row["case"]: row["params"].get("device") for row in rows})
                     for s in sessions],
        "families": sorted({row["family"] for row in rows}),
        "cases": rows,
        "folded": [row["case"] for row in rows if row["folded"]],
        "newest": analysis.newest_counts(sessions, case_ids),
        "failing": cards.failing_cards(sessions, case_ids),
        "measurement": analysis.measurement_span(sessions),
        "known": analysis.known_groups(sessions, case_ids),
        "transitions": analysis.transitions(sessions, case_ids, learned),
        "flips": learned.as_dict(),
        "lightning": comparisons.lightning_differences(sessions, case_ids, learned),
        "cuda_against_cpu": comparisons.cuda_against_cpu(sessions),
        "nightly_torch": comparisons.nightly_against_release(sessions, earlier),
        "other_environments": comparisons.other_environments(sessions, case_ids),
        "baseline": against.compare(sessions, earlier, learned) if earlier is not None else None,
        "previous": against.compare(sessions, night_before, learned) if night_before is not None else None,
        "previous_unavailable": previous_unavailable,
        "previous_source": (previous_source if isinstance(previous_source, (str, type(None)))
                            else previous_source.as_dict()),
        # what the comparison is named by, once for every rendering
        "previous_label": ("the previous run" if isinstance(previous_source, (str, type(None)))
                           else previous_source.label()),
        "expected": list(expect),
    }
    data["stale"] = [row.as_dict() for directory in directories for row in staleness.stale_rows(pathlib.Path(directory),
                                                                                                   unknown=False)]
    stale = {row["session"]: row for row in data["stale"]}
    for session in data["sessions"]:
        session["stale"] = stale.get(session["name"])
    data["stale_command"] = staleness.refresh_command([staleness.StaleRow(**row) for row in data["stale"]])
    data["failing_cases"] = cards.failing_cases(data["failing"])
    data["findings_unmatched"] = findings.attach(data["failing"], findings.load())
    data["findings_unexplained"] = findings.unexplained(data["failing"])
    data["bug_strip"] = strip.bug_strip(data["failing"], {line: [(s.torch, s.name) for s in members] for line, members
                                                          in analysis.version_lines(sessions).items()}, learned)
    data["reused"] = sum(s["reused"] for s in data["sessions"])
    data["verdict"] = against.verdict(data, expect, fail_on_regression)
    data["verdict"]["notes"] += [note for s in sessions for note in s.notes]  # lines the reader passed over
    for entry in data["nightly_torch"]:  # for information: a pre-release's changes are upstream's to confirm
        if entry["worse"]:
            data["verdict"]["notes"].append(
                f"{entry['session']}: {_plural(len(entry['worse']), 'cell')} worse on torch {entry['torch']} than on "
                f"{entry['release_torch']} ({entry['release_session']}): possible upstream regressions")
    data["summary_parts"] = summary_parts(data)
    data["summary"] = " ".join(data["summary_parts"])
    return data


def _plural(n: int, word: str, plural: str | None = None) -> str:
    return f"{n:,} {word if n == 1 else plural or word + 's'}"


def gpu_coverage(data: dict) -> str:
    """What of the matrix ran on a GPU, in one sentence, also where nothing did ('' without GPU cases)."""
    wanted = sum(1 for row in data["cases"] if str((row.get("params") or {}).get("device")) == "cuda")
    if not wanted:
        return ""
    rows = [s for s in data["sessions"] if s["device"] == "cuda"]
    if not rows:
        return (f"GPU: no CUDA row is measured: none of the {_plural(wanted, 'case')} whose device is `cuda` has "
                "run on a GPU (a CUDA session, `nox -s cudaNN_torchXY`, needs one: docs/gpu.md).")
    each = "; ".join(
        f"{s['name']} (torch {s['torch']}, {s.get('gpu') or 'GPU not recorded'}) ran "
        f"{sum(n for o, n in s['counts'].items() if o not in (NOT_RUN, 'absent')):,} of the {_plural(wanted, 'case')} "
        "whose device is `cuda`" for s in rows)
    plain_rows = {versions.torch_version(s["torch"]) for s in data["sessions"]
                  if s["device"] != "cuda" and not s["lightning_of"]}
    without = len(plain_rows - {versions.torch_version(s["torch"]) for s in rows})
    return (f"GPU: {_plural(len(rows), 'CUDA row')}: {each}"
            + (f"; {_plural(without, 'torch row')} {'has' if without == 1 else 'have'} none on a GPU."
               if without else "."))


def summary_parts(data: dict) -> list[str]:
    """The report's opening paragraph, a sentence each, plain text; it counts cases, never results."""
    sessions = data["sessions"]
    torches = sorted({s["torch"] for s in sessions}, key=versions.torch_version)
    shown = [str(versions.torch_version(v)) for v in torches]
    span = f"torch {shown[0]}" if len(shown) == 1 else f"torch {shown[0]} to {shown[-1]}"
    labelled = [s["name"] for s in sessions if s["label"] and not s["lightning_of"]]
    axis = [s for s in sessions if s["lightning_of"]]
    parts = [f"{_plural(len(sessions), 'session')} on {span}"
             + (f" ({_plural(len(labelled), 'other environment')} of a row: {', '.join(labelled)})" if labelled else "")
             + (f" ({len(axis)} of the Lightning axis: a row's pins with the newest Lightning that supports its "
                f"torch, the cases that use Lightning only)" if axis else "")
             + f", {_plural(len(data['cases']), 'case')}."]
    gpu = gpu_coverage(data)
    if gpu:
        parts.append(gpu)
    for newest in data["newest"]:
        counted = ", ".join(f"{n:,} {o}" for o, n in newest["counts"].items())
        parts.append(f"On the newest torch of {newest['line']} ({newest['torch']}, {newest['session']}), "
                     f"{_plural(newest['cases'], 'case')} ran: {counted}.")
    failing = data["failing_cases"]  # a cell that failed several ways is on several cards, counted once
    new = sum(1 for card in data["failing"] if card["status"] == "new")
    bugs = sum(1 for g in data["known"] if g["kind"] == "known")
    limits = sum(1 for g in data["known"] if g["kind"] == "limitation")
    parts.append(f"{_plural(failing, 'case')} {'fails' if failing == 1 else 'fail'} there, in "
                 f"{_plural(len(data['failing']), 'group')} by bug ({new} not reported upstream); "
                 f"{_plural(bugs, 'known bug')} and {_plural(limits, 'documented limitation')} referenced.")
    span = data["measurement"]
    if span["oldest"]:
        parts.append(f"Measured from {_when(span['oldest'])} (oldest) to {_when(span['newest'])} (newest).")
    if data["folded"]:
        parts.append(f"{_plural(len(data['folded']), 'case')} never ran on any session's device (folded).")
    if data["reused"]:
        parts.append(f"{_plural(data['reused'], 'record')} reused from earlier runs, not measured in this one.")
    if data["stale"]:
        parts.append(f"{_plural(len(data['stale']), 'row')} measured with other code or installs than this checkout's "
                     f"(`python -m harness stale` says which families and why; `{data['stale_command']}` measures "
                     "them again).")
    incomplete = [s["name"] for s in sessions if not s["complete"]]
    if incomplete:
        parts.append(f"Incomplete: {', '.join(incomplete)}.")
    return parts


def _md(text) -> str:
    """Text inside a Markdown table cell or list item: one line, no table breaks, no HTML."""
    return str(text if text is not None else "").replace("|", "\\|").replace("\n", " ").replace("<", "&lt;")


def _md_ref(ref: str | None) -> str:
    link = upstream_link(ref)
    return f"[{ref}]({link})" if link else (ref or "(no reference recorded)")


def _when(text: str | None) -> str:
    """A record's `started` as a reader compares it: to the minute, in UTC."""
    found = analysis.when(text)
    return found.astimezone(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC") if found else (text or "-")


def _clip(text: str, limit: int = MD_LINE_LIMIT) -> str:
    return text if len(text) <= limit else text[: max(0, limit - 1)] + "…"


def _names(items, budget: int = 300, key: str = "case") -> str:
    """`a`, `b` and N more: case ids, as many as fit in `budget` characters of one line; an item's
    `which` (the examples of a property cell a card is about) follows its id."""
    names = list(dict.fromkeys(f"`{item[key]}`" + (f" ({item['which']})" if item.get("which") else "")
                               for item in items))
    shown: list[str] = []
    for name in names:
        if shown and sum(len(n) + 2 for n in shown) + len(name) > budget:
            break
        shown.append(name)
    return ", ".join(shown) + (f" and {len(names) - len(shown)} more" if len(names) > len(shown) else "")


def _spans(runs) -> str:
    """A card's runs of consecutive torch versions: '2.8.0, 2.13.0 to 2.15.0'."""
    shown = [str(versions.torch_version(first)) if first == last else
             f"{versions.torch_version(first)} to {versions.torch_version(last)}" for first, last in runs]
    return ", ".join(shown)


def _environment(autoescape: bool) -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=autoescape,
                             trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True,
                             undefined=jinja2.StrictUndefined)
    env.filters.update(v=lambda text: str(versions.torch_version(text)), md=_md, md_ref=_md_ref, clip=_clip, when=_when,
                       spans=_spans, names=_names, link=upstream_link, plural=_plural)
    env.globals.update(symbols=SYMBOLS, cell_text=CELL_TEXT, meaning=MEANING, sections=dict(SECTIONS),
                       absent_symbol=ABSENT_SYMBOL, absent_text=ABSENT_TEXT, reused_mark=REUSED_MARK,
                       outcomes=list(OUTCOMES), outcome_styles=list(OUTCOMES.values()), not_run=NOT_RUN,
                       md_cards=MD_CARDS)
    return env


def _root(out_dir) -> str:
    """The checkout, relative to where a report goes: links to its files (the reduced scripts) hold."""
    return pathlib.Path(os.path.relpath(paths.ROOT, pathlib.Path(out_dir or paths.results_dir()).resolve())).as_posix()


def render_markdown(data: dict, short: bool = False, out_dir: pathlib.Path | None = None) -> str:
    """REPORT.md (`short`: the CI step summary, without the sessions)."""
    text = _environment(autoescape=False).get_template("report.md.j2").render(data=data, short=short,
                                                                              root=_root(out_dir))
    text = "\n".join(line.rstrip() for line in text.splitlines()).strip() + "\n"
    return re.sub(r"\n{3,}", "\n\n", text)  # a section left out (the exit status when 0) leaves no gap


def render_html(data: dict, out_dir: pathlib.Path | None = None) -> str:
    """report.html: the grid embedded, each cell's record in its session's cells file (page.py).
    Links into the checkout (the reduced scripts) are relative to `out_dir`, where the page goes."""
    payload = page.grid_payload(data, CELL_TEXT, MEANING, {"text": ABSENT_TEXT, "symbol": ABSENT_SYMBOL})
    return _environment(autoescape=True).get_template("report.html.j2").render(
        data=data, root=_root(out_dir), payload=jinja2.utils.markupsafe.Markup(payload))


def summary_markdown(data: dict) -> str:
    """The short form for a CI step summary."""
    return render_markdown(data, short=True)


def write(data: dict, out_dir: pathlib.Path) -> list[pathlib.Path]:
    """REPORT.md, report.html, report.json and the page's cells files: each rendered before any is
    written, each written whole or not at all; cells files of sessions gone from the table go last."""
    rendered = {"REPORT.md": render_markdown(data, out_dir=out_dir), "report.html": render_html(data, out_dir),
                "report.json": json.dumps(data, indent=1, default=str), **page.cell_files(data)}
    paths = []
    for name, text in rendered.items():
        path = pathlib.Path(out_dir) / name
        records.write_atomically(path, text)
        paths.append(path)
    for path in page.stale_cell_files(out_dir, rendered):
        path.unlink()
    return paths


def annotations(data: dict) -> list[str]:
    """GitHub's `::error` workflow commands, one per cell that changed for the worse against the
    baseline, on the case's file and line, so the check run points at the case."""
    found = []
    for row in (data["baseline"] or {}).get("rows", []):
        if not row["worse"]:
            continue
        where = row.get("location") or {}
        place = f"file={where['file']},line={where['line']}," if where.get("file") else ""
        text = against.describe(row).replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
        found.append(f"::error {place}title={row['status']} against the baseline::{text}")
    return found
