"""Programs that compile one op's function again and again in one run: the same code meets a
sequence of ambient states with Dynamo's, inductor's and AOTAutograd's caches warm in memory, warm on
disk, or off. The states: every global setter this torch offers at each value it takes, surveyed from
its own namespace (cases/programs/ambient.py: default dtype, matmul precision, autocast's settings,
deterministic algorithms, the backends' flags, ...), and those no setter reaches (autocast or grad mode
entered, a mode entered, the inputs' dtype or requires_grad).

The script (a plain-torch one, as every op program's, cases/programs/op_programs.py) calls one
compiled function under each state in turn, then judges each state's results twice: against eager
under that state (the op's tolerances, widened where the state lowers precision) and against a
fresh compile of the same program under that state alone, from a reset Dynamo with the caches off
(assert_close's own tolerances for the dtype: the same program under the same state should give
the same numbers, whatever was compiled before it).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import pathlib
import subprocess
import sys

from hypothesis import strategies as st

from programs.ambient import Setter
from programs.op_programs import RUN, OpProgram, common_knobs
from programs.opinfo import DEFAULT_TOLERANCES

SAME = "lambda inputs: inputs"
# Each state: (the context manager entered around each call, what it does to the inputs, the dtype
# whose tolerances eager-against-compiled needs under it). "{device}" is the program's device.
STATES = {
    "none": ("contextlib.nullcontext()", SAME, None),
    "autocast_bf16": ("torch.autocast({device!r}, dtype=torch.bfloat16)", SAME, "bfloat16"),
    # CPU autocast has float16 from torch 2.2 (2.1 refuses it eagerly too: its control cannot judge it)
    "autocast_fp16": ("torch.autocast({device!r}, dtype=torch.float16)", SAME, "float16"),
    "autocast_disabled": ("torch.autocast({device!r}, enabled=False)", SAME, None),
    "no_grad": ("torch.no_grad()", SAME, None),
    "inference_mode": ("torch.inference_mode()", SAME, None),
    "function_mode": ("PassThroughFunctionMode()", SAME, None),
    "dispatch_mode": ("PassThroughDispatchMode()", SAME, None),
    "float64_inputs": ("contextlib.nullcontext()",
                       "lambda inputs: [x.double() if torch.is_tensor(x) and x.is_floating_point() else x "
                       "for x in inputs]",
                       None),
    "no_requires_grad": ("contextlib.nullcontext()",
                         "lambda inputs: [x.detach() if torch.is_tensor(x) else x for x in inputs]", None),
}
CUDA_STATES = {
    "cpu_inputs": ("contextlib.nullcontext()", "lambda inputs: [x.cpu() if torch.is_tensor(x) else x for x in inputs]",
                   None),
}
# Besides these, every setter this torch offers at each value it takes (cases/programs/ambient.py's
# survey of torch's own namespace): a state "SETTER=VALUE", entered by `switched` or `flag_set`.
SURVEY = pathlib.Path(__file__).with_name("ambient.py")
SURVEY_TIMEOUT = 300  # seconds: importing torch and each backend, then a few hundred sets and restores
# A setter may lower the precision a program computes in (matmul precision "medium": bfloat16), and which
# one does is not in its name: eager against compiled is judged at bfloat16's tolerances under each one, or
# at those of the dtype its value names. The fresh compile under the same state stays exact.
SETTER_TOLERANCES = "bfloat16"


@functools.cache
def surveyed_setters() -> tuple[Setter, ...]:
    """This torch's setters, surveyed in a process of its own (the survey changes process state while it
    runs, and a setter that cannot be restored changes it for good): once a process."""
    done = subprocess.run([sys.executable, "-W", "ignore", str(SURVEY)], capture_output=True, text=True,
                          timeout=SURVEY_TIMEOUT)
    if done.returncode != 0:
        said = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
        raise RuntimeError(f"the ambient survey ({SURVEY.name}) failed: {said}")
    return tuple(Setter.from_dict(found) for found in json.loads(done.stdout)["setters"])


def setter_states() -> dict[str, tuple[str, str, str | None]]:
    """Every surveyed setter at each of its values, as STATES' entries."""
    states = {}
    for setter in surveyed_setters():
        for value in () if setter.left_out else setter.values:
            named = value[len("torch."):] if value.startswith("torch.") else None
            lower = named if named in DEFAULT_TOLERANCES else SETTER_TOLERANCES
            states[f"{setter.name}={value}"] = (setter.entered(value), SAME, lower)
    return states


