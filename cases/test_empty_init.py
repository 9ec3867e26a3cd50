"""Lightning's `_EmptyInit` torch-function mode and compiled code: does the mode still do what it is
for when the code it governs runs inside a compiled region?

`lightning.fabric.utilities.init._EmptyInit` is a `TorchFunctionMode` that skips `torch.nn.init`
calls when enabled (a module built under it keeps uninitialised memory and draws no random numbers)
and does nothing when disabled. `Fabric.init_module(empty_init=...)`, `Trainer.init_module(...)`
and the `configure_model` hook push it, with `enabled=False` when empty init is off.

Figures, measured eagerly and compiled, recorded both, asserted equal and asserted to be what the
mode is for (enabled: nothing initialised; disabled: initialised):
- `sentinels_initialised`: of two zero tensors given to `torch.nn.init.constant_` and
  `kaiming_uniform_` (what `nn.Linear.reset_parameters` calls), how many changed;
- `rng_advanced`: whether the global RNG moved (a skipped init draws no random numbers); for a
  module built inside the compiled function this is the figure;
- `sentinel_initialised` in the cases about other compiled calls under the mode: an eager init
  right after the compiled call, under the same mode (the mode still works after it).

Findings the cases carry:
- From torch 2.2 (2.1 behaves like eager), init calls made inside a compiled function are not
  skipped: Dynamo evaluates `has_torch_function_variadic(tensor)` in `torch.nn.init` as False while a
  mode is active, so the mode sees `fill_`/`uniform_` instead of the `torch.nn.init` call (eager sees
  `torch.nn.init.constant_`). pytorch/pytorch#196053 (open) describes this and changes it.
- Entering a TorchFunctionMode inside a compiled region graph-breaks before 2.5
  (pytorch/pytorch#130104); building a module inside a compiled region graph-breaks on the
  `nn.Parameter` constructor (documented) and failed with a TorchRuntimeError in 2.4
  (pytorch/pytorch#127697).
- Lightning-AI/pytorch-lightning#20524: a compiled call with `fullgraph=True, dynamic=True` while the
  mode is active raises `UserError: Dynamic control flow is not supported` at `if not self.enabled:`
  (torch 2.5 only): with dynamic shapes Dynamo's generated code calls `x.size(0)` eagerly, the mode's
  `__torch_function__` runs as a frame Dynamo compiles on its own, and in 2.5 the mode's attributes
  are not constants there. The cases reproduce the reported error (the same UserError, on torch 2.5.1
  with Lightning 2.4.0) in a reconstructed flow, since the report has no code: fit, `save_checkpoint`,
  then `load_from_checkpoint` under `Trainer.init_module` with a forward injected in
  `on_load_checkpoint`, or inference under `Fabric.init_module`; the compile flags
  (`fullgraph=True, dynamic=True`) are assumed, the report does not give them; a torch_geometric
  `MessagePassing` layer as the reporter used. Directly too: such a call while the mode is active.
- `copy.copy(tensor)` inside a compiled function under the mode raises an AttributeError (below).

Lightning flows run on CPU only (one device, no logger, no checkpoint callback, tiny data).
"""

import contextlib
import copy
import dataclasses
import functools
import math

import pytest
import torch

from harness.plugin.casekit import need
from harness.plugin.properties import explore
from programs.empty_init import (
    EmptyInitOpProgram,
    EmptyInitProgram,
    check_empty_init_program,
    empty_init_op_programs,
    empty_init_programs,
    figures,
)
from programs.op_programs import check_op_program
from programs.opcall import OpCall, op_calls
from programs.opinfo import about, need_op_db
from shared_declarations import FULLGRAPH_REFUSES_GRAPH_BREAK

# Compiled code runs torch.nn.init calls the enabled mode skips eagerly (the figure message below).
INIT_NOT_SKIPPED = pytest.mark.upstream_bug(
    "pytorch/pytorch#196053", raises="AssertionError",
    match=r"enabled=True: compiled \{'sentinels_initialised': [12]", since="2.2")
