"""Programs drawn around Lightning's _EmptyInit (init calls, where the mode is entered, modules built
inside or outside the compiled function) for the family's property cases, and how each is checked."""

import contextlib
import dataclasses
import math

import torch
from hypothesis import strategies as st

from harness.plugin.casekit import need
from programs.op_programs import ContextOpProgram, common_knobs

# torch.nn.init calls on the sentinels a (8) and b (8x8), at most one each (a later init of the same
# tensor would make the first one dead code, which compiled code may drop). Only the inits that
# dispatch to a TorchFunctionMode (handle_torch_function: uniform_, normal_, constant_,
# kaiming_uniform_, on 2.9 and 2.15 alike) are drawn: _EmptyInit cannot skip the others, eagerly either.
INIT_CALLS = {"constant_a": "torch.nn.init.constant_(a, 0.5)", "normal_a": "torch.nn.init.normal_(a)",
              "uniform_a": "torch.nn.init.uniform_(a)", "uniform_b": "torch.nn.init.uniform_(b)",
              "normal_b": "torch.nn.init.normal_(b)",
              "kaiming_uniform_b": "torch.nn.init.kaiming_uniform_(b, a=math.sqrt(5))"}
RANDOM_INITS = {"normal_a", "uniform_a", "uniform_b", "normal_b", "kaiming_uniform_b"}
MODE_AT = ("outside", "inside")  # entered around the compiled call, or inside the compiled function
BUILD = ("none", "inside", "outside")  # an nn.Linear built in the compiled function, or before it (eagerly)


@dataclasses.dataclass(frozen=True)
class EmptyInitProgram:
    """`fn(a, b)`: `inits` on the sentinels, with `_EmptyInit(enabled)` entered at `mode_at`; `build`:
    an nn.Linear also built inside fn, or built eagerly under the mode before the compiled fn applies it."""
    inits: tuple = ("constant_a", "kaiming_uniform_b")
    enabled: bool = True
    mode_at: str = "outside"
    build: str = "none"

    @property
    def source(self) -> str:
        inside = self.mode_at == "inside"
        lines = ["def fn(a, b, layer=None):"] + (["    with make_mode():"] if inside else [])
        pad = "        " if inside else "    "
        lines += [f"{pad}{INIT_CALLS[name]}" for name in self.inits]
        if self.build == "inside":
            lines.append(f"{pad}layer = torch.nn.Linear(8, 8, device=b.device)")
        lines.append(f"{pad}return a.sum() + b.sum()" + (" + layer(b).sum()" if self.build != "none" else ""))
        return "\n".join(lines)

    def functions(self, make_mode, compile_fn):
        """(eager, compiled) fn(a, b); with build="outside" each builds its layer first, eagerly."""
        namespace = {"torch": torch, "math": math, "make_mode": make_mode}
        exec(compile(self.source, "<empty_init program>", "exec"), namespace)
        eager, compiled = namespace["fn"], compile_fn(namespace["fn"])
        if self.build != "outside":
            return eager, compiled

        def built(f):
            def run(a, b):
                return f(a, b, torch.nn.Linear(8, 8, device=b.device))
            return run
        return built(eager), built(compiled)


empty_init_programs = st.builds(
    EmptyInitProgram, inits=st.lists(st.sampled_from(sorted(INIT_CALLS)), min_size=1, max_size=2,
                                     unique_by=lambda name: name[-1]).map(tuple),
    enabled=st.booleans(), mode_at=st.sampled_from(MODE_AT), build=st.sampled_from(BUILD),
).filter(lambda program: not (program.build == "outside" and program.mode_at == "inside"))  # built under the mode


def figures(fn, make_mode, device="cpu"):
    """fn on two zero sentinels inside make_mode(): how many it initialised, whether the RNG moved."""
    a, b = torch.zeros(8, device=device), torch.zeros(8, 8, device=device)
    rng_state = torch.cuda.get_rng_state if str(device).startswith("cuda") else torch.get_rng_state
    before = rng_state()
    with make_mode():
        fn(a, b)
    return {"sentinels_initialised": int(a.ne(0).any()) + int(b.ne(0).any()),
            "rng_advanced": not torch.equal(before, rng_state())}


