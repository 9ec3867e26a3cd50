"""Lightning's `_EmptyInit` torch-function mode around compiled code.

`lightning.fabric.utilities.init._EmptyInit` is a `TorchFunctionMode` that skips
`torch.nn.init` calls; `Fabric.init_module(empty_init=...)`, `Trainer.init_module(...)` and
the `configure_model` hook push it (with `enabled=False` when empty init is off). Its
`__torch_function__` starts with `if not self.enabled:`. Lightning-AI/pytorch-lightning#20524
(Lightning 2.4.x, torch 2.5.1) reports `torch._dynamo.exc.UserError: Dynamic control flow is
not supported at the moment` raised at that line when a compiled call runs while the mode is
active (there: `load_from_checkpoint` of a module with a compiled submodule). torch 2.5
began tracing torch-function modes entered outside the compiled region (pytorch/pytorch
PR #133137); reported to behave differently before 2.5 and from 2.6 (UPSTREAM.md section 2).

Variants: a compiled call under `_EmptyInit(enabled=True|False)` directly; modules whose
`__init__` runs a compiled submodule built under `Fabric.init_module` and
`Trainer.init_module`; a compiled submodule built and probed in `configure_model` during a
one-step CPU fit; `load_from_checkpoint` of a module with a compiled submodule, with and
without `Trainer.init_module()`; and the mode without the data-dependent branch that users
proposed as the fix (expected to pass, no upstream marker).

Lightning flows run on CPU only (one device, no logger, no checkpoints) to stay fast.
"""

import copy

import pytest
import torch

from harness.casekit import need

EMPTY_INIT_BUG = dict(raises="UserError", match="Dynamic control flow")
EMPTY_INIT_REF = "Lightning-AI/pytorch-lightning#20524"

LIGHTNING_TRAINER_FLAGS = dict(
    accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
    enable_progress_bar=False, enable_model_summary=False,
)


# --- helpers ---------------------------------------------------------------------------

class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)
        self.norm = torch.nn.LayerNorm(8)

    def forward(self, x):
        return self.norm(torch.relu(self.lin(x)) + x)


def identity(module):
    return module


def compiler(backend):
    """What a host module applies to its submodule: torch.compile with the case's backend."""
    def compile_module(module):
        return torch.compile(module, backend=backend)
    return compile_module


def unwrap(module):
    """The module under an `OptimizedModule`, else the module."""
    return getattr(module, "_orig_mod", module)



class UnderMode(torch.nn.Module):
    """Runs `inner` while a torch-function mode is active: the mode is entered here, outside
    the compiled region, as Lightning enters `_EmptyInit`."""

    def __init__(self, inner, make_mode):
        super().__init__()
        self.inner = inner
        self.make_mode = make_mode

    def forward(self, x):
        with self.make_mode():
            return self.inner(x)


class Host(torch.nn.Module):
    """A module whose `__init__` builds a (compiled) submodule and runs it once, the pattern
    of #20524: the compiled call happens while whatever context built the host is active."""

    def __init__(self, wrap):
        super().__init__()
        self.block = wrap(Block())
        self.probe = self.block(torch.ones(2, 8)).detach()

    def forward(self, x):
        return self.block(x)


def host_twins(build, backend):
    """An eager host and a compiled host built the same way by `build(wrap)`, then given the
    same weights (under empty init they start as uninitialised memory)."""
    eager_host = build(identity)
    compiled_host = build(compiler(backend))
    torch.manual_seed(0)
    weights = Block().state_dict()
    unwrap(eager_host.block).load_state_dict(weights)
    unwrap(compiled_host.block).load_state_dict(weights)
    return eager_host, compiled_host


def check_hosts_built_under(case, backend, init_module, empty_init):
    """Build eager and compiled hosts inside `init_module(empty_init=...)` (Fabric's or the
    Trainer's), run both, compare."""

    def build(wrap):
        with init_module(empty_init=empty_init):
            return Host(wrap)

    eager_host, compiled_host = host_twins(build, backend)
    case.check(eager_host, x_on(), compiled=compiled_host)
    case.record(empty_init=empty_init)


def lightning_module_class():
    """A LightningModule with a (compiled) submodule built in `__init__` or `configure_model`,
    probed once where it is built; defined lazily so a missing Lightning skips."""
    LightningModule = need("lightning.pytorch.LightningModule")

    class LitHost(LightningModule):
        def __init__(self, compiled: bool = False, backend: str = "eager", build_in_init: bool = True):
            super().__init__()
            self.save_hyperparameters()
            self.block = None
            self.losses = []
            if build_in_init:
                self._build()

        def _build(self):
            block = Block()
            self.block = torch.compile(block, backend=self.hparams.backend) if self.hparams.compiled else block
            self.probe = self.block(torch.ones(2, 8)).detach()

        def configure_model(self):
            if self.block is None:
                self._build()

        def forward(self, x):
            return self.block(x)

        def training_step(self, batch, batch_idx):
            x, y = batch
            loss = torch.nn.functional.mse_loss(self(x), y)
            self.losses.append(loss.detach())
            return loss

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    return LitHost