MODE_IN_REGION = pytest.mark.upstream_bug("pytorch/pytorch#130104", raises="Unsupported", match="TorchFunctionMode")
PARAM_CTOR = pytest.mark.limitation("https://meta-pytorch.github.io/compile-graph-break-site/gb/gb0264.html",
                                    raises="Unsupported", match="Parameter|nn_parameter")
PARAM_CTOR_BUG = pytest.mark.upstream_bug("pytorch/pytorch#127697", raises="TorchRuntimeError",
                                          match="TracableCreateParameterBackward", since="2.4")
FULLGRAPH_BREAK = pytest.mark.limitation(
    "https://docs.pytorch.org/docs/stable/compile/programming_model.fullgraph_true.html",
    raises="Unsupported", match="skip|context manager|contextlib|GenericContextWrappingVariable")
LIGHTNING_20524 = pytest.mark.upstream_bug("Lightning-AI/pytorch-lightning#20524", raises="UserError",
                                           match="Dynamic control flow", since="2.5")

ENABLED = [pytest.param(True, id="enabled", marks=INIT_NOT_SKIPPED), pytest.param(False, id="disabled")]
# The mode through Lightning's entry points: (owner, empty_init); only True enables it.
INIT_MODULE = {"fabric_empty_init": ("fabric", True), "fabric_full_init": ("fabric", False),
               "trainer_empty_init": ("trainer", True), "trainer_default_init": ("trainer", None)}
INIT_MODULE_PARAMS = [pytest.param("fabric_empty_init", marks=INIT_NOT_SKIPPED), "fabric_full_init",
                      pytest.param("trainer_empty_init", marks=INIT_NOT_SKIPPED), "trainer_default_init"]
TRAINER_FLAGS = dict(accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                     enable_progress_bar=False, enable_model_summary=False)


# --- helpers ---------------------------------------------------------------------------------

def init_both(a, b):
    """What nn.Linear.reset_parameters does, on two given tensors: a constant and a random init."""
    torch.nn.init.constant_(a, 0.5)
    torch.nn.init.kaiming_uniform_(b, a=math.sqrt(5))
    return a.sum() + b.sum()


def build_linear(a, b):
    """Builds a module (its __init__ initialises its parameters) and applies it; a and b stay."""
    return torch.nn.Linear(8, 8, device=a.device)(b).sum()


def check_mode_effect(case, fn, compiled, make_mode, enabled, device="cpu"):
    """The figures of fn eagerly and compiled (twice) agree, and show what the mode is for."""
    eager = figures(fn, make_mode, device)
    runs = [figures(compiled, make_mode, device) for _ in range(2)]
    from torch._dynamo.utils import counters
    case.record(eager=eager, compiled=runs[0], compiled_again=runs[1], mode_enabled=enabled,
                graphs=counters["stats"]["unique_graphs"])
    purpose = eager == {"sentinels_initialised": 0, "rng_advanced": False} if enabled else eager["rng_advanced"]
    assert purpose, f"eager, enabled={enabled}: {eager}"
    for compiled_figures in runs:
        assert compiled_figures == eager, f"enabled={enabled}: compiled {compiled_figures}, eager {eager}"


def with_mode_inside(fn, make_mode):
    """fn with the mode entered inside the compiled function."""
    def run(a, b):
        with make_mode():
            return fn(a, b)
    return run


def init_module_factory(name):
    """A factory of Fabric's or Trainer's init_module(empty_init=...), and whether it enables the mode."""
    owner, empty_init = INIT_MODULE[name]
    if owner == "fabric":
        lightning_owner = need("lightning.fabric.Fabric")(accelerator="cpu", devices=1)
    else:
        lightning_owner = need("lightning.pytorch.Trainer")(**TRAINER_FLAGS)
    return (lambda: lightning_owner.init_module(empty_init=empty_init)), bool(empty_init)


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)
        self.norm = torch.nn.LayerNorm(8)

    def forward(self, x):
        return self.norm(torch.relu(self.lin(x)) + x)


