"""The regression table, from results files written by the harness's own writer, as sessions write them."""

import json
import os
import re
import subprocess
import sys

import pytest

from harness.core import caseid, outcomes, records, resultsfile
from harness.report import render, results
from tests.conftest import ROOT

NO_GPU = "no CUDA device: torch.cuda.is_available() is False"
TE_REF, PYG_REF = "NVIDIA/TransformerEngine#890", "Lightning-AI/pytorch-lightning#20524"
DOC_REF = "https://meta-pytorch.github.io/compile-graph-break-site/gb/gb0264.html"
REUSED = {"started": "2026-11-20T03:00:00+00:00", "git_commit": "9dd5e08abcdef0123456789"}

CK = "checkpoint/plain_checkpoint[cpu-inductor-fullgraph]"
CK_GPU = "checkpoint/plain_checkpoint[cuda-inductor-fullgraph]"
TE = "checkpoint/te_wrapper[cpu-eager-fullgraph]"
TE_GPU = "checkpoint/transformer_engine[cuda-eager-fullgraph]"  # needs a GPU: skips on CPU machines
NEST = "nested_compile/inner_outer[cpu-inductor-fullgraph]"
REGION = "nested_compile/compile_region[cpu-eager-fullgraph]"  # an API every torch here lacks
PARAM = "empty_init/param_ctor[cpu-eager-fullgraph]"
OLD = "nested_compile/recursive[cpu-aot_eager-fullgraph]"


def case_record(case, outcome, message=None, upstream=None, **extra):
    """A case record as the recorder writes it; parameters from the id."""
    parts = caseid.parse(case)
    family, variant = parts.family, parts.variant
    device, backend, fullgraph = parts.params.split("-")
    if outcome == "skip" and device == "cuda" and message is None:
        message = NO_GPU
    if upstream is None:
        upstream = [TE_REF] if outcome in ("known", "fixed") else [DOC_REF] if outcome == "limitation" else []
    return {"kind": "case", "case": case, "family": family,
            "params": {"device": device, "backend": backend, "fullgraph": fullgraph == "fullgraph", "variant": variant},
            "outcome": outcome, "exc_type": "AssertionError" if outcome == "fail" else None,
            "message": message if message is not None else f"{outcome} on purpose",
            "upstream": upstream, "metrics": {"graphs": 1, "graph_breaks": 0}, "duration": 0.1,
            "nodeid": f"cases/test_{family}.py::test_{variant}[{parts.params}]", **extra}


def write_session(directory, name, torch, cases, finished=True, python="3.11", gpu=None, lightning="2.4.0",
                  **environment):
    """`cases`: case id -> outcome, or -> a dict of the record's fields (outcome first); `environment`:
    fields of the environment record (`started`, `git_commit`, `cpu`) other than the defaults."""
    directory.mkdir(parents=True, exist_ok=True)
    writer = resultsfile.ResultsWriter(directory / f"{name}.jsonl")
    writer.write({"kind": "environment", "session": name, "torch": torch, "lightning": lightning, "cuda": "12.4",
                  "python": python, "gpu": gpu, "started": "2026-11-22T03:00:00+00:00", "git_commit": "a2c391e",
                  **environment})
    for case, spec in cases.items():
        spec = {"outcome": spec} if isinstance(spec, str) else spec
        writer.write(case_record(case, **spec))
    if finished:
        writer.write({"kind": "end", "exitstatus": 0, "counts": {}, "seconds": 1})
    writer.close()


@pytest.fixture
def matrix(tmp_path):
    """Two plain CPU rows and one CUDA line around torch 2.5, with 2.5's labelled environment."""
    now = tmp_path / "now"
    cpu = {CK: "pass", TE_GPU: "skip", REGION: {"outcome": "skip", "message": "missing: torch.compiler.region"}}
    write_session(now, "cpu_torch24", "2.4.1", {**cpu, TE: "pass", NEST: "pass", PARAM: "pass",
                                                OLD: "pass", CK_GPU: "skip"})
    write_session(now, "cpu_torch25", "2.5.1", {**cpu, TE: "pass", NEST: "pass", PARAM: "limitation",
                                                OLD: {"outcome": "fail", "message": "Tensor-likes are not close!"},
                                                CK_GPU: "skip"})
    write_session(now, "cpu_torch25_py310_pyg", "2.5.1", python="3.10", cases={
        **cpu, TE: {"outcome": "known", "message": "Dynamic control flow is not supported", "upstream": [PYG_REF]},
        NEST: "pass", PARAM: "limitation", OLD: "fail", CK_GPU: "skip"})
    write_session(now, "cpu_torch26", "2.6.0", {
        **cpu, TE: "pass", PARAM: "limitation", OLD: "pass", CK_GPU: "skip",
        NEST: {"outcome": "fail", "message": "Tensor-likes are not close!\n\nMismatched elements: 3 / 16"}})
    gpu = dict(gpu="NVIDIA H100")
    cuda = {CK: "pass", TE: "known", NEST: "pass", REGION: "skip", TE_GPU: "skip", PARAM: "pass", OLD: "pass"}
    write_session(now, "cuda12_torch25", "2.5.1+cu124", {**cuda, CK_GPU: "pass"}, **gpu)
    crash = {"outcome": "crash", "message": "worker died"}
    write_session(now, "cuda12_torch26", "2.6.0+cu124", {**cuda, CK_GPU: crash}, **gpu)
    return now


def run_cli(*args, env=None):
    plain = {k: v for k, v in os.environ.items() if not k.startswith("GITHUB_")}  # as off a runner, unless given
    return subprocess.run([sys.executable, "-m", "harness", "report", *map(str, args)], cwd=ROOT,
                          capture_output=True, text=True, env={**plain, **(env or {})})


def section(text, heading):
    """A Markdown section: from its heading to the next heading of the same or a higher level."""
    level = heading.split(" ", 1)[0]
    start = text.index(heading + "\n")
    rest = text[start + len(heading) + 1:]
    ends = [m.start() for m in re.finditer(r"^#{1,%d} " % len(level), rest, re.M)]
    return heading + "\n" + (rest[: ends[0]] if ends else rest)


# --- what the report opens on ---

def test_report_opens_on_failing_groups_known_bugs_regressions_then_the_rest(matrix, tmp_path):
    base = tmp_path / "base"
    write_session(base, "cpu_torch26", "2.6.0", {CK: "pass"})
    render.write(render.build([matrix], [base]), tmp_path / "out")
    text = (tmp_path / "out" / "REPORT.md").read_text()
    order = ["# torch.compile compatibility report", "6 sessions on torch 2.4.1 to 2.6.0", "Exit status",
             "## Failing on the newest torch", "## Known bugs and documented limitations",
             "## Regressions and fixes between torch versions", "## Where Lightning changes an outcome",
             "## Other environments of a row",
             "## Against the baseline", "## Sessions", "## Matrix"]
    positions = [text.index(marker) for marker in order]
    assert positions == sorted(positions)
    paragraph = text.split("\n\n")[1]  # the summary: one paragraph right under the title, counting cases
    assert "8 cases" in paragraph and "On the newest torch of cpu (2.6.0, cpu_torch26), 6 cases ran: " \
        "3 pass, 1 skip, 1 limitation, 1 fail." in paragraph
    assert "1 case never ran on any session's device (folded)." in paragraph
    html = (tmp_path / "out" / "report.html").read_text()
    positions = [html.index(marker) for marker in ('id="answers"', 'id="failing"', 'id="known"', 'id="transitions"',
                                                   'id="baseline"', 'id="matrix-grid"', 'id="folded"',
                                                   'id="lightning"', 'id="other-environments"', 'id="sessions"')]
    assert positions == sorted(positions)


def test_failing_on_the_newest_torch_grouped_by_bug_with_its_commands(matrix):
    write_session(matrix, "cpu_torch27", "2.7.1", {
        NEST: {"outcome": "fail", "message": "Tensor-likes are not close!\n\nMismatched elements: 5 / 16"},
        OLD: {"outcome": "fail", "message": "Tensor-likes are not close!"}, CK: "pass",
        TE: {"outcome": "fail", "exc_type": "KeyError", "message": "key 0x7f3a2c at /tmp/a/b.py:12",
             "upstream": [TE_REF]}, PARAM: "limitation", REGION: "skip", CK_GPU: "skip", TE_GPU: "skip"})
    data = render.build([matrix])
    groups = [(g["line"], g["signature"], [c["case"] for c in g["cases"]], g["versions"]) for g in data["failing"]]
    assert groups == [
        ("cpu", "AssertionError: Tensor-likes are not close!", [NEST, OLD], ["2.5.1", "2.6.0", "2.7.1"]),
        ("cpu", "KeyError: key 0x… at <path>:N", [TE], ["2.7.1"]),
        ("cuda12", "crash: worker died", [CK_GPU], ["2.6.0+cu124"]),
    ]  # NEST failed on 2.6 and 2.7, OLD on 2.5 and 2.7: the group's versions are their union
    assert data["failing"][1]["declared"] == [{"ref": TE_REF}]  # declared, did not match
    text = section(render.render_markdown(data), "## Failing on the newest torch")
    assert "### Card A. ❌ AssertionError: Tensor-likes are not close!" in text
    assert "- **2 cases** on cpu; fails this way on torch 2.5.1 to 2.7.1 (since 2.5.1; newest 2.7.1)" in text
    assert f"- reproduce: `nox -s repro -- '{NEST}' --session cpu_torch27`; bisect: `nox -s bisect -- '{NEST}'`" in text
    # declared and not matched: named as text, never as a link that would pass for "reported"
    assert f"- **NEW**: not reported upstream (no declared reference matches this failure); declared for these " \
        f"cases, not this failure: {TE_REF}" in text
    assert "](https://github.com/NVIDIA/TransformerEngine/issues/890)" not in text
    assert "### Card C. 💥 crash: worker died" in text