# What a state the script names needs defined first (only what its states use is written).
HELPERS = {
    "switched": '''\
@contextlib.contextmanager
def switched(set_to, get, value):
    """A process-wide setting set to `value` inside, restored after."""
    before = get()
    set_to(value)
    try:
        yield
    finally:
        set_to(before)
''',
    "flag_set": '''\
@contextlib.contextmanager
def flag_set(module, name, value):
    """One flag of a torch.backends module set to `value` inside, restored after, through the module's
    flags() (torch's test utilities forbid setting it otherwise); its other flags kept as they are."""
    current = {flag: getattr(module, flag) for flag in inspect.signature(module.flags).parameters}
    with module.flags(**{**current, name: value}):
        yield
''',
    "PassThroughFunctionMode": '''\
class PassThroughFunctionMode(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))
''',
    "PassThroughDispatchMode": '''\
class PassThroughDispatchMode(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))
''',
}
HELPER_IMPORTS = {"flag_set": "import inspect",
                  "PassThroughFunctionMode": "from torch.overrides import TorchFunctionMode",
                  "PassThroughDispatchMode": "from torch.utils._python_dispatch import TorchDispatchMode"}
CACHES = ("memory", "disk", "off")


def caches_for(backend: str) -> tuple[str, ...]:
    """The cache modes a backend's programs are drawn in. Only inductor keeps compiles on disk (its FX
    graph cache, and AOTAutograd's cache of inductor's programs): under eager and aot_eager a disk
    example's second process is served nothing (it counts no cache hit nor miss) and compiles afresh,
    as the oracle's fresh compile does, at the cost of two more interpreters an example."""
    return CACHES if backend == "inductor" else tuple(mode for mode in CACHES if mode != "disk")

CACHE_SWITCH = '''\
@contextlib.contextmanager
def caches(on):
    """Inductor's FX graph cache and AOTAutograd's cache on or off (where this torch has them)."""
    with contextlib.ExitStack() as stack:
        for config, flag in ((torch._inductor.config, "fx_graph_cache"),
                             (torch._functorch.config, "enable_autograd_cache")):
            if hasattr(config, flag):
                stack.enter_context(config.patch(**{flag: on}))
        yield
'''

# The warm sequence: the one compiled function under each state in turn (its results kept).
SEQUENCE = {
    "memory": '''\
# One compiled function under each state in turn: Dynamo recompiles on its guards, inductor's and
# AOTAutograd's caches warm in memory.
with caches(on=True):
    for label, call, _ in STATES:
        warm.append((label, [[call(compiled, inputs) for _ in CALLS] for inputs in SAMPLES]))
''',
    "disk": '''\
# Every state compiled once with the caches on. Then a second process, with the same definitions and
# cache directory and nothing in memory, runs the states again in reverse: their compiles are served
# from inductor's and AOTAutograd's caches on disk, where this torch keeps them.
with caches(on=True):
    for label, call, _ in STATES:
        for inputs in SAMPLES:
            call(compiled, inputs)
SECOND_PASS = """
with caches(on=True):
    warm = [(label, [[call(compiled, inputs) for _ in CALLS] for inputs in SAMPLES])
            for label, call, _ in reversed(STATES)]
from torch._dynamo.utils import counters
served = {f"{group} {name}": n for group in ("inductor", "aot_autograd")
          for name, n in counters[group].items() if "cache" in name}
torch.save((warm, served), sys.argv[1])
"""
saved = os.path.join(CACHE_DIR.name, "second-pass.pt")
env = dict(os.environ)
if compiled is fn:  # torch.compile switched off here (a control run): off in the second process too
    env["TORCH_COMPILE_DISABLE"] = "1"
done = subprocess.run([sys.executable, "-", saved], input=DEFINITIONS + SECOND_PASS, env=env,
                      capture_output=True, text=True)
if done.returncode != 0:
    said = done.stderr.strip().splitlines() or [f"exit status {done.returncode}"]
    raise RuntimeError(f"the second process failed: {said[-1]}")
warm, served = torch.load(saved, weights_only=False)
print("the second process's compiles, by the caches:", served or "no cache counted")
''',
    "off": '''\
# One compiled function under each state in turn, inductor's and AOTAutograd's caches off.
with caches(on=False):
    for label, call, _ in STATES:
        warm.append((label, [[call(compiled, inputs) for _ in CALLS] for inputs in SAMPLES]))
''',
}