def tiny_loader():
    generator = torch.Generator().manual_seed(0)
    data = torch.utils.data.TensorDataset(torch.randn(8, 8, generator=generator),
                                          torch.randn(8, 8, generator=generator))
    return torch.utils.data.DataLoader(data, batch_size=4, shuffle=False, num_workers=0)


def x_on(device="cpu"):
    return torch.randn(4, 8, device=device, requires_grad=True)


# --- cases -----------------------------------------------------------------------------

@pytest.mark.upstream_bug(EMPTY_INIT_REF, **EMPTY_INIT_BUG)
@pytest.mark.parametrize("enabled", [True, False], ids=["enabled", "disabled"])
def test_compiled_call_under_empty_init(case, device, backend, fullgraph, enabled):
    _EmptyInit = need("lightning.fabric.utilities.init._EmptyInit")
    block = Block().to(device)
    compiled_block = case.compile(copy.deepcopy(block))
    case.check(UnderMode(block, lambda: _EmptyInit(enabled=enabled)), x_on(device),
               compiled=UnderMode(compiled_block, lambda: _EmptyInit(enabled=enabled)))
    case.record(mode_enabled=enabled)


@pytest.mark.upstream_bug(EMPTY_INIT_REF, **EMPTY_INIT_BUG)
@pytest.mark.parametrize("fullgraph", [False], ids=["graphbreaks"])
@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
@pytest.mark.parametrize("empty_init", [True, False], ids=["empty_init", "full_init"])
def test_fabric_init_module_runs_compiled_submodule(case, backend, fullgraph, empty_init):
    Fabric = need("lightning.fabric.Fabric")
    fabric = Fabric(accelerator="cpu", devices=1)
    need("lightning.fabric.Fabric.init_module")
    check_hosts_built_under(case, backend, fabric.init_module, empty_init)


@pytest.mark.upstream_bug(EMPTY_INIT_REF, **EMPTY_INIT_BUG)
@pytest.mark.parametrize("fullgraph", [False], ids=["graphbreaks"])
@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
@pytest.mark.parametrize("empty_init", [None, True], ids=["default_init", "empty_init"])
def test_trainer_init_module_runs_compiled_submodule(case, backend, fullgraph, empty_init):
    Trainer = need("lightning.pytorch.Trainer")
    need("lightning.pytorch.Trainer.init_module")
    trainer = Trainer(**LIGHTNING_TRAINER_FLAGS)
    check_hosts_built_under(case, backend, trainer.init_module, empty_init)


@pytest.mark.upstream_bug(EMPTY_INIT_REF, **EMPTY_INIT_BUG)
@pytest.mark.parametrize("fullgraph", [False], ids=["graphbreaks"])
@pytest.mark.parametrize("backend", ["aot_eager"])
def test_configure_model_compiled_submodule_one_step_fit(case, backend, fullgraph):
    # Lightning runs configure_model under _EmptyInit(enabled=False); the submodule is built,
    # compiled and probed there, then trained one SGD step. Eager twin: the same without compile.
    Trainer = need("lightning.pytorch.Trainer")
    need("lightning.pytorch.LightningModule.configure_model")
    LitHost = lightning_module_class()

    def fit_one_step(compiled):
        torch.manual_seed(0)
        module = LitHost(compiled=compiled, backend=backend, build_in_init=False)
        trainer = Trainer(max_steps=1, **LIGHTNING_TRAINER_FLAGS)
        trainer.fit(module, train_dataloaders=tiny_loader())
        return module, trainer

    eager_module, _ = fit_one_step(compiled=False)
    compiled_module, trainer = fit_one_step(compiled=True)
    assert trainer.global_step == 1, f"trainer ran {trainer.global_step} steps"
    assert len(compiled_module.losses) == 1 and len(eager_module.losses) == 1
    loss, eager_loss = compiled_module.losses[0], eager_module.losses[0]
    case.record(loss=loss.item(), eager_loss=eager_loss.item())
    assert torch.isfinite(loss), f"loss {loss}"
    torch.testing.assert_close(loss, eager_loss, rtol=1e-4, atol=1e-5)
    # After the step the trained submodules still agree (weights were updated alike).
    case.check(eager_module.block, x_on(), compiled=compiled_module.block)