PROP = "nested_compile/property_region[cpu-inductor-fullgraph]"
WRONG = "AssertionError: gradient 0: Tensor-likes are not close!"
WRONG_SIG = "AssertionError: gradient N: Tensor-likes are not close!"
SLOW = "RuntimeError: rematerialization does not support RNG ops"


def example(error, outcome="fail", reference=None):
    """A failing example as a property cell's record lists it (harness.plugin.properties.described)."""
    kind, _, message = error.partition(": ")
    return {"program": "def outer(x): ...", "figures": "Program()", "metrics": {}, "error": error,
            "signature": outcomes.bug_signature(kind, message), "outcome": outcome, "reference": reference}


def property_cell(*examples, declared=()):
    """A property cell that failed: one example as itself, several as the ExceptionGroup the harness raises."""
    ways = list(dict.fromkeys(e["error"] for e in examples))
    one = len(ways) == 1
    return {"outcome": "fail", "exc_type": ways[0].split(":")[0] if one else "builtins.ExceptionGroup",
            "message": ways[0].split(": ", 1)[1] if one else
            f"{len(examples)} of 5 examples failed, {len(ways)} ways: " + " | ".join(ways),
            "upstream": list(declared), "metrics": {"property": {"mode": "table", "examples_run": 5,
                                                                 "examples_failed": len(examples),
                                                                 "failing_examples": list(examples)}}}


def test_a_cards_versions_and_since_come_from_its_own_cells_in_version_order(tmp_path):
    # Sessions whose names and torch strings sort otherwise than their versions (2.10 and 2.11
    # before 2.9 as text); a case that failed this way earlier but passes now (OLD) is on no card.
    fail = {"outcome": "fail", "message": "Tensor-likes are not close!"}
    other = {"outcome": "fail", "exc_type": "KeyError", "message": "'x'"}
    write_session(tmp_path, "cpu_torch28", "2.8.0", {NEST: "pass", CK: "pass", OLD: fail})
    write_session(tmp_path, "cpu_torch29", "2.9.1", {NEST: fail, CK: other, OLD: fail})
    write_session(tmp_path, "cpu_torch210", "2.10.0", {NEST: "pass", CK: other, OLD: fail})
    write_session(tmp_path, "cpu_torch211", "2.11.0", {NEST: fail, CK: fail, OLD: "pass"})
    data = render.build([tmp_path])
    card, = data["failing"]
    assert card["signature"] == "AssertionError: Tensor-likes are not close!"
    assert [c["case"] for c in card["cases"]] == [CK, NEST]  # in row order
    assert card["versions"] == ["2.9.1", "2.10.0", "2.11.0"] and card["since"] == "2.9.1"  # not OLD's 2.8.0
    # per case: CK failed on 2.9.1 and 2.10.0 too, worded otherwise: one bug is followed by its case, not its
    # message; NEST passed on 2.10.0 in between
    assert {c["case"]: (c["versions"], c["since"]) for c in card["cases"]} == {
        NEST: (["2.9.1", "2.11.0"], "2.9.1"), CK: (["2.9.1", "2.10.0", "2.11.0"], "2.9.1")}
    assert card["wordings"] == [{"signature": "AssertionError: Tensor-likes are not close!",
                                 "spans": [["2.9.1", "2.9.1"], ["2.11.0", "2.11.0"]]},
                                {"signature": "KeyError: 'x'", "spans": [["2.9.1", "2.10.0"]]}]
    text = section(render.render_markdown(data), "## Failing on the newest torch")
    assert "- **2 cases** on cpu; fails this way on torch 2.9.1 to 2.11.0 (since 2.9.1; newest 2.11.0)" in text
    assert "- one bug, worded differently along the versions: `AssertionError: Tensor-likes are not close!` on " \
        "2.9.1, 2.11.0; `KeyError: 'x'` on 2.9.1 to 2.10.0\n" in text
    html = render.render_html(data)
    assert "One bug, worded differently along the versions" in html


def test_a_failing_program_is_one_bug_across_versions_however_torch_words_it(tmp_path):
    # One program, its error reworded between versions; another program that fails only on the newest.
    reworded = dict(example("AssertionError: target: aten.avg_pool2d_backward.default"), program="def op(x): pool(x)")
    now = dict(example("AssertionError: expected: len(padding) == 2"), program="def op(x): pool(x)")
    other = dict(example("AssertionError: expected: len(padding) == 2"), program="def op(x): other(x)")
    write_session(tmp_path, "cpu_torch21", "2.1.2", {PROP: property_cell(reworded)})
    write_session(tmp_path, "cpu_torch22", "2.2.2", {PROP: "pass"})
    write_session(tmp_path, "cpu_torch214", "2.14.1", {PROP: property_cell(reworded)})
    write_session(tmp_path, "cpu_torch215", "2.15.0", {PROP: property_cell(now, other)})
    card, = render.build([tmp_path])["failing"]
    assert card["spans"] == [["2.1.2", "2.1.2"], ["2.14.1", "2.15.0"]] and card["since"] == "2.1.2"
    assert [w["spans"] for w in card["wordings"]] == [[["2.15.0", "2.15.0"]],
                                                       [["2.1.2", "2.1.2"], ["2.14.1", "2.14.1"]]]


def test_each_failing_example_of_a_property_cell_joins_the_card_of_its_own_signature(tmp_path):
    # The newest cell failed three examples two ways, one of them a declared upstream bug; an older
    # one failed the first way alone (no group) and, before that, the second way inside a group.
    group_now = property_cell(example(WRONG), example(SLOW, "known", TE_REF), example(WRONG), declared=[TE_REF])
    write_session(tmp_path, "cpu_torch213", "2.13.0", {
        PROP: property_cell(example(SLOW, "known", TE_REF), example(SLOW, "known", TE_REF)), NEST: "pass"})
    write_session(tmp_path, "cpu_torch214", "2.14.1", {PROP: property_cell(example(WRONG)), NEST: "pass"})
    write_session(tmp_path, "cpu_torch215", "2.15.0", {
        PROP: group_now, NEST: {"outcome": "fail", "message": "gradient 7: Tensor-likes are not close!"}})
    data = render.build([tmp_path])
    assert not [c for c in data["failing"] if c["signature"].startswith("ExceptionGroup")]  # no card on the whole line
    cards = {c["signature"]: c for c in data["failing"]}
    assert set(cards) == {WRONG_SIG, outcomes.bug_signature("RuntimeError", SLOW.split(": ", 1)[1])}
    wrong = cards[WRONG_SIG]
    assert (wrong["status"], [(c["case"], c["examples"], c["which"]) for c in wrong["cases"]]) == (
        "new", [(NEST, [], None), (PROP, [1, 3], "examples 1 and 3 of 3")])  # the plain cell and the examples
    assert wrong["versions"] == ["2.14.1", "2.15.0"] and wrong["since"] == "2.14.1"
    slow, = [c for c in data["failing"] if c is not wrong]
    assert (slow["status"], slow["reference"], [(c["case"], c["which"]) for c in slow["cases"]]) == (
        "known", TE_REF, [(PROP, "example 2 of 3")])
    assert slow["versions"] == ["2.13.0", "2.15.0"] and slow["since"] == "2.13.0"  # from the 2.13 group's examples
    assert data["failing_cases"] == 2 and "2 cases fail there, in 2 groups by bug (1 not reported upstream)" \
        in data["summary"]  # PROP is on both cards, counted once
    text = section(render.render_markdown(data), "## Failing on the newest torch")
    assert f"`{PROP}` (examples 1 and 3 of 3)" in text and f"`{PROP}` (example 2 of 3)" in text
    assert "examples failed" not in text


def test_one_failure_through_two_backends_is_one_card(tmp_path):
    # The same error raised through aot_eager and through inductor (AOTAutograd's, shared by both):
    # one bug, one card, whose cases name each backend. Long enough to be cut, where the cut
    # depended on the backend name's length.
    tail = "RuntimeError: Activation checkpoint rematerialization in `forward-loss-backward` graph does not " \
           "support RNG ops in recompute regions, found in " + "x" * 120
    cells = {f"checkpoint/property_op[cpu-{backend}-fullgraph]": {
        "outcome": "fail", "exc_type": "BackendCompilerFailed", "message": f"backend='{backend}' raised:\n{tail}"}
        for backend in ("aot_eager", "inductor")}
    write_session(tmp_path, "cpu_torch215", "2.15.0", cells)
    card, = render.build([tmp_path])["failing"]
    assert [c["case"] for c in card["cases"]] == sorted(cells) and card["signature"].startswith(
        "BackendCompilerFailed: backend=… raised: RuntimeError: Activation checkpoint")