def check_empty_init_program(case, program, device):
    """The figures (sentinels initialised, RNG moved) eagerly and compiled agree and show what the
    mode is for: enabled skips every init (the layer's too), disabled does them."""
    _EmptyInit = need("lightning.fabric.utilities.init._EmptyInit")

    def make_mode():
        return _EmptyInit(enabled=program.enabled)
    eager, compiled = program.functions(make_mode, case.compile)
    outside = make_mode if program.mode_at == "outside" else contextlib.nullcontext
    expected = {"sentinels_initialised": len({name[-1] for name in program.inits}),
                "rng_advanced": bool(RANDOM_INITS & set(program.inits)) or program.build != "none"}
    expected = {"sentinels_initialised": 0, "rng_advanced": False} if program.enabled else expected
    eager_figures = figures(eager, outside, device)
    runs = [figures(compiled, outside, device) for _ in range(2)]
    case.record(eager=eager_figures, compiled=runs[0], compiled_again=runs[1], expected=expected)
    assert eager_figures == expected, f"eager, enabled={program.enabled}: {eager_figures}, expected {expected}"
    for compiled_figures in runs:
        assert compiled_figures == eager_figures, \
            f"enabled={program.enabled}: compiled {compiled_figures}, eager {eager_figures}"


# --- programs around one op of torch's OpInfo database (cases/programs/op_programs.py) -----------------------

# An init call, before the op, on a sentinel tensor of the program (deterministic: whether it ran is
# what the sentinel holds after the call), or none.
OP_INITS = {"none": None, "constant": "torch.nn.init.constant_(SENTINEL, 0.5)",
            "zeros": "torch.nn.init.zeros_(SENTINEL)", "ones": "torch.nn.init.ones_(SENTINEL)"}


@dataclasses.dataclass(frozen=True)
class EmptyInitOpProgram(ContextOpProgram):
    """The op under Lightning's `_EmptyInit(enabled)`, entered in the compiled function or around its
    call, after an init call on a sentinel (skipped where the mode is enabled)."""
    enabled: bool = True
    init: str = "none"

    def imports(self) -> list[str]:
        return ["import torch", "from lightning.fabric.utilities.init import _EmptyInit"]

    def context(self) -> str:
        return f"_EmptyInit(enabled={self.enabled})"

    def body(self, params: str) -> list[str]:
        return ([f"    {OP_INITS[self.init]}"] if OP_INITS[self.init] else []) + [f"    return op({params})"]

    def definitions(self, params: str) -> str:
        start = 2.0 if self.init == "constant" else 0.5  # the sentinel's value before any init: no init's own
        sentinel = f"SENTINEL = torch.full((4,), {start}, device={self.device!r})\n" if OP_INITS[self.init] else ""
        return sentinel + super().definitions(params)

    def pre_checks(self) -> str:
        """The init call skipped where the mode is enabled and done where it is not, compiled as eagerly."""
        if not OP_INITS[self.init]:
            return ""
        return (
            "def init_ran(f):\n"
            "    before = SENTINEL.clone()\n"
            "    run(f, SAMPLES[0])\n"
            "    ran = not torch.equal(SENTINEL, before)\n"
            "    SENTINEL.copy_(before)\n"
            "    return ran\n"
            "eager_ran, compiled_ran = init_ran(fn), init_ran(compiled)\n"
            f"assert compiled_ran == eager_ran, (f'the init call under _EmptyInit(enabled={self.enabled}): ran in '\n"
            "                                   f'compiled code {compiled_ran}, eagerly {eager_ran}')\n")


def empty_init_op_programs(calls, device):
    return st.builds(EmptyInitOpProgram, **common_knobs(calls, device),
                     context_at=st.sampled_from(MODE_AT).map(lambda at: "inside_compiled" if at == "inside" else at),
                     enabled=st.booleans(), init=st.sampled_from(sorted(OP_INITS)))