ORACLE = '''\
def judge(label, got, expected, against, call, tolerances):
    try:
        torch.testing.assert_close(got, expected, equal_nan=True, **tolerances)
    except AssertionError as error:
        raise AssertionError(f"after a recompile under {{label}} (cache {cache}): compiled against {{against}}, "
                             f"{{call}} call: {{error}}") from None


# The references, after the warm sequence: eager under the state, and the program compiled afresh under
# that state alone (a reset Dynamo, the caches off).
references = {{}}
for label, call, _ in STATES:
    if label not in references:
        torch._dynamo.reset()
        with caches(on=False):
            fresh = compile_fn()
            references[label] = [(call(fn, inputs), call(fresh, inputs)) for inputs in SAMPLES]
tolerances = {{label: state_tolerances for label, _, state_tolerances in STATES}}
for label, results in warm:
    for (eager, fresh), calls in zip(references[label], results):
        for call, got in zip(CALLS, calls):
{eager_check}            judge(label, got, fresh, "a fresh compile", call, {{}})
'''
EAGER_CHECK = '            judge(label, got, eager, "eager", call, tolerances[label])\n'


@dataclasses.dataclass(frozen=True)
class RecompileOpProgram(OpProgram):
    """The op's function compiled once and called under each of `states` (STATES' names) in turn,
    inductor's and AOTAutograd's caches as `cache` says (CACHES)."""
    states: tuple = ("none", "autocast_bf16")
    cache: str = "memory"

    def state(self, name: str) -> tuple[str, str, str | None]:
        written = {**STATES, **CUDA_STATES}
        if name not in written:  # a setter's (surveyed only where a program draws one)
            return setter_states()[name]
        context, transform, dtype = written[name]
        return context.format(device=self.device), transform, dtype

    def label(self, name: str) -> str:
        """How messages name a state: what the script enters, or what it does to the inputs; a setter's
        by its name and value."""
        context, _, _ = self.state(name)
        if name not in STATES and name not in CUDA_STATES:
            return name
        return name.replace("_", " ") if context == "contextlib.nullcontext()" else context

    def state_tolerances(self, name: str) -> dict:
        """The op's own tolerances, widened to the dtype the state may compute in."""
        tolerances = self.tolerances()
        lower = self.state(name)[2]
        if lower:
            tolerances = {k: max(tolerances.get(k, 0), v) for k, v in DEFAULT_TOLERANCES[lower].items()}
        return tolerances

    def helpers(self) -> list[str]:
        used = " ".join(self.state(name)[0] for name in self.states)
        return [name for name in HELPERS if name in used]

    def imports(self) -> list[str]:
        second_process = ["import sys"] if self.cache == "disk" else []
        partial = ["import functools"] if any("functools." in self.state(n)[0] for n in self.states) else []
        return ["import contextlib", *partial, *second_process, "import torch", "import torch._dynamo",
                "import torch._functorch.config", "import torch._inductor.config",
                *(HELPER_IMPORTS[h] for h in self.helpers() if h in HELPER_IMPORTS)]

    def cache_dir(self) -> list[str]:
        second_process = ["import subprocess", "import sys"] if self.cache == "disk" else []
        return ["import os", *second_process, "import tempfile", "",
                "# A cache directory of the script's own (removed with it): nothing compiled elsewhere is served.",
                'CACHE_DIR = tempfile.TemporaryDirectory(prefix="recompile-")',
                'os.environ["TORCHINDUCTOR_CACHE_DIR"] = CACHE_DIR.name\n']

    def states_source(self) -> str:
        lines = [f"{HELPERS[h]}\n" for h in self.helpers()]
        lines += ["def under(context, f, inputs):", "    with context:",
                  "        return run(f, inputs, seed=0)  # seeded: a random op draws alike under every compile", "",
                  "STATES = [  # (label, f and inputs -> f's results under the state, eager's tolerances)"]
        for name in self.states:
            context, transform, _ = self.state(name)
            inputs = "inputs" if transform == SAME else f"({transform})(inputs)"
            lines.append(f"    ({self.label(name)!r}, lambda f, inputs: under({context}, f, {inputs}),"
                         f" {self.state_tolerances(name)!r}),")
        return "\n".join(lines + ["]\n"])

    @property
    def source(self) -> str:
        names = ", ".join(self.label(name) for name in self.states)
        return super().source + f"# called under: {names}; caches {self.cache}\n"

    def script(self, backend: str) -> str:
        made = self.call.materialise(self.device)
        params = ", ".join(made.names)
        seen = "    SEEN.append(1)\n" if self.side_effect else ""
        samples = "".join(f"SAMPLES.append([{', '.join(values)}])\n" for values in made.values)
        # A random op draws otherwise than eager by design: only the fresh compile judges it.
        eager_check = "" if self.op_class == "random" else EAGER_CHECK
        definitions = "\n".join([
            "\n".join(self.imports()), 'SEEN, SAMPLES, CALLS = [], [], ("first", "second")\n',
            f"def op({params}):\n{seen}    return {made.call}\n", self.definitions(params), samples,
            f"def compile_fn():\n    return torch.compile(fn, {self.compile_options(backend)})\n",
            "compiled = compile_fn()\n", RUN, CACHE_SWITCH, self.states_source()])
        if self.cache == "disk":  # one text: run here, and again in the second process
            quotes = "'" * 3
            assert quotes not in definitions and not definitions.endswith("\\")
            definitions = (f"# The program, run here and again in a second process (the disk caches).\n"
                           f"DEFINITIONS = r{quotes}\n{definitions}{quotes}\nexec(DEFINITIONS)\n")
        return "\n".join(["\n".join(self.cache_dir()), definitions, "warm = []",
                          SEQUENCE[self.cache], ORACLE.format(cache=self.cache, eager_check=eager_check)])