class UnderMode(torch.nn.Module):
    """`inner` under make_mode() entered outside the compiled region, then an eager init of a zero
    sentinel under the same mode; `initialised`: per call, whether that init took effect."""

    def __init__(self, inner, make_mode):
        super().__init__()
        self.inner, self.make_mode, self.initialised = inner, make_mode, []

    def forward(self, x):
        with self.make_mode():
            out = self.inner(x)
            self.initialised.append(bool(torch.nn.init.constant_(torch.zeros(2, device=x.device), 0.5).ne(0).any()))
        return out


class BranchlessSkipInit(torch.overrides.TorchFunctionMode):
    """`_EmptyInit(enabled=True)` without its `if not self.enabled:` branch on instance state."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if getattr(func, "__module__", None) == "torch.nn.init":
            return kwargs["tensor"] if "tensor" in kwargs else args[0]
        return func(*args, **kwargs)


def x_on(device="cpu"):
    return torch.randn(4, 8, device=device, requires_grad=True)


# --- the mode around or inside compiled code that initialises --------------------------------

@pytest.mark.parametrize("enabled", ENABLED)
def test_init_call_in_compiled_fn(case, device, backend, fullgraph, enabled):
    # _EmptyInit entered outside; the compiled function calls torch.nn.init.
    _EmptyInit = need("lightning.fabric.utilities.init._EmptyInit")
    check_mode_effect(case, init_both, case.compile(init_both), lambda: _EmptyInit(enabled=enabled), enabled, device)


@pytest.mark.parametrize("fullgraph", [False, pytest.param(True, marks=MODE_IN_REGION)],
                         ids=["graphbreaks", "fullgraph"])
@pytest.mark.parametrize("enabled", ENABLED)
def test_init_call_with_mode_entered_inside(case, device, backend, fullgraph, enabled):
    # The compiled function enters _EmptyInit itself, then calls torch.nn.init.
    _EmptyInit = need("lightning.fabric.utilities.init._EmptyInit")
    fn = with_mode_inside(init_both, lambda: _EmptyInit(enabled=enabled))
    check_mode_effect(case, fn, case.compile(fn), contextlib.nullcontext, enabled, device)


@PARAM_CTOR
@PARAM_CTOR_BUG
@pytest.mark.parametrize("enabled", [True, False], ids=["enabled", "disabled"])
def test_module_built_in_compiled_fn(case, device, backend, fullgraph, enabled):
    # _EmptyInit entered outside; the compiled function builds nn.Linear (figure: rng_advanced).
    _EmptyInit = need("lightning.fabric.utilities.init._EmptyInit")
    check_mode_effect(case, build_linear, case.compile(build_linear), lambda: _EmptyInit(enabled=enabled),
                      enabled, device)


@PARAM_CTOR
@PARAM_CTOR_BUG
@pytest.mark.parametrize("fullgraph", [False, pytest.param(True, marks=MODE_IN_REGION)],
                         ids=["graphbreaks", "fullgraph"])
@pytest.mark.parametrize("enabled", [True, False], ids=["enabled", "disabled"])
def test_module_built_with_mode_entered_inside(case, device, backend, fullgraph, enabled):
    _EmptyInit = need("lightning.fabric.utilities.init._EmptyInit")
    fn = with_mode_inside(build_linear, lambda: _EmptyInit(enabled=enabled))
    check_mode_effect(case, fn, case.compile(fn), contextlib.nullcontext, enabled, device)


@pytest.mark.parametrize("backend", ["eager", "inductor"])
@pytest.mark.parametrize("init_module", INIT_MODULE_PARAMS)
def test_init_module_around_compiled_init_call(case, backend, fullgraph, init_module):
    make_context, enabled = init_module_factory(init_module)
    check_mode_effect(case, init_both, case.compile(init_both), make_context, enabled)
    case.record(init_module=init_module)


@PARAM_CTOR
@PARAM_CTOR_BUG
@pytest.mark.parametrize("backend", ["eager", "inductor"])
@pytest.mark.parametrize("init_module", list(INIT_MODULE))
def test_init_module_around_compiled_module_build(case, backend, fullgraph, init_module):
    make_context, enabled = init_module_factory(init_module)
    check_mode_effect(case, build_linear, case.compile(build_linear), make_context, enabled)
    case.record(init_module=init_module)


@FULLGRAPH_BREAK
@pytest.mark.parametrize("backend", ["eager"])
@pytest.mark.parametrize("init_module", INIT_MODULE_PARAMS)
def test_init_module_entered_inside_compiled_fn(case, backend, fullgraph, init_module):
    # `with fabric.init_module():` / `with trainer.init_module():` inside the compiled function. The
    # `with` graph-breaks; the init calls in the function it calls then run in a frame Dynamo
    # compiles on its own, under the mode entered eagerly.
    make_context, enabled = init_module_factory(init_module)
    fn = with_mode_inside(init_both, make_context)
    check_mode_effect(case, fn, case.compile(fn), contextlib.nullcontext, enabled)
    case.record(init_module=init_module)


# --- Lightning-AI/pytorch-lightning#20524 ----------------------------------------------------

@pytest.mark.parametrize("fullgraph", [True], ids=["fullgraph"])
@pytest.mark.parametrize("mode", [pytest.param("empty_init_enabled", marks=LIGHTNING_20524),
                                  pytest.param("empty_init_disabled", marks=LIGHTNING_20524),
                                  pytest.param("branchless_skip_init", marks=pytest.mark.without_lightning)])
def test_dynamic_fullgraph_call_under_mode(case, device, backend, fullgraph, mode):
    # A module compiled with fullgraph=True, dynamic=True, called while the mode is active; the
    # branchless mode (no `if` on instance state) is the control.
    if mode == "branchless_skip_init":
        make_mode = BranchlessSkipInit
    else:
        make_mode = functools.partial(need("lightning.fabric.utilities.init._EmptyInit"), mode == "empty_init_enabled")
    block = Block().to(device)
    eager, compiled = (UnderMode(block, make_mode),
                       UnderMode(case.compile(copy.deepcopy(block), dynamic=True), make_mode))
    case.check(eager, x_on(device), compiled=compiled)
    case.record(mode=mode, sentinel_initialised_eager=eager.initialised, sentinel_initialised=compiled.initialised)
    expected = mode == "empty_init_disabled"
    assert set(compiled.initialised) == {expected}, f"sentinel initialised: {compiled.initialised}, expected {expected}"


def lit_class(layer):
    """The reporter's shape: a LightningModule whose submodule is compiled with fullgraph=True,
    dynamic=True; `warmup` calls it in on_load_checkpoint (inside load_from_checkpoint)."""
    LightningModule = need("lightning.pytorch.LightningModule")
    if layer == "message_passing":
        MessagePassing = need("torch_geometric.nn.MessagePassing")

        class Ring(MessagePassing):
            def __init__(self):
                super().__init__(aggr="add")
                self.lin = torch.nn.Linear(4, 4)

            def forward(self, x):
                edge_index = torch.stack([torch.arange(8), (torch.arange(8) + 1) % 8])
                return self.propagate(edge_index, x=self.lin(x))

    class Lit(LightningModule):
        def __init__(self, warmup: bool = False):
            super().__init__()
            self.save_hyperparameters()
            net = Ring() if layer == "message_passing" else torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Tanh())
            self.net = torch.compile(net, fullgraph=True, dynamic=True)

        def forward(self, x):
            return self.net(x)

        def training_step(self, batch, batch_idx):
            return self(batch).pow(2).mean()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

        def on_load_checkpoint(self, checkpoint):
            if self.hparams.warmup:
                self(torch.ones(8, 4))

    return Lit


@LIGHTNING_20524
@pytest.mark.parametrize("backend", ["inductor"])
@pytest.mark.parametrize("fullgraph", [True], ids=["fullgraph"])
@pytest.mark.parametrize("layer", ["linear", "message_passing"])
@pytest.mark.parametrize("under", ["trainer_init_module_empty", "trainer_init_module_default", "fabric_init_module"])
def test_reporter_flow_fit_save_load_infer(case, backend, fullgraph, layer, under, tmp_path):
    # Fit 2 steps, Trainer.save_checkpoint, then either load_from_checkpoint under
    # Trainer.init_module (the compiled call in on_load_checkpoint runs under the mode), or load
    # plainly and run inference under Fabric.init_module() as the reporter's sampler did.
    Trainer, Fabric = need("lightning.pytorch.Trainer"), need("lightning.fabric.Fabric")
    Lit = lit_class(layer)
    trainer = Trainer(max_steps=2, **TRAINER_FLAGS)
    trainer.fit(Lit(), torch.utils.data.DataLoader(torch.randn(4, 8, 4), batch_size=None))
    trainer.save_checkpoint(tmp_path / "m.ckpt")
    saved = torch.load(tmp_path / "m.ckpt", weights_only=False)["state_dict"]
    x = torch.randn(8, 4)
    if under.startswith("trainer"):
        empty_init = True if under == "trainer_init_module_empty" else None
        before = torch.get_rng_state()
        with Trainer(**TRAINER_FLAGS).init_module(empty_init=empty_init):
            model = Lit.load_from_checkpoint(tmp_path / "m.ckpt", warmup=True)
        rng_advanced = not torch.equal(before, torch.get_rng_state())
        case.record(rng_advanced_during_load=rng_advanced)
        assert rng_advanced is not bool(empty_init), \
            f"empty_init={empty_init}: RNG advanced while building and loading: {rng_advanced}"
        out = model(x)
    else:
        model = Lit.load_from_checkpoint(tmp_path / "m.ckpt")
        with torch.inference_mode(), Fabric(accelerator="cpu", devices=1).init_module():
            out = model(x)
    weight_diff = max((model.state_dict()[k] - v).abs().max().item() for k, v in saved.items())
    with torch.no_grad():
        out_diff = (out - model.net._orig_mod(x)).abs().max().item()
    case.record(steps=trainer.global_step, loaded_weight_diff=weight_diff, out_diff_from_eager=out_diff)
    assert trainer.global_step == 2, f"fit ran {trainer.global_step} steps"
    assert weight_diff == 0, f"loaded weights differ from the checkpoint by {weight_diff}"
    assert out_diff <= 1e-5, f"compiled output differs from eager by {out_diff}"


# --- copy.copy under the mode ------------------------------------------------------------------

def copy_then_cos(x):
    return torch.cos(copy.copy(torch.sin(x)))


class PassThrough(torch.overrides.TorchFunctionMode):
    """A TorchFunctionMode that changes nothing."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("fullgraph", [False], ids=["graphbreaks"])