def test_every_card_says_its_upstream_status_and_a_reference_is_matched_or_not(tmp_path):
    limit = example("FullgraphRefused: fullgraph=True refused a graph break", "limitation", DOC_REF)
    write_session(tmp_path, "cpu_torch215", "2.15.0", {
        PROP: property_cell(example(WRONG), example(SLOW, "known", TE_REF), limit, declared=[TE_REF, DOC_REF]),
        # the same failure as PROP's known example, on a case that does not declare it
        NEST: {"outcome": "fail", "exc_type": "RuntimeError", "message": SLOW.split(": ", 1)[1]},
        OLD: {"outcome": "fail", "message": "Tensor-likes are not close!", "upstream": [PYG_REF]}})
    data = render.build([tmp_path])
    found = [(c["label"], c["status"], c["reference"], [x["case"] for x in c["cases"]],
              [other["label"] for other in c["same_failure"]]) for c in data["failing"]]
    slow = outcomes.bug_signature("RuntimeError", SLOW.split(": ", 1)[1])
    assert found == [
        ("Card A", "new", None, [OLD], []), ("Card B", "new", None, [PROP], []),
        ("Card C", "new", None, [NEST], ["Card D"]), ("Card D", "known", TE_REF, [PROP], ["Card C"]),
        ("Card E", "limitation", DOC_REF, [PROP], [])]  # NEW first
    assert data["failing"][2]["signature"] == data["failing"][3]["signature"] == slow
    for card in data["failing"]:  # a reference this card matched is never also "declared, not matched" on it
        assert card["reference"] not in [d["ref"] for d in card["declared"]]
    assert [d["ref"] for d in data["failing"][0]["declared"]] == [PYG_REF]
    text = section(render.render_markdown(data), "## Failing on the newest torch")
    cards = text.split("\n### ")[1:]
    assert cards[2].count("- **NEW**: not reported upstream") == 1 and "Card D" in cards[2]
    assert f"declared for these cases, not this failure: {PYG_REF}" in cards[0] and "](" not in cards[0]
    assert f"- 🐛 known upstream bug: [{TE_REF}](https://github.com/NVIDIA/TransformerEngine/issues/890)" in cards[3]
    assert f"- 🚧 documented limitation: [{DOC_REF}]({DOC_REF})" in cards[4] and "NEW" not in cards[4]
    html = render.render_html(data)
    at = [html.index(f'id="{card["anchor"]}"') for card in data["failing"]]
    new_card = html[at[0]:at[1]]
    assert "NEW: not reported upstream" in new_card and "<a href=\"https://github.com" not in new_card
    known_card = html[at[3]:at[4]]
    assert f'known upstream bug:</span> <a href="https://github.com/NVIDIA/TransformerEngine/issues/890">{TE_REF}</a>' \
        in known_card and "NEW" not in known_card


CATALOGUE = """
[[finding]]
number = 2
title = "a wrong output"
cases = ["nested_compile/recursive"]
signature = "Tensor-likes"
script = "found_wrong_output.py"
search = "wrong output"

[[finding]]
number = 3
title = "anything nested, on several cards"
cases = ["nested_compile/"]
signature = "."
script = "found_anything.py"
search = "anything"

[[finding]]
number = 7
title = "rematerialization refuses a random op"
cases = ["nested_compile/inner_outer"]
signature = "^RuntimeError: rematerialization"
script = "found_remat.py"
search = "rematerialization random"
"""


def test_a_card_is_named_by_the_finding_it_holds_everywhere_the_report_names_it(tmp_path, monkeypatch):
    # README, docs/findings.md and the issue texts number the findings; a card holding one is called
    # by that number whatever its place, and a card holding none by a letter, never a number.
    from harness.report import findings

    catalogue = tmp_path / "findings.toml"
    catalogue.write_text(CATALOGUE)
    load = findings.load
    monkeypatch.setattr(findings, "load", lambda path=catalogue: load(path))
    table = tmp_path / "table"
    write_session(table, "cpu_torch215", "2.15.0", {
        OLD: {"outcome": "fail", "message": "Tensor-likes are not close!"},
        CK: {"outcome": "fail", "message": "Tensor-likes are not close!"},
        NEST: {"outcome": "fail", "exc_type": "RuntimeError", "message": SLOW.split(": ", 1)[1]},
        PROP: property_cell(example(SLOW, "known", TE_REF), declared=[TE_REF])})
    data = render.build([table])
    cards = data["failing"]
    assert [(c["number"], c["label"], c["status"]) for c in cards] == [
        (1, "Finding 2", "new"), (2, "Finding 7", "new"), (3, "Card A", "known")]
    finding_7, card_a = cards[1], cards[2]
    assert finding_7["same_failure"] == [{"label": "Card A", "anchor": card_a["anchor"]}]
    assert card_a["same_failure"] == [{"label": "Finding 7", "anchor": finding_7["anchor"]}]
    assert [(f["number"], [c["label"] for c in f["cards"]]) for f in data["findings_unmatched"]] == [
        (3, ["Finding 2", "Finding 7", "Card A"])]
    text = section(render.render_markdown(data), "## Failing on the newest torch")
    headings = re.findall(r"^### (.*?)\. ", text, re.M)
    assert headings == ["Finding 2", "Finding 7", "Card A"]
    assert "the same failure on other cases: Card A" in text and "the same failure on other cases: Finding 7" in text
    assert not re.search(r"\bcards? \d", text, re.I)  # no card is called by its place
    html = render.render_html(data)
    failing = html[html.index('<section id="failing">'):html.index("</section>", html.index('<section id="failing">'))]
    assert (f'<a href="#{card_a["anchor"]}">Card A</a>' in failing
            and f'<a href="#{finding_7["anchor"]}">Finding 7</a>' in failing)
    assert re.search(r"Finding 3 \(anything nested[^)]*\) is on 3 cards \(<a href=\"#bug-\w+\">Finding 2</a>", failing)
    assert not re.search(r"\bcards? \d", re.sub(r"<[^>]+>", "", failing), re.I)


def test_the_bug_strip_marks_where_each_cards_cells_fail_ran_or_were_not_measured(tmp_path):
    # One line per card, one column per torch version of its line: where its cells fail this way,
    # where they ran and did not, and blank where none of its cases ran (2.7.1 has neither).
    fail = {"outcome": "fail", "message": "Tensor-likes are not close!"}
    other = {"outcome": "fail", "exc_type": "KeyError", "message": "'x'"}
    write_session(tmp_path, "cpu_torch27", "2.7.1", {OLD: "pass"})
    write_session(tmp_path, "cpu_torch28", "2.8.0", {NEST: "pass", CK: "pass", OLD: "pass"})
    write_session(tmp_path, "cpu_torch29", "2.9.1", {NEST: fail, CK: other, OLD: "pass"})
    write_session(tmp_path, "cpu_torch210", "2.10.0", {NEST: "pass", CK: "pass", OLD: "pass"})
    write_session(tmp_path, "cpu_torch211", "2.11.0", {NEST: fail, CK: fail, OLD: "pass"})
    data = render.build([tmp_path])
    card, = data["failing"]
    strip = data["bug_strip"]
    line, = strip["lines"]
    assert line["line"] == "cpu" and [v["short"] for v in line["versions"]] == ["2.7", "2.8", "2.9", "2.10", "2.11"]
    assert [v["torch"] for v in line["versions"]] == ["2.7.1", "2.8.0", "2.9.1", "2.10.0", "2.11.0"]
    row, = line["rows"]
    assert (row["label"], row["anchor"]) == (card["label"], card["anchor"])
    assert row["marks"] == [None, "ran", "fails", "ran", "fails"]
    fails, ran = strip["marks"]["fails"]["symbol"], strip["marks"]["ran"]["symbol"]
    assert fails != ran
    assert json.loads(json.dumps(data, default=str))["bug_strip"] == strip  # report.json carries it
    text = section(render.render_markdown(data), "## Failing on the newest torch")
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in text.splitlines() if line.startswith("|")]
    assert rows[0] == ["cpu", "2.7", "2.8", "2.9", "2.10", "2.11"]
    assert rows[2] == ["Card A", "", ran, fails, ran, fails]
    html = render.render_html(data)
    strip_html = html[html.index('id="bug-strip"'):]
    strip_html = strip_html[:strip_html.index("</table>")]
    assert f'<a href="#{card["anchor"]}">Card A</a>' in strip_html
    assert strip_html.count(f">{fails}<") == 2 and strip_html.count(f">{ran}<") == 2


def test_each_session_says_when_where_and_from_which_commit_it_was_measured(tmp_path):
    write_session(tmp_path, "cpu_torch24", "2.4.1", {CK: "pass", TE: "pass"}, started="2026-11-20T08:00:00+00:00",
                  git_commit="1111111aaaaaaaabbbb", cpu="AMD EPYC 7B13")
    write_session(tmp_path, "cpu_torch25", "2.5.1", {CK: "pass", TE: {"outcome": "pass", "reused_from": {
        "started": "2026-11-02T01:00:00+00:00", "git_commit": "0000000"}}},
                  started="2026-11-24T09:30:00+01:00", git_commit="2222222cccccccdddd",
                  cpu="Intel(R) Xeon(R) Processor")
    data = render.build([tmp_path])
    assert [(s["name"], s["measured"], s["git_commit"], s["cpu"]) for s in data["sessions"]] == [
        ("cpu_torch24", "2026-11-20T08:00:00+00:00", "1111111aaaaaaaabbbb", "AMD EPYC 7B13"),
        ("cpu_torch25", "2026-11-24T09:30:00+01:00", "2222222cccccccdddd", "Intel(R) Xeon(R) Processor")]
    # the oldest measurement is the record carried over from an earlier run
    assert "Measured from 2026-11-02 01:00 UTC (oldest) to 2026-11-24 08:30 UTC (newest)." in data["summary"]
    text = render.render_markdown(data)
    assert "| cpu_torch24 | 2.4.1 | 3.11 | 2.4.0 | 2026-11-20 08:00 UTC | 1111111aaaaa | AMD EPYC 7B13 |" in text
    # a passing exit status is no headline: it stands in the Sessions section, not under the summary
    assert "Exit status" not in text.split("## ")[0]
    assert "Exit status 0 (no --expect, no baseline" in section(text, "## Sessions")
    html = render.render_html(data)
    assert 'id="verdict-line"' not in html and html.index('id="exit-status"') > html.index('id="sessions"')
    assert "<td>AMD EPYC 7B13</td>" in html and "<code>2222222ccccc</code>" in html


