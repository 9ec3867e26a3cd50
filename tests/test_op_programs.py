"""cases/programs/opinfo.py, opcall.py, op_programs.py: programs around one op of torch's own OpInfo
database, with this venv's real op_db and torch.compile. The catalogue classifies what each op does;
a drawn call is written as code holding its sample exactly; a program's script passes its control
(no compile) and catches what compiled code does otherwise, with the oracle of its op's class."""

import re
import sys
import unittest.mock

import pytest
import torch
from hypothesis.errors import UnsatisfiedAssumption

from harness.core import paths

sys.path.insert(0, str(paths.CASES))  # the case families' support modules, as cases/conftest.py sees them

from programs import op_programs, opcall, opinfo  # noqa: E402
from programs.nested_compile import NestedOpProgram  # noqa: E402
from programs.op_programs import OpProgram  # noqa: E402


class FakeCase:
    def __init__(self):
        self.metrics = {}

    def record(self, **figures):
        self.metrics.update(figures)


def sample_of(name: str, wanted) -> opcall.OpCall:
    """The first call of op `name` whose written form `wanted(call_text)` accepts."""
    entry = opinfo.catalogue().entries[(name, "")]
    for index in range(entry.samples):
        call = opcall.OpCall(name, "", index, dtype="float64" if "random" in entry.classes else "float32")
        if wanted(call.materialise().call):
            return call
    raise AssertionError(f"no sample of {name} fits")


def test_the_catalogue_sorts_this_torchs_ops_into_every_class():
    found = opinfo.catalogue()
    assert found.error is None and found.left_out > 0
    assert all(found.of_class(name) for name in opinfo.OP_CLASSES)
    assert ("nn.functional.dropout", "") in found.of_class("random")  # random on its later samples (p > 0)
    assert ("cauchy", "") in found.of_class("random") and found.entries[("cauchy", "")].path is None  # x.cauchy_()
    assert ("add", "") in found.of_class("inplace") and ("sum", "") in found.of_class("reduction")
    assert ("transpose", "") in found.of_class("view") and ("argmax", "") in found.of_class("dtype_changing")
    assert opinfo.about()["op_db"]["ops"] == len(found.entries)


def test_a_call_is_written_with_its_samples_exact_values():
    call = opcall.OpCall("add", "", 0)
    made = call.materialise()
    sample = call.sample_input(0)
    written = [eval(text, {"torch": torch}) for text in made.values[0]]
    given = [t for t in (sample.input, *sample.args) if isinstance(t, torch.Tensor)]
    assert len(written) == len(given) == len(made.names)
    for ours, theirs in zip(written, given, strict=True):
        assert torch.equal(ours, theirs) and ours.dtype == theirs.dtype and ours.requires_grad == theirs.requires_grad
    assert made.call.startswith("torch.add(x0, x1")


def test_passed_numbers_become_parameters_and_a_second_sample_has_the_same_form():
    call = sample_of("nn.functional.hardtanh", lambda text: "min_val=" in text)
    passed = opcall.OpCall(call.op, "", call.sample, passed=True)
    alike = passed.calls_alike()
    assert alike, "hardtanh has other samples of the same form"
    made = opcall.OpCall(call.op, "", call.sample, passed=True, then=alike[0]).materialise()
    assert re.search(r"\ba0\b", made.call) and len(made.values) == 2 and "a0" in made.names


def test_what_has_no_literal_form_is_not_drawn():
    with pytest.raises(opcall.NotMaterialisable):
        opcall.literal(lambda: 0)
    assert opcall.literal(float("inf")) == "float('inf')" and opcall.literal(torch.float16) == "torch.float16"


def test_a_program_passes_its_control_and_its_compiled_run():
    program = OpProgram(opcall.OpCall("sin"))
    script = program.script("aot_eager")
    with unittest.mock.patch("torch.compile", op_programs.without_compile):
        op_programs.run_script(script)
    case = FakeCase()
    op_programs.check_op_program(case, program, "aot_eager")
    assert case.metrics == {"op": "sin", "op_class": "other", "oracle": op_programs.DETERMINISTIC}


def test_a_compile_only_failure_is_raised():
    # torch 2.1-2.15: inductor's avg_pool2d backward lowering refuses a 1-element padding tuple (the
    # forward took it from pytorch/pytorch#96727); eagerly it is fine, so the control passes.
    call = sample_of("nn.functional.avg_pool2d", lambda text: "(0,)" in text)
    with pytest.raises(Exception, match="len\\(padding\\) == 2"):
        op_programs.check_op_program(FakeCase(), OpProgram(call), "inductor")