@pytest.mark.upstream_bug(EMPTY_INIT_REF, **EMPTY_INIT_BUG)
@pytest.mark.parametrize("fullgraph", [False], ids=["graphbreaks"])
@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
@pytest.mark.parametrize("under", ["plain", "trainer_init_module"])
def test_load_from_checkpoint_compiled_submodule(case, backend, fullgraph, under, tmp_path):
    Trainer = need("lightning.pytorch.Trainer")
    need("lightning.pytorch.Trainer.init_module")
    import contextlib

    import lightning

    LitHost = lightning_module_class()

    def save_then_load(compiled):
        torch.manual_seed(0)
        module = LitHost(compiled=compiled, backend=backend)
        # The keys Trainer.save_checkpoint writes that load_from_checkpoint reads.
        path = tmp_path / f"compiled_{compiled}.ckpt"
        torch.save({"state_dict": module.state_dict(), "hyper_parameters": dict(module.hparams),
                    "pytorch-lightning_version": lightning.__version__}, path)
        torch._dynamo.reset()
        context = (Trainer(**LIGHTNING_TRAINER_FLAGS).init_module() if under == "trainer_init_module"
                   else contextlib.nullcontext())
        with context:
            return LitHost.load_from_checkpoint(path)

    eager_module = save_then_load(compiled=False)
    compiled_module = save_then_load(compiled=True)
    assert compiled_module.hparams.compiled and not eager_module.hparams.compiled
    assert isinstance(compiled_module.block, torch._dynamo.eval_frame.OptimizedModule)
    case.check(eager_module, x_on(), compiled=compiled_module)
    case.record(loaded_under=under)


def copy_then_cos(x):
    # copy.copy is in a file Dynamo skips: it graph-breaks and runs eagerly, still under the
    # compiler's frame callback, and calls Tensor.__reduce_ex__ (Python), whose tensor
    # accesses dispatch to the active mode's __torch_function__ -- a frame Dynamo then
    # compiles on its own, `if not self.enabled:` included.
    return torch.cos(copy.copy(torch.sin(x)))


def control_flow_fallbacks() -> int:
    """Frames Dynamo gave up on (and ran eagerly) with the #20524 message."""
    from torch._dynamo.utils import counters

    return sum(n for msg, n in counters.get("unimplemented", {}).items() if "Dynamic control flow" in msg)


@pytest.mark.parametrize("fullgraph", [False], ids=["graphbreaks"])
@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
@pytest.mark.parametrize("mode", [
    pytest.param("empty_init_enabled", marks=pytest.mark.upstream_bug(EMPTY_INIT_REF, **EMPTY_INIT_BUG)),
    pytest.param("empty_init_disabled", marks=pytest.mark.upstream_bug(EMPTY_INIT_REF, **EMPTY_INIT_BUG)),
    "branchless_pass_through",
])
def test_mode_frame_compiled_from_skipped_code(case, device, backend, fullgraph, mode):
    # The path on which Dynamo compiles the mode's own __torch_function__ frame.
    if mode == "branchless_pass_through":
        make_mode = branchless_modes()["pass_through"]
    else:
        _EmptyInit = need("lightning.fabric.utilities.init._EmptyInit")
        enabled = mode == "empty_init_enabled"

        def make_mode():
            return _EmptyInit(enabled=enabled)

    def under_mode(fn):
        def run(x):
            with make_mode():
                return fn(x)
        return run

    compiled = torch.compile(copy_then_cos, backend=backend)
    case.check(under_mode(copy_then_cos), x_on(device), compiled=under_mode(compiled))
    case.record(mode=mode, dynamic_control_flow_fallbacks=control_flow_fallbacks())


# The fix users proposed: no branch on instance state inside __torch_function__.
def branchless_modes():
    TorchFunctionMode = need("torch.overrides.TorchFunctionMode")

    class SkipInit(TorchFunctionMode):
        """Empty init on: nn.init calls return their tensor untouched."""

        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if getattr(func, "__module__", None) == "torch.nn.init":
                return kwargs["tensor"] if "tensor" in kwargs else args[0]
            return func(*args, **kwargs)

    class PassThrough(TorchFunctionMode):
        """Empty init off: a separate class, so nothing to branch on."""

        def __torch_function__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    class ClassConstant(TorchFunctionMode):
        """`enabled` as a class-level constant instead of an instance attribute."""

        enabled = False

        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if not type(self).enabled:
                return func(*args, **kwargs)
            if getattr(func, "__module__", None) == "torch.nn.init":
                return kwargs["tensor"] if "tensor" in kwargs else args[0]
            return func(*args, **kwargs)

    return {"skip_init": SkipInit, "pass_through": PassThrough, "class_constant": ClassConstant}


@pytest.mark.parametrize("mode_name", ["skip_init", "pass_through", "class_constant"])
def test_compiled_call_under_branchless_mode(case, device, backend, fullgraph, mode_name):
    mode_cls = branchless_modes()[mode_name]
    # The mode does what it is for: under SkipInit an init call (one that dispatches torch
    # functions, as nn.Linear's kaiming_uniform_ does) leaves the tensor as it was.
    if mode_name == "skip_init":
        weight = torch.zeros(3, 3)
        with mode_cls():
            torch.nn.init.kaiming_uniform_(weight)
        assert weight.eq(0).all(), "SkipInit did not skip torch.nn.init.kaiming_uniform_"
    block = Block().to(device)
    compiled_block = case.compile(copy.deepcopy(block))
    case.check(UnderMode(block, mode_cls), x_on(device),
               compiled=UnderMode(compiled_block, mode_cls))
    case.record(mode=mode_name)