def test_a_bug_signature_leaves_out_numbers_addresses_and_paths():
    one = {"outcome": "fail", "exc_type": "torch._dynamo.exc.Unsupported",
           "message": "object at 0x7f00aa12 in /work/a/torch/x.py line 12 (3 of 16)\nmore"}
    two = {**one, "message": "object at 0x55ffee01 in /home/b/torch/x.py line 480 (1 of 2)"}
    assert (results.bug_signature(one) == results.bug_signature(two)
            == "Unsupported: object at 0x… in <path> line N (N of N)")
    assert results.bug_signature({"outcome": "timeout", "message": None}) == "timeout"


def test_known_bugs_grouped_by_the_one_reference_each_case_matched(matrix):
    write_session(matrix, "cpu_torch27", "2.7.1", {
        TE: {"outcome": "known", "upstream": [PYG_REF, TE_REF]},  # matched the first, declared both
        PARAM: {"outcome": "limitation"}, CK: {"outcome": "fixed", "upstream": [TE_REF]},
        NEST: "pass", OLD: "pass", REGION: "skip", CK_GPU: "skip", TE_GPU: "skip"})
    data = render.build([matrix])
    groups = [(g["kind"], g["ref"], [(c["case"], c["line"], c["outcome"]) for c in g["cases"]]) for g in data["known"]]
    assert groups == [
        ("known", TE_REF, [(CK, "cpu", "fixed"), (TE, "cuda12", "known")]),
        ("known", PYG_REF, [(TE, "cpu", "known")]),
        ("limitation", DOC_REF, [(PARAM, "cpu", "limitation")]),
    ]  # TE on cpu under PYG_REF only, the one it matched; a documentation page is a limitation, not a bug
    text = section(render.render_markdown(data), "## Known bugs and documented limitations")
    assert f"- 🐛 [{PYG_REF}](https://github.com/Lightning-AI/pytorch-lightning/issues/20524): 1 case: `{TE}`" in text
    assert f"- 🚧 [{DOC_REF}]({DOC_REF}): 1 case: `{PARAM}`" in text
    assert text.index("🐛") < text.index("🚧")
    page = render.render_html(data)
    assert f'<a href="https://github.com/NVIDIA/TransformerEngine/issues/890">{TE_REF}</a>' in page


def test_regressions_apart_from_fixes_per_step_newest_first(matrix):
    data = render.build([matrix])
    steps = [(s["line"], s["from_session"], s["to_session"],
              [(t["case"], t["from"], t["to"]) for t in s["regressions"]], [t["case"] for t in s["fixes"]])
             for s in data["transitions"]]
    assert steps == [
        ("cpu", "cpu_torch25", "cpu_torch26", [(NEST, "pass", "fail")], []),
        ("cpu", "cpu_torch24", "cpu_torch25", [(PARAM, "pass", "limitation")], []),
        ("cuda12", "cuda12_torch25", "cuda12_torch26", [(CK_GPU, "pass", "crash")], []),
    ]  # TE differs only in cpu_torch25_py310_pyg, which is no step; no step crosses from cpu to cuda12
    # OLD passes on 2.4, fails on 2.5, passes on 2.6: no version range to bisect, a flip on both steps
    assert [[(t["case"], t["from"], t["to"]) for t in s["flips"]] for s in data["transitions"]] == [
        [(OLD, "fail", "pass")], [(OLD, "pass", "fail")], []]
    text = section(render.render_markdown(data), "## Regressions and fixes between torch versions")
    assert "| cpu | 2.5.1 → 2.6.0 | 1 |  | 1 |  |" in text and "| cuda12 | 2.5.1 → 2.6.0 | 1 |  |  |  |" in text
    assert f"- regressions 2.5.1 → 2.6.0 (cpu): `{NEST}`" in text
    assert "py310_pyg" not in text


def test_since_only_where_the_newest_outcome_held(tmp_path):
    for name, torch, outcome in (("cpu_torch24", "2.4.1", "fail"), ("cpu_torch25", "2.5.1", "pass"),
                                 ("cpu_torch26", "2.6.0", "fail"), ("cpu_torch27", "2.7.1", "fail")):
        write_session(tmp_path, name, torch, {CK: outcome, NEST: "pass" if name != "cpu_torch27" else "fail"})
    rows = {row["case"]: row for row in render.build([tmp_path])["cases"]}
    assert rows[CK]["since"] == {"cpu": "2.6.0"}  # not 2.4.1: it passed on 2.5.1
    assert rows[NEST]["since"] == {}  # it changed on the newest torch: nothing held
    write_session(tmp_path, "cpu_torch28", "2.8.0", {CK: "fail", NEST: "fail"})
    rows = {row["case"]: row for row in render.build([tmp_path])["cases"]}
    assert rows[NEST]["since"] == {"cpu": "2.7.1"}


def test_labelled_session_differences_are_listed_against_their_own_row(matrix):
    data = render.build([matrix])
    assert [(e["session"], e["plain"], e["compared"]) for e in data["other_environments"]] == [
        ("cpu_torch25_py310_pyg", "cpu_torch25", 6)]  # the two GPU cases skipped for want of a GPU
    assert data["other_environments"][0]["differences"] == [
        {"case": TE, "plain_outcome": "pass", "outcome": "known", "message": "Dynamic control flow is not supported"}]
    text = section(render.render_markdown(data), "## Other environments of a row")
    assert (f"- **cpu_torch25_py310_pyg** (torch 2.5.1, Python 3.10) against **cpu_torch25**: 1 case of 6 differ: "
            f"`{TE}`.") in text


def test_labelled_session_without_its_plain_session_says_so(tmp_path):
    write_session(tmp_path, "cpu_torch25_py310_pyg", "2.5.1", {CK: "pass"}, python="3.10")
    write_session(tmp_path, "cpu_torch24", "2.4.1", {CK: "fail"})
    data = render.build([tmp_path])
    assert data["transitions"] == [] and data["other_environments"][0]["plain_missing"]
    assert "no results for cpu_torch25, nothing to compare" in render.render_markdown(data)


EI = "empty_init/init_module_around_compiled_init_call[cpu-inductor-fullgraph]"
EI_EAGER = "empty_init/init_module_around_compiled_init_call[cpu-eager-fullgraph]"
FLOW = "empty_init/reporter_flow_fit_save_load_infer[cpu-inductor-fullgraph]"
EI_GPU = "empty_init/init_call_in_compiled_fn[cuda-eager-fullgraph]"
UNDER_MODE = "Dynamic control flow is not supported"


def test_each_gpu_cell_against_its_cpu_twin_in_the_same_row(tmp_path):
    # A CUDA session runs its cuda cells only; its row's CPU session ran their CPU twins.
    only_gpu = "checkpoint/gpu_only[cuda-eager-fullgraph]"  # no CPU twin: compared with nothing
    close = {"outcome": "fail", "message": "Tensor-likes are not close!\n\nMismatched elements: 3 / 16"}
    write_session(tmp_path, "cpu_torch25", "2.5.1", {CK: "pass", NEST: "pass", CK_GPU: "skip", TE_GPU: "skip"})
    write_session(tmp_path, "cuda12_torch25", "2.5.1+cu124", {CK_GPU: close, only_gpu: "pass", TE_GPU: "known"},
                  gpu="NVIDIA H100 80GB HBM3")
    write_session(tmp_path, "cpu_torch26", "2.6.0", {CK: "pass", NEST: "pass", CK_GPU: "skip"})
    data = render.build([tmp_path])
    assert [s["name"] for s in data["sessions"]] == ["cpu_torch25", "cuda12_torch25", "cpu_torch26"]  # beside its row
    (row,) = data["cuda_against_cpu"]
    assert (row["session"], row["cpu_session"], row["compared"], row["differences"]) == (
        "cuda12_torch25", "cpu_torch25", 1, 1)
    (group,) = row["groups"]
    assert group["signature"] == "AssertionError: Tensor-likes are not close!"
    assert group["cases"] == [{"case": CK_GPU, "twin": CK, "outcome": "fail", "cpu_outcome": "pass",
                               "message": "Tensor-likes are not close!"}]
    cells = {kase["case"]: kase["cells"] for kase in data["cases"]}
    assert cells[CK_GPU]["cuda12_torch25"]["cpu_twin"] == {"case": CK, "session": "cpu_torch25", "outcome": "pass"}
    assert "cpu_twin" not in cells[only_gpu]["cuda12_torch25"] and "cpu_twin" not in cells[CK]["cpu_torch25"]
    text = section(render.render_markdown(data), "## Where the GPU changes an outcome")
    assert ("- torch 2.5.1: **cuda12_torch25** (CUDA 12.4, NVIDIA H100 80GB HBM3) against **cpu_torch25**: 1 case of 1 "
            "differ, in 1 group.") in text
    assert (f"  - AssertionError: Tensor-likes are not close!: 1 case (pass on the CPU, fail on the GPU): "
            f"`{CK_GPU}`") in text
    render.write(data, tmp_path / "out")
    html = (tmp_path / "out" / "report.html").read_text()
    assert 'id="cuda"' in html and "twin-differs" in html