@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
@pytest.mark.parametrize("mode", ["empty_init_enabled", "empty_init_disabled",
                                  pytest.param("pass_through", marks=pytest.mark.without_lightning)])
def test_copy_copy_in_compiled_fn_under_mode(case, device, backend, fullgraph, mode):
    """`copy.copy(tensor)` inside a compiled function while a TorchFunctionMode is active. `copy` is
    a module Dynamo skips: the call graph-breaks and runs eagerly, still under the compiler's frame
    callback; `Tensor.__reduce_ex__` (Python) then runs under the mode, `self.device` comes back
    None there (an attribute read dispatched to the mode) and `_reduce_ex_internal` (torch/_tensor.py) raises
    `AttributeError: 'NoneType' object has no attribute 'type'`. Seen on torch 2.6-2.15 with any
    mode, on 2.4 depending on what ran before in the process; 2.1 passes; 2.5 passes under
    `_EmptyInit` (Dynamo gives up on its frame there, the #20524 message) and fails under the plain
    mode. No upstream report found (related: pytorch/pytorch#115741, #107570). Eagerly it works.
    The figure: an eager init right after the compiled call, under the same mode, is skipped only by
    the enabled `_EmptyInit`."""
    if mode == "pass_through":
        make_mode = PassThrough
    else:
        _EmptyInit = need("lightning.fabric.utilities.init._EmptyInit")

        def make_mode():
            return _EmptyInit(enabled=mode == "empty_init_enabled")

    compiled = UnderMode(case.compile(copy_then_cos), make_mode)
    case.check(UnderMode(copy_then_cos, make_mode), x_on(device), compiled=compiled)
    case.record(mode=mode, sentinel_initialised=compiled.initialised)
    expected = mode != "empty_init_enabled"
    assert set(compiled.initialised) == {expected}, f"sentinel initialised: {compiled.initialised}, expected {expected}"