def test_fullgraph_refusing_a_graph_break_is_named():
    program = NestedOpProgram(opcall.OpCall("sin"), wrap="graph_break", fullgraph=True)
    with pytest.raises(op_programs.FullgraphRefused, match="fullgraph=True refused a graph break"):
        op_programs.check_op_program(FakeCase(), program, "eager")


def test_an_example_its_oracle_cannot_judge_is_rejected():
    # torch.normal's gradient with respect to its mean is not the slope of its draws (a zero one):
    # the control fails, and the example is not one the random oracle can judge.
    call = sample_of("normal", lambda text: True)
    with pytest.raises(UnsatisfiedAssumption):
        op_programs.check_op_program(FakeCase(), OpProgram(call), "eager")


def test_the_random_oracle_catches_a_gradient_that_is_not_the_forwards_draw():
    call = sample_of("nn.functional.dropout", lambda text: "p=0.0" not in text and "training=False" not in text)
    program = OpProgram(call)
    assert program.op_class == "random"
    script = program.script("eager")
    op_programs.run_script(script)  # consistent: it passes
    # A "compiled" function whose backward draws another mask than its forward: the wrong gradient
    # a recompute with fresh randomness gives.
    wrong = ("def compiled(*args):\n"
             "    forward, backward = op(*args), op(*args)\n"
             "    return forward.detach() + backward - backward.detach()\n")
    broken = re.sub(r"compiled = torch\.compile\(fn, [^\n]*\)\n", wrong, script)
    assert broken != script
    with pytest.raises(AssertionError, match="does not agree with the forward's own draw"):
        op_programs.run_script(broken)


def test_the_disk_caches_are_met_in_a_second_process_that_they_serve(capsys):
    # recompile's "disk" mode: every state compiled here, then again in a second Python process with
    # the same cache directory and nothing in memory, whose compiles inductor's FX graph cache and
    # AOTAutograd's cache serve (this torch keeps both); its results are judged here.
    from programs.recompile import RecompileOpProgram

    program = RecompileOpProgram(opcall.OpCall("sin"), states=("no_grad", "none"), cache="disk")
    op_programs.check_op_program(FakeCase(), program, "inductor")
    served = capsys.readouterr().out.split("the second process's compiles, by the caches: ")[-1]
    assert re.search(r"'inductor fxgraph_cache_hit': [1-9]", served), served
    # What the second process computes is what the oracle judges: a failure there is the case's.
    script = program.script("eager").replace("warm = [(label,", "raise ValueError('planted')\n    warm = [(label,")
    with pytest.raises(RuntimeError, match="the second process failed: ValueError: planted"):
        op_programs.run_script(script)
    # Its control runs without compile in both processes (torch.compile off in the second too).
    with unittest.mock.patch("torch.compile", op_programs.without_compile):
        op_programs.run_script(program.script("inductor"))
    assert "no cache counted" in capsys.readouterr().out


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "inductor"])
def test_the_disk_mode_is_drawn_for_the_backend_that_keeps_compiles_on_disk(backend):
    from hypothesis import given, settings

    from programs.recompile import recompile_op_programs

    drawn = set()

    @settings(max_examples=40, database=None, derandomize=True, deadline=None)
    @given(recompile_op_programs(opcall.op_calls(), "cpu", backend))
    def draw(program):
        drawn.add(program.cache)

    draw()
    assert drawn == ({"memory", "disk", "off"} if backend == "inductor" else {"memory", "off"}), drawn


def test_a_disk_example_under_aot_eager_is_served_nothing_from_disk(capsys):
    # Why the disk mode is drawn for inductor alone: AOTAutograd caches inductor's programs only, so the
    # second process of an aot_eager (or eager) program compiles afresh. Were this torch to keep them, this
    # fails, and the disk mode belongs to that backend's draws too (programs.recompile.caches_for).
    from programs.recompile import RecompileOpProgram

    program = RecompileOpProgram(opcall.OpCall("sin"), states=("no_grad", "none"), cache="disk")
    torch._dynamo.reset()
    op_programs.run_script(program.script("aot_eager"))
    assert "the second process's compiles, by the caches: no cache counted" in capsys.readouterr().out