def test_without_a_cuda_session_there_is_no_gpu_section(tmp_path):
    write_session(tmp_path, "cpu_torch25", "2.5.1", {CK: "pass"})
    data = render.build([tmp_path])
    assert data["cuda_against_cpu"] == []
    assert "## Where the GPU changes an outcome" not in render.render_markdown(data)


def test_where_lightning_changes_an_outcome_per_row_grouped_by_bug(tmp_path):
    # Each row's era session ran every case; its Lightning-axis session only those that use Lightning.
    era = {CK: "pass", EI: "pass", EI_EAGER: "pass", EI_GPU: "skip",
           FLOW: {"outcome": "known", "exc_type": "torch._dynamo.exc.UserError", "message": UNDER_MODE + " at line 12",
                  "upstream": [PYG_REF]}}
    write_session(tmp_path, "cpu_torch24", "2.4.1", {**era, FLOW: "pass"})
    write_session(tmp_path, "cpu_torch24_lightning_newest", "2.4.1", {EI: "pass", EI_EAGER: "pass", EI_GPU: "skip",
                                                                       FLOW: "pass"}, lightning="2.6.6")
    write_session(tmp_path, "cpu_torch25", "2.5.1", era)
    attribute = {"outcome": "fail", "exc_type": "AttributeError",
                 "message": "'NoneType' object has no attribute 'type'"}
    write_session(tmp_path, "cpu_torch25_lightning_newest", "2.5.1", lightning="2.6.6", cases={
        EI: {**attribute, "message": attribute["message"] + " at 0x7f3a"}, EI_GPU: "skip",
        EI_EAGER: {**attribute, "message": attribute["message"] + " at 0x55aa"},
        FLOW: "fixed"})
    data = render.build([tmp_path])
    rows = {row["torch"]: row for row in data["lightning"]}
    assert rows["2.4.1"]["compared"] == 3 and rows["2.4.1"]["groups"] == []  # the GPU case: no device here
    row = rows["2.5.1"]
    assert (row["era_session"], row["era_lightning"], row["session"], row["lightning"], row["compared"]) == (
        "cpu_torch25", "2.4.0", "cpu_torch25_lightning_newest", "2.6.6", 3)
    # One bug, two addresses: one group; the side that does not pass names it (the era's known bug).
    assert [(g["signature"], [c["case"] for c in g["cases"]], g["changes"]) for g in row["groups"]] == [
        ("AttributeError: 'NoneType' object has no attribute 'type' at 0x…", [EI_EAGER, EI], ["pass → fail"]),
        ("UserError: Dynamic control flow is not supported at line N", [FLOW], ["known → fixed"])]
    assert row["groups"][-1]["bisect"] == f"nox -s bisect -- '{FLOW}' --along lightning --torch 2.5.1"
    # Not another environment of the row, and not missing the cases it does not run.
    assert [e["session"] for e in data["other_environments"]] == []
    sessions = {s["name"]: s for s in data["sessions"]}
    assert sessions["cpu_torch25_lightning_newest"]["complete"] and sessions["cpu_torch25"]["complete"]
    assert "2 of the Lightning axis" in data["summary"] and data["verdict"]["status"] == 0
    text = section(render.render_markdown(data), "## Where Lightning changes an outcome")
    assert ("- torch 2.5.1: **cpu_torch25** (Lightning 2.4.0) against **cpu_torch25_lightning_newest** (Lightning "
            "2.6.6): 3 cases of 3 differ, in 2 groups.") in text
    assert f"  - UserError: Dynamic control flow is not supported at line N: 1 case (known → fixed): " \
           f"`{FLOW}`; bisect: `nox -s bisect -- '{FLOW}' --along lightning --torch 2.5.1`" in text
    assert "the same outcome in all 3 cases both ran." in text
    render.write(data, tmp_path / "out")
    html = (tmp_path / "out" / "report.html").read_text()
    assert 'id="lightning"' in html and "--along lightning --torch 2.5.1" in html


def test_rows_where_lightning_changes_nothing_share_one_line_in_report_md(tmp_path):
    for name, torch in (("cpu_torch24", "2.4.1"), ("cpu_torch25", "2.5.1"), ("cpu_torch26", "2.6.0")):
        write_session(tmp_path, name, torch, {CK: "pass", EI: "pass", EI_EAGER: "pass"})
        write_session(tmp_path, f"{name}_lightning_newest", torch, {EI: "pass", EI_EAGER: "fail" if torch == "2.6.0"
                                                                     else "pass"}, lightning="2.6.6")
    text = section(render.render_markdown(render.build([tmp_path])), "## Where Lightning changes an outcome")
    assert "- the same outcome with either Lightning in every case both ran (how many) in 2 rows: " \
           "cpu_torch24 (2), cpu_torch25 (2)." in text
    assert "- torch 2.6.0: **cpu_torch26** (Lightning 2.4.0) against **cpu_torch26_lightning_newest** (Lightning " \
           "2.6.6): 1 case of 2 differ, in 1 group." in text
    assert "- torch 2.4.1" not in text and "No Lightning-axis session" not in text


def test_cases_that_never_ran_on_their_device_are_folded(tmp_path):
    now = tmp_path / "now"
    for name, torch in (("cpu_torch24", "2.4.1"), ("cpu_torch25", "2.5.1")):
        write_session(now, name, torch, {
            CK: "pass", CK_GPU: "skip",
            TE_GPU: {"outcome": "skip", "message": "needs a GPU"},  # a CUDA case on a CPU session, in other words
            REGION: {"outcome": "skip", "message": "missing: torch.compiler.region"}})
    data = render.build([now])
    assert data["folded"] == [CK_GPU, TE_GPU]
    grid = {c["case"]: c for c in data["cases"] if not c["folded"]}
    assert list(grid) == [CK, REGION] and grid[REGION]["all_skip"] and not grid[CK]["all_skip"]
    session = data["sessions"][0]
    assert (session["absent"], session["counts"]["skip"]) == (2, 1)  # skip: the missing API; no device: apart
    render.write(data, tmp_path / "out")
    assert "| cpu_torch24 | 2.4.1 | 3.11 | 2.4.0 | 2026-11-22 03:00 UTC | a2c391e | - | complete | ✅ 1 ⏭️ 1 – 2 |  |" \
        in (tmp_path / "out" / "REPORT.md").read_text()
    page = (tmp_path / "out" / "report.html").read_text()
    folded_html = page[page.index('<details id="folded">'):]
    assert f"<code>{CK_GPU}</code>" in folded_html and "2 cases did not run" in folded_html


def test_a_gpu_case_that_ran_somewhere_stays_with_its_absent_cells_marked(matrix):
    data = render.build([matrix])
    assert data["folded"] == [TE_GPU]  # CK_GPU ran on the CUDA sessions
    cells = next(c for c in data["cases"] if c["case"] == CK_GPU)["cells"]
    assert cells["cpu_torch24"]["absent"] and "absent" not in cells["cuda12_torch25"]


def test_upstream_links():
    assert outcomes.upstream_link("pytorch/pytorch#130104") == "https://github.com/pytorch/pytorch/issues/130104"
    assert outcomes.upstream_link(DOC_REF) == DOC_REF
    assert (outcomes.upstream_link("pytorch/pytorch:torch/utils/checkpoint.py")
            == "https://github.com/pytorch/pytorch/blob/HEAD/torch/utils/checkpoint.py")
    assert outcomes.upstream_link("see the docs") == ""


def test_reused_records_are_marked_and_counted(tmp_path):
    write_session(tmp_path, "cpu_torch24", "2.4.1", {CK: "pass", TE: "known"})
    write_session(tmp_path, "cpu_torch25", "2.5.1", {CK: {"outcome": "pass", "reused_from": REUSED},
                                                     TE: {"outcome": "known", "reused_from": REUSED}})
    data = render.build([tmp_path])
    assert data["reused"] == 2 and [s["reused"] for s in data["sessions"]] == [0, 2]
    assert data["cases"][0]["cells"]["cpu_torch25"]["reused_from"] == REUSED
    assert "reused_from" not in data["cases"][0]["cells"]["cpu_torch24"]
    assert "2 records reused from earlier runs, not measured in this one." in data["summary"]
    render.write(data, tmp_path / "out")
    assert json.loads((tmp_path / "out" / "report.json").read_text())["reused"] == 2


def test_committed_results_render_within_githubs_limits(tmp_path):
    """The checkout's own results (schema 1 or 2): REPORT.md at most 250 lines, none over 400 characters."""
    result = run_cli(ROOT / "results", "--out", tmp_path)
    assert result.returncode == 0, result.stderr
    # Its links to the checkout's files start with the way from this folder to the checkout (as long as
    # the checkout's path: act's workspace, a runner's); the committed REPORT.md, at the root, has none.
    way = os.path.relpath(ROOT, tmp_path) + "/"
    lines = (tmp_path / "REPORT.md").read_text().replace(f"]({way}", "](").splitlines()
    assert len(lines) <= 250 and max(map(len, lines)) <= 400, (len(lines), max(map(len, lines)))
    assert "nox -s repro -- '" in "\n".join(lines) and "nox -s bisect -- '" in "\n".join(lines)
    # the page of the whole matrix stays small: each cell's record loads from its session's file
    assert (tmp_path / "report.html").stat().st_size < 2_000_000