# --- property cases (harness/plugin/properties.py): programs drawn around _EmptyInit -------------------------

PINNED_EMPTY_INIT = [EmptyInitProgram(enabled=False), EmptyInitProgram(enabled=True, mode_at="inside"),
                     EmptyInitProgram(inits=("uniform_b",), enabled=True, build="inside")]


@pytest.mark.flaky(reruns=0)  # the table's examples are fixed: a second run tells nothing new
@PARAM_CTOR_BUG
@INIT_NOT_SKIPPED
@pytest.mark.parametrize("fullgraph", [False, pytest.param(True, marks=[MODE_IN_REGION, PARAM_CTOR])],
                         ids=["graphbreaks", "fullgraph"])  # what fullgraph refuses: declared there only
def test_property_empty_init(case, device, backend, fullgraph):
    # Programs under _EmptyInit: which torch.nn.init calls, where the mode is entered, a module
    # built inside or outside the compiled function, enabled or not.
    explore(case, "empty_init", empty_init_programs, lambda program: check_empty_init_program(case, program, device),
            pinned=PINNED_EMPTY_INIT)


# --- property cases over torch's own op database (cases/programs/op_programs.py) ---------------------

OP_CALLS = op_calls()  # this torch's op_db, read at collection: once per worker, before any case forks
# The init call the enabled mode skips eagerly runs in compiled code (the op program's own check).
INIT_NOT_SKIPPED_OP = pytest.mark.upstream_bug(
    "pytorch/pytorch#196053", raises="AssertionError",
    match=r"the init call under _EmptyInit\(enabled=True\): ran in compiled code True, eagerly False", since="2.2")
# A pinned example per declaration, so that every cell declaring it runs into it.
PINNED_EMPTY_INIT_OP = [EmptyInitOpProgram(OpCall("sin"), enabled=True, init="constant", context_at="outside")]


@pytest.mark.flaky(reruns=0)  # the table's examples are fixed: a second run tells nothing new
@FULLGRAPH_REFUSES_GRAPH_BREAK
@INIT_NOT_SKIPPED_OP
@pytest.mark.parametrize("backend", ["eager", "aot_eager", "inductor"])
def test_property_empty_init_op(case, device, backend):
    # One op of torch's OpInfo database and one of its samples under Lightning's _EmptyInit: enabled
    # or not, entered inside or around the compiled function, after an init call on a sentinel;
    # fullgraph, dynamic shapes, side effects, passed numbers and a second sample drawn too.
    need("lightning.fabric.utilities.init._EmptyInit")  # the script imports it
    need_op_db()
    explore(case, "empty_init_op", empty_init_op_programs(OP_CALLS, device),
            lambda program: check_op_program(case, program, backend), about=about(),
            pinned=[dataclasses.replace(program, device=device) for program in PINNED_EMPTY_INIT_OP])