def state_names(device: str) -> list[str]:
    return sorted(STATES) + (sorted(CUDA_STATES) if device == "cuda" else []) + sorted(setter_states())


def no_repeat_in_a_row(states) -> bool:
    """A state right after itself is no recompile; coming back to an earlier one is (a cache hit)."""
    return all(a != b for a, b in zip(states, states[1:], strict=False))


# Dynamo does not trace a frame under a user TorchDispatchMode: it runs it eagerly, and fullgraph=True
# raises "found no compiled frames" (a RuntimeError, not the Unsupported FullgraphRefused judges). Not
# drawn together, as nested_compile does not draw fullgraph with a graph break.
REFUSED_UNDER_FULLGRAPH = {"dispatch_mode"}


def recompile_op_programs(calls, device, backend):
    names = state_names(device)
    sequences = st.lists(st.sampled_from(names), min_size=2, max_size=3).filter(no_repeat_in_a_row).map(tuple)
    # No Python side effect: Dynamo guards on the list's length, so every call would recompile, and the
    # states' recompiles would drown in those (past the recompile limit, fullgraph=True raises).
    return st.builds(RecompileOpProgram, **common_knobs(calls, device, side_effects=False), states=sequences,
                     cache=st.sampled_from(caches_for(backend))).filter(
        lambda p: not (p.fullgraph and REFUSED_UNDER_FULLGRAPH & set(p.states)))