def test_report_md_shows_the_first_cards_and_counts_the_rest_which_the_page_shows(tmp_path, monkeypatch):
    data = render.build([ROOT / "results"])
    cards = data["failing"]
    assert len(cards) > 2
    monkeypatch.setattr(render, "MD_CARDS", 2)
    render.write(data, tmp_path)
    text, page = (tmp_path / "REPORT.md").read_text(), (tmp_path / "report.html").read_text()
    headings = [line for line in text.splitlines() if line.startswith("### ")]
    assert [h.split(". ")[0] for h in headings] == [f"### {card['label']}" for card in cards[:2]], headings
    assert f"And {len(cards) - 2} more cards in report.html." in text
    assert all(f'id="{card["anchor"]}"' in page for card in cards)
    for card in cards:  # every bug still on the strip above the cards
        assert f"| {card['label']} |" in text, card["label"]


def test_the_committed_tables_cards_agree_with_their_own_cells():
    """The checkout's results, read only: each card's versions are exactly the torch versions where one
    of its cases failed its way (whole, or as a failing example: one of the programs that fail its way on
    the newest torch), with the card's status and reference, however worded; `since` the first by version;
    no card stands for an ExceptionGroup's whole line; each says NEW, a reference or a limitation, never both."""
    from packaging.version import Version

    from harness.report import analysis
    from harness.report import cards as carding

    sessions = results.load_dirs([ROOT / "results"])
    data = render.build([ROOT / "results"])
    lines = analysis.version_lines(sessions)
    assert data["failing"], "the committed table has failing cards"
    for card in data["failing"]:
        found = set()
        newest = {s.name: s for s in sessions}[card["session"]]
        for case in card["cases"]:
            examples = ((newest.cases[case["case"]].get("metrics") or {}).get("property") or {}).get("failing_examples")
            programs = {examples[n - 1]["program"] for n in case["examples"]}  # none: the cell failed as a whole
            for session in lines[card["line"]]:
                record = session.cases.get(case["case"])
                if record and not session.absent(case["case"]) and any(
                        carding.status(f) == card["status"]
                        and (card["status"] == "new" or f["reference"] == card["reference"])
                        and (f["programs"] & programs if programs else not f["examples"])
                        for f in carding.failures(record)):
                    found.add(session.torch)
        order = sorted(found, key=lambda v: Version(v.split("+")[0]))  # packaging's order, as the report
        assert card["versions"] == order and card["since"] == order[0], card["signature"]
        examples = [c for c in card["cases"] if c["examples"]]
        assert not (examples and card["signature"].startswith("ExceptionGroup")), card["signature"]
        assert (card["status"] == "new") == (card["reference"] is None), card["signature"]
        assert card["reference"] not in [d["ref"] for d in card["declared"]]
    for session, row in zip(sessions, data["sessions"], strict=True):
        assert (row["git_commit"], row["cpu"]) == (session.environment.get("git_commit"),
                                                   session.environment.get("cpu"))


# --- the exit status: what makes the nightly red ---

def test_expected_sessions_decide_the_exit_status(matrix, tmp_path):
    out = tmp_path / "out"
    present = run_cli(matrix, "--out", out, "--expect", "cpu_torch24", "cpu_torch25,cuda12_torch26")
    assert present.returncode == 0, present.stdout + present.stderr
    assert "fails:" not in present.stdout
    missing = run_cli(matrix, "--out", out, "--expect", "cpu_torch24", "cuda12_torch24")
    assert missing.returncode == 1
    assert missing.stdout.splitlines()[-1] == "fails: expected session cuda12_torch24 has no results file"
    assert "| cuda12_torch24 | - | - | - | - | - | - | **no results file** |" in (out / "REPORT.md").read_text()
    data = json.loads((out / "report.json").read_text())
    assert data["expected"] == ["cpu_torch24", "cuda12_torch24"] and data["verdict"]["status"] == 1


def test_incomplete_sessions_fail_when_expected(matrix, tmp_path):
    write_session(matrix, "cpu_torch27", "2.7.1", {CK: "pass"}, finished=False)  # killed: no end record
    write_session(matrix, "cpu_torch28", "2.8.0", {CK: "pass"})  # finished without most cases
    data = render.build([matrix])
    by_name = {s["name"]: s for s in data["sessions"]}
    assert by_name["cpu_torch27"]["state"] == "incomplete: stopped early (no end record)"
    assert by_name["cpu_torch28"]["state"] == "incomplete: lacks 7 cases the other sessions have"
    assert by_name["cpu_torch27"]["counts"] == {"pass": 1, "not run": 7}
    assert next(c for c in data["cases"] if c["case"] == TE)["cells"]["cpu_torch27"] == {"outcome": "not run"}
    unexpected = run_cli(matrix, "--out", tmp_path / "out", "--expect", "cpu_torch26")
    assert unexpected.returncode == 0
    assert "note: session cpu_torch27 is incomplete: stopped early (no end record)" in unexpected.stdout
    expected = run_cli(matrix, "--out", tmp_path / "out", "--expect", "cpu_torch27", "cpu_torch28")
    assert expected.returncode == 1
    assert [line for line in expected.stdout.splitlines() if line.startswith("fails:")] == [
        "fails: expected session cpu_torch27 is incomplete: stopped early (no end record)",
        "fails: expected session cpu_torch28 is incomplete: lacks 7 cases the other sessions have"]
    assert "**incomplete: stopped early (no end record)**" in (tmp_path / "out" / "REPORT.md").read_text()


def test_baseline_statuses(matrix, tmp_path):
    base = tmp_path / "base"
    write_session(base, "cpu_torch25", "2.5.1", {TE: "pass", NEST: "pass", PARAM: "limitation", OLD: "known",
                                                 REGION: "fail", "checkpoint/gone[cpu-eager-fullgraph]": "pass"})
    write_session(base, "cpu_torch26", "2.6.0", {TE: "pass", NEST: {"outcome": "skip", "message": "missing: x"},
                                                 PARAM: "known", OLD: "error", CK_GPU: "skip"})
    data = render.build([matrix], [base])
    rows = [(r["session"], r["case"], r["status"], r["baseline"], r["now"]) for r in data["baseline"]["rows"]]
    assert rows == [  # regressed first: a known bug's cell that fails another way is no longer that bug
        ("cpu_torch25", OLD, "regressed", "known", "fail"),
        ("cpu_torch26", NEST, "newly failing", "skip", "fail"),
        ("cpu_torch26", OLD, "fixed", "error", "pass"),
        ("cpu_torch25", CK, "new", "not run", "pass"),
        ("cpu_torch26", CK, "new", "not run", "pass"),
        ("cpu_torch26", REGION, "new", "not run", "skip"),
        ("cpu_torch25", "checkpoint/gone[cpu-eager-fullgraph]", "removed", "pass", "not run"),
        ("cpu_torch26", PARAM, "still failing", "known", "limitation"),
    ]  # not listed: the same documented limitation (PARAM on 2.5), fail -> skip (REGION on 2.5: no verdict),
    # and the GPU cases that skipped for want of a GPU on either side
    assert data["baseline"]["not_in_baseline"] == ["cpu_torch24", "cuda12_torch25", "cpu_torch25_py310_pyg",
                                                   "cuda12_torch26"]
    text = section(render.render_markdown(data), "## Against the baseline")
    assert f"| cpu_torch25 | `{OLD}` | **regressed** | known | fail | Tensor-likes are not close! |" in text


def test_regressions_and_new_failing_cases_fail_the_report(tmp_path):
    now, base = tmp_path / "now", tmp_path / "base"
    write_session(now, "cpu_torch25", "2.5.1", {CK: "pass", TE: "known", NEST: "fail", OLD: "fail", PARAM: "pass"})
    write_session(now, "cpu_torch26", "2.6.0", {CK: "pass", TE: "known", NEST: "fail", OLD: "pass", PARAM: "pass"})
    write_session(base, "cpu_torch25", "2.5.1", {CK: "pass", OLD: "pass", PARAM: "pass"})
    summary = tmp_path / "summary.md"
    summary.write_text("earlier step\n")
    result = run_cli(now, "--baseline", base, "--out", tmp_path / "out", env={"GITHUB_STEP_SUMMARY": str(summary)})
    assert result.returncode == 1
    # a new case that fails as `fail` fails the report; a new known bug does not; nor does a session the
    # baseline lacks (cpu_torch26): it has nothing to compare with
    assert [line for line in result.stdout.splitlines() if not line.startswith("wrote ")] == [
        f"fails: cpu_torch25: {OLD}: regressed: pass -> fail (fail on purpose)",
        f"fails: cpu_torch25: {NEST}: new case fails: fail (fail on purpose)"]
    text = summary.read_text()
    assert text.startswith("earlier step\n# torch.compile compatibility report\n\n2 sessions")
    assert "**Exit status 1**: the report fails for 2 reasons:" in text
    assert f"- cpu_torch25: {OLD}: regressed: pass -> fail (fail on purpose)" in text
    assert "## Failing on the newest torch" in text and "**regressed**" in text and "## Matrix" not in text
    off = run_cli(now, "--baseline", base, "--out", tmp_path / "out", "--no-fail-on-regression")
    assert off.returncode == 0
    assert f"note: cpu_torch25: {OLD}: regressed: pass -> fail (fail on purpose)" in off.stdout
    # --no-fail-on-regression leaves --expect alone
    assert run_cli(now, "--baseline", base, "--out", tmp_path / "out", "--no-fail-on-regression",
                   "--expect", "cpu_torch27").returncode == 1
    write_session(base, "cpu_torch25", "2.5.1", {CK: "pass", TE: "known", NEST: "fail", OLD: "fail", PARAM: "pass"})
    same = run_cli(now, "--baseline", base, "--out", tmp_path / "out")
    assert same.returncode == 0, same.stdout  # failing as yesterday: the failures section shows it, not the status


def test_a_run_narrowed_to_some_families_is_compared_on_those_families_only(tmp_path):
    now, base = tmp_path / "now", tmp_path / "base"
    write_session(now, "cpu_torch25", "2.5.1", {CK: "pass", TE: "known"})  # the checkpoint family alone
    write_session(base, "cpu_torch25", "2.5.1", {CK: "pass", TE: "known",
                                                 "checkpoint/gone[cpu-eager-fullgraph]": "pass",
                                                 NEST: "fail", PARAM: "pass"})
    data = render.build([now], [base])
    assert [(r["case"], r["status"]) for r in data["baseline"]["rows"]] == [
        ("checkpoint/gone[cpu-eager-fullgraph]", "removed")]  # its family ran: a case gone from it is news
    assert data["verdict"]["status"] == 0


def test_a_session_on_another_torch_build_than_its_baseline_is_not_compared_and_fails(tmp_path):
    now, base = tmp_path / "now", tmp_path / "base"
    write_session(now, "cpu_torch25", "2.5.1+cpu", {CK: "fail"})
    write_session(base, "cpu_torch25", "2.5.1+cu124", {CK: "pass"})
    result = run_cli(now, "--baseline", base, "--out", tmp_path / "out")
    assert result.returncode == 1
    assert [line for line in result.stdout.splitlines() if line.startswith("fails:")] == [
        "fails: cpu_torch25: the baseline was measured on torch 2.5.1+cu124, this run on torch 2.5.1+cpu: not compared "
        "(run the baseline's build, or measure and commit the new one)"]
    assert "**regressed**" not in (tmp_path / "out" / "REPORT.md").read_text()


def test_a_cell_that_differs_only_as_the_machines_do_is_shown_so_not_as_a_regression(tmp_path):
    now, base = tmp_path / "now", tmp_path / "base"
    sources = {"cases/test_checkpoint.py": "c1", "cases/test_nested_compile.py": "n1", "harness/core/outcomes.py": "h1"}
    installs = {"packages": ["torch==2.5.1", "lightning==2.4.0"]}
    here = {"cpu": "Intel(R) Xeon(R) Processor", "os": "Debian GNU/Linux 12",
            "collect_env": "GCC version: (Debian) 12.2.0"}
    runner = {"cpu": "AMD EPYC 7763 64-Core Processor", "os": "Ubuntu 24.04", "collect_env": "GCC version: 13.3.0"}
    failing = "checkpoint/plain_checkpoint[cpu-eager-fullgraph]"  # fails on both machines: no difference to show
    write_session(base, "cpu_torch25", "2.5.1", {CK: "pass", NEST: "pass", failing: "fail"}, reuse_sources=sources,
                  **installs, **here)
    write_session(now, "cpu_torch25", "2.5.1", {CK: "fail", NEST: "fail", failing: "fail"}, **installs, **runner,
                  reuse_sources={**sources, "cases/test_nested_compile.py": "n2"})  # this run changed those cases
    done = run_cli(now, "--baseline", base, "--out", tmp_path / "out")
    # the checkpoint cell ran the same code on the same torch build: the machines differ, not the project or torch;
    # the nested_compile cell ran other code: held to the baseline as ever; the cell failing on both is still failing
    assert done.returncode == 1
    assert [row["status"] for row in json.loads((tmp_path / "out" / "report.json").read_text())["baseline"]["rows"]
            if row["case"] == failing] == ["still failing"]
    assert [line for line in done.stdout.splitlines() if line.startswith("fails:")] == [
        f"fails: cpu_torch25: {NEST}: regressed: pass -> fail (fail on purpose)"]
    assert "note: 1 cells differ from the baseline only as the machines do" in done.stdout
    text = (tmp_path / "out" / "REPORT.md").read_text()
    assert f"| cpu_torch25 | `{CK}` | **by machine** | pass | fail |" in text
    assert "(cpu: Intel(R) Xeon(R) Processor → AMD EPYC 7763 64-Core Processor; " \
           "os: Debian GNU/Linux 12 → Ubuntu 24.04; compiler: (Debian) 12.2.0 → 13.3.0)" in text
    write_session(now, "cpu_torch25", "2.5.1", {CK: "fail", NEST: "pass"}, reuse_sources=sources, **installs, **here)
    same_machine = run_cli(now, "--baseline", base, "--out", tmp_path / "out")
    assert same_machine.returncode == 1  # same machine, same code: a change is the run's, counted
    assert f"fails: cpu_torch25: {CK}: regressed: pass -> fail (fail on purpose)" in same_machine.stdout
    write_session(base, "cpu_torch25", "2.5.1", {CK: "pass", NEST: "pass"}, reuse_sources=sources, **installs,
                  cpu=here["cpu"], os=here["os"])  # an older record, without collect_env: no compiler to compare
    assert run_cli(now, "--baseline", base, "--out", tmp_path / "out").returncode == 1
    write_session(now, "cpu_torch25", "2.5.1", {CK: "fail", NEST: "pass"}, reuse_sources={
        **sources, "harness/core/outcomes.py": "h2"}, **installs, **runner)
    shared_changed = run_cli(now, "--baseline", base, "--out", tmp_path / "out")
    assert (f"fails: cpu_torch25: {CK}: regressed: pass -> fail (fail on purpose)"
            in shared_changed.stdout)  # code the cases share


def test_a_table_measured_again_on_another_machine_says_so_once_naming_its_sessions(tmp_path):
    now, base = tmp_path / "now", tmp_path / "base"
    here, runner, other = ({"cpu": "Intel(R) Xeon(R) Processor"}, {"cpu": "AMD EPYC"}, {"cpu": "Apple M2"})
    for name, machine in (("cpu_torch24", runner), ("cpu_torch25", runner), ("cpu_torch26", other)):
        write_session(base, name, "2.5.1", {CK: "pass"}, **here)
        write_session(now, name, "2.5.1", {CK: "pass"}, **machine)
    run_cli(now, "--baseline", base, "--out", tmp_path / "out")
    lines = [line for line in (tmp_path / "out" / "REPORT.md").read_text().splitlines() if "different machines" in line]
    assert [line.split(": this run")[0] for line in lines] == ["cpu_torch24, cpu_torch25", "cpu_torch26"]
    assert "(cpu: Intel(R) Xeon(R) Processor → AMD EPYC)" in lines[0]
    assert "(cpu: Intel(R) Xeon(R) Processor → Apple M2)" in lines[1]
    page = (tmp_path / "out" / "report.html").read_text()
    assert page.count("ran on different machines") == 2 and "cpu_torch24, cpu_torch25: this run" in page
    for name in ("cpu_torch27", "cpu_torch28"):  # past three, REPORT.md names two and counts the rest
        write_session(base, name, "2.5.1", {CK: "pass"}, **here)
        write_session(now, name, "2.5.1", {CK: "pass"}, **runner)
    run_cli(now, "--baseline", base, "--out", tmp_path / "out")
    text = (tmp_path / "out" / "REPORT.md").read_text()
    assert "cpu_torch24, cpu_torch25 and 2 more sessions (report.html): this run" in text
    page = (tmp_path / "out" / "report.html").read_text()
    assert "cpu_torch24, cpu_torch25, cpu_torch27, cpu_torch28: this run" in page


def test_the_previous_run_is_for_information_and_its_absence_is_stated(tmp_path):
    now, table, night = tmp_path / "now", tmp_path / "table", tmp_path / "night"
    write_session(now, "cpu_torch25", "2.5.1", {CK: "fail", OLD: "pass"})
    write_session(table, "cpu_torch25", "2.5.1", {CK: "fail", OLD: "pass"})  # committed: CK fails, still
    write_session(night, "cpu_torch25", "2.5.1", {CK: "pass", OLD: "pass"})
    done = run_cli(now, "--baseline", table, "--previous", night, "--out", tmp_path / "out")
    assert done.returncode == 0, done.stdout  # CK regressed since last night, but it is what the table holds
    text = (tmp_path / "out" / "REPORT.md").read_text()
    assert f"| cpu_torch25 | `{CK}` | **regressed** | pass | fail |" in section(
        text, "## Against the previous run (for information)")
    assert 'id="previous"' in (tmp_path / "out" / "report.html").read_text()
    gone = run_cli(now, "--baseline", table, "--previous-unavailable", "GET https://api.github.com/x: 502 Server Error",
                   "--out", tmp_path / "out")
    assert gone.returncode == 1
    assert ("fails: the previous nightly could not be fetched: GET https://api.github.com/x: 502 Server Error"
            in gone.stdout)
    assert "The previous run could not be fetched: GET" in (tmp_path / "out" / "REPORT.md").read_text()


def test_a_change_for_the_worse_is_annotated_on_the_cases_file_and_line(tmp_path):
    now, base = tmp_path / "now", tmp_path / "base"
    where = {"file": "cases/test_checkpoint.py", "line": 42}
    write_session(now, "cpu_torch25", "2.5.1", {
        CK: {"outcome": "fail", "message": "50% off\nsecond", "location": where},
        TE: {"outcome": "known", "location": where}})
    write_session(base, "cpu_torch25", "2.5.1", {CK: "pass", TE: "known"})
    done = run_cli(now, "--baseline", base, "--out", tmp_path / "out", env={"GITHUB_ACTIONS": "true"})
    assert done.returncode == 1
    assert [line for line in done.stdout.splitlines() if line.startswith("::")] == [
        f"::error file=cases/test_checkpoint.py,line=42,title=regressed against the baseline::cpu_torch25: {CK}: "
        "regressed: pass -> fail (50%25 off)"]  # the known cell that stayed known: no annotation
    assert "::error" not in run_cli(now, "--baseline", base, "--out", tmp_path / "out").stdout  # off a runner


@pytest.mark.parametrize(
    ("damage", "error"),
    [
        (lambda text: text.replace(f'"schema": {records.SCHEMA_VERSION}', '"schema": 7', 1),
         r"cpu_torch25.jsonl:1: schema 7"),
        (lambda text: "garbage\n" + text, r"cpu_torch25.jsonl:1: not a JSON record"),
        (lambda text: "", r"cpu_torch25.jsonl:1: the file does not start with an environment record"),
    ],
    ids=["schema", "garbage", "empty"],
)
def test_bad_input_names_file_and_line_and_writes_nothing(matrix, tmp_path, damage, error):
    out = tmp_path / "out"
    out.mkdir()
    (out / "REPORT.md").write_text("yesterday's report\n")
    path = matrix / "cpu_torch25.jsonl"
    path.write_text(damage(path.read_text()))
    result = run_cli(matrix, "--out", out, "--expect", "cpu_torch25")
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and re.search(error, result.stderr), result.stderr
    assert (out / "REPORT.md").read_text() == "yesterday's report\n"
    assert sorted(p.name for p in out.iterdir()) == ["REPORT.md"]


def test_a_record_cut_short_is_passed_over_and_said_and_its_session_is_incomplete(matrix, tmp_path):
    # A session killed while writing its last line: the reader keeps the records before it, names
    # the line it passed over, and the session has no end record (exit 1: an expected session incomplete).
    path = matrix / "cpu_torch25.jsonl"
    text = path.read_text()
    path.write_text(text[: text.rindex('"outcome"')])
    result = run_cli(matrix, "--out", tmp_path / "out", "--expect", "cpu_torch25")
    assert result.returncode == 1, result.stderr
    assert re.search(r"cpu_torch25.jsonl.*passed over \(line \d+: not a JSON record", result.stderr), result.stderr
    assert "**incomplete: stopped early (no end record)**" in (tmp_path / "out" / "REPORT.md").read_text()


def test_a_record_past_the_first_with_an_unknown_outcome_is_passed_over_and_said(matrix, tmp_path):
    # Past the environment record, a line that is not a record of the harness (written by a case, say)
    # is counted and named, never fatal: the session's own records still make the report.
    path = matrix / "cpu_torch25.jsonl"
    path.write_text(path.read_text().replace('"outcome": "pass"', '"outcome": "passed"', 1))
    result = run_cli(matrix, "--out", tmp_path / "out", "--expect", "cpu_torch25")
    assert result.returncode != 2 and (tmp_path / "out" / "REPORT.md").is_file(), result.stderr  # not bad input
    assert re.search(r"cpu_torch25.jsonl: 1 line\(s\) .* passed over \(line 2: unknown outcome 'passed'\)",
                     result.stderr), result.stderr


def test_no_results_is_an_error(tmp_path):
    result = run_cli(tmp_path, "--expect", "cpu_torch25")
    assert result.returncode == 2 and "no results files" in result.stderr


def test_outputs_are_whole_and_readable(matrix, tmp_path):
    paths = render.write(render.build([matrix]), tmp_path / "out")
    assert (sorted(p.name for p in (tmp_path / "out").iterdir())
            == ["REPORT.md", "report-cells", "report.html", "report.json"])
    # the page's cells files: one per session, each record of a case that ran somewhere
    assert sorted(p.name for p in (tmp_path / "out" / "report-cells").iterdir()) == sorted(
        f"{s['name']}.js" for s in json.loads((tmp_path / "out" / "report.json").read_text())["sessions"])
    assert all(p.stat().st_mode & 0o044 == 0o044 for p in paths)  # not mkstemp's private mode
    merged = json.loads((tmp_path / "out" / "report.json").read_text())
    assert merged["schema"] == records.SCHEMA_VERSION and len(merged["cases"]) == 8
    assert {"folded", "transitions", "other_environments", "failing", "known", "verdict", "summary",
            "reused"} <= set(merged)


def test_html_is_self_contained(matrix, tmp_path):
    hostile = "{{ data }} </script><script>alert(1)</script> {% raw %}"
    write_session(matrix, "cpu_torch27", "2.7.1", {NEST: {"outcome": "fail", "message": hostile}})
    render.write(render.build([matrix]), tmp_path)
    html = (tmp_path / "report.html").read_text()
    assert html.count("</script>") == 1 and html.count("<script>") == 1  # the page's own, the message escaped
    assert "{{ data }} &lt;/script&gt;&lt;script&gt;alert(N)&lt;/script&gt; {% raw %}" in html  # in the failing group
    assert "<script src" not in html and "<link" not in html and "@import" not in html
    assert not re.search(r"(src|href)=\"(https?:)?//", html.replace('href="https://github.com/', "").replace(
        f'href="{DOC_REF}"', ""))
    assert "te_wrapper[cpu-eager-fullgraph]" in html
    # a cell's whole record comes from the script file beside the page, the message whole and inert
    cells = (tmp_path / "report-cells" / "cpu_torch27.js").read_text()
    assert cells.startswith('REPORT_CELLS("cpu_torch27",') and "</script" not in cells and "alert(1)" in cells


def test_torch_nightly_is_held_to_the_newest_release_for_information(tmp_path):
    now, table = tmp_path / "now", tmp_path / "table"
    write_session(now, "cpu_torch_nightly", "2.16.0.dev20261125+cpu", {CK: "fail", OLD: "pass", TE: "known"})
    write_session(table, "cpu_torch214", "2.14.1", {CK: "pass", OLD: "pass", TE: "known"})
    write_session(table, "cpu_torch215", "2.15.0", {CK: "pass", OLD: "fail", TE: "known"})
    done = run_cli(now, "--baseline", table, "--out", tmp_path / "out")
    assert done.returncode == 0, done.stdout  # a pre-release's changes never set the exit status
    data = json.loads((tmp_path / "out" / "report.json").read_text())
    entry, = data["nightly_torch"]
    assert (entry["release_session"], entry["compared"]) == ("cpu_torch215", 3)  # the newest release, not 2.14
    assert [(d["case"], d["release"], d["nightly"]) for d in entry["worse"]] == [(CK, "pass", "fail")]
    assert [d["case"] for d in entry["better"]] == [OLD]
    assert "note: cpu_torch_nightly: 1 cell worse on torch 2.16.0.dev20261125+cpu than on 2.15.0 (cpu_torch215): " \
        "possible upstream regressions" in done.stdout
    text = section((tmp_path / "out" / "REPORT.md").read_text(), "## Torch nightly against the newest release")
    assert "- **cpu_torch_nightly** (torch 2.16.0.dev20261125+cpu) against **cpu_torch215**: 3 cases compared, " \
           f"1 worse, 1 better: `{CK}`" in text
    assert 'id="nightly-torch"' in (tmp_path / "out" / "report.html").read_text()


def test_the_first_screen_says_what_of_the_matrix_ran_on_a_gpu_and_when_nothing_did(tmp_path):
    without, with_gpu = tmp_path / "cpu-only", tmp_path / "with-gpu"
    for directory in (without, with_gpu):
        write_session(directory, "cpu_torch25", "2.5.1", {CK: "pass", CK_GPU: "skip", TE_GPU: "skip"})
        write_session(directory, "cpu_torch26", "2.6.0", {CK: "pass", CK_GPU: "skip", TE_GPU: "skip"})
    write_session(with_gpu, "cuda12_torch25", "2.5.1+cu124", {CK_GPU: "pass"}, gpu="NVIDIA H200")
    none = render.build([without])
    assert none["summary_parts"][1] == ("GPU: no CUDA row is measured: none of the 2 cases whose device is `cuda` "
                                        "has run on a GPU (a CUDA session, `nox -s cudaNN_torchXY`, needs one: "
                                        "docs/gpu.md).")
    some = render.build([with_gpu])
    assert some["summary_parts"][1] == ("GPU: 1 CUDA row: cuda12_torch25 (torch 2.5.1+cu124, NVIDIA H200) ran 1 of the "
                                        "2 cases whose device is `cuda`; 1 torch row has none on a GPU.")
    assert some["summary_parts"][1] in render.render_markdown(some).split("## ")[0]  # above the first section


def test_a_damaged_results_file_is_said_in_the_report_never_a_traceback(tmp_path):
    write_session(tmp_path, "cpu_torch25", "2.5.1", {CK: {"outcome": "fail", "message": "Tensor-likes are not close!"}})
    path = tmp_path / "cpu_torch25.jsonl"
    lines = path.read_text().splitlines()
    twice = json.loads(lines[1])
    lines[2:2] = [json.dumps({**twice, "outcome": "pass"}),
                  json.dumps({"schema": 2, "kind": "case", "outcome": "pass"})]
    path.write_text("\n".join(lines) + "\n")
    done = run_cli(tmp_path, "--out", tmp_path / "out", "--no-since-committed")
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stdout[-2000:] + done.stderr[-2000:]
    notes = [line for line in done.stdout.splitlines() if line.startswith("note: ")]
    assert any(f"line 3: {CK} recorded again (fail at line 2, then pass): the first record is kept" in n for n in notes)
    assert any("line 4: a case record without 'case'" in n for n in notes), notes
    data = json.loads((tmp_path / "out" / "report.json").read_text())
    assert {c["case"]: c["cells"]["cpu_torch25"]["outcome"] for c in data["cases"]}[CK] == "fail"
