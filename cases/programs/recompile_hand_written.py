"""What the recompile family's hand-written cases call: the programs, inputs and states each meets, apart
from the cases (cases/test_recompile.py) that check them."""

import re

import torch

# A weighted covariance: `torch.cov`'s weights hold one entry an observation, so a new observation count
# changes the size of both inputs. Dynamo's recompile for the second size marks it dynamic (automatic
# dynamic shapes) and traces the op once more with that size symbolic; the third size must reuse it.
OBSERVATION_COUNTS = (4, 5, 6)


def weighted_cov_inputs(observations, weights, device):
    x = torch.randn(3, observations, device=device)
    given = {}
    if weights in ("fweights", "both"):
        given["fweights"] = torch.randint(1, 4, (observations,), device=device)
    if weights in ("aweights", "both"):
        given["aweights"] = torch.rand(observations, device=device) + 0.5
    return x, given


def weighted_cov(x, fweights=None, aweights=None):
    return torch.cov(x, fweights=fweights, aweights=aweights)


# Dynamo words the failure of an op under symbolic sizes in each torch otherwise, with the op's own error
# (from c10's TensorImpl) quoted inside, its C++ stack after it.
SYMBOLIC_SIZES_ERROR = re.compile(r"Cannot call \w+\(\) on tensor with symbolic sizes/strides")


def symbolic_cause(error: BaseException) -> str:
    """The op's own error where the text quotes one, else the text's first line."""
    found = SYMBOLIC_SIZES_ERROR.search(str(error))
    return found.group(0) if found else (str(error).strip().splitlines() or [""])[0]


# Ops whose result dtype is read from the default dtype when they run, each by its own path: type
# promotion of an integer true division, a factory given no dtype, an integer tensor times a Python float.
DEFAULT_DTYPE_READERS = {
    "true_divide_of_integers": lambda x: x / 2,
    "factory_without_dtype": lambda x: torch.ones(x.shape, device=x.device) + x,
    "integer_times_float_scalar": lambda x: x * 1.5,
}


def under_default_dtype(read, dtype):
    """A user's function that switches the default dtype around part of its work and restores it (as a
    context manager of model-building code does)."""
    def switched(x):
        before = torch.get_default_dtype()
        torch.set_default_dtype(dtype)
        try:
            return read(x)
        finally:
            torch.set_default_dtype(before)
    return switched


# A function met by forward-mode AD: an elementwise op, and a matmul with a sum (inductor calls an extern
# kernel for the matmul).
DUAL_FUNCTIONS = {"pointwise": lambda x: x.sin() * 2, "matmul_sum": lambda x: (x @ x.T).sum(0)}


# Global forward hooks as a debugging session registers them (torch.nn.modules.module.register_module_forward_hook),
# each made with the case's list: one that reads its output as a tensor (a NaN check: Dynamo breaks its graph
# there), one that returns a new output (Dynamo traces it into the graph), and one that puts in the list the
# type of each module it is called on, outside Dynamo (torch._dynamo.disable), so what it saw is what ran.
def nan_check_hook(seen):
    def hook(module, args, output):
        if not torch.isfinite(output).all():
            raise AssertionError(f"non-finite output in {type(module).__name__}")
    return hook


def doubling_hook(seen):
    def hook(module, args, output):
        return output * 2
    return hook


def recording_hook(seen):
    @torch._dynamo.disable
    def hook(module, args, output):
        seen.append(type(module).__name__)
    return hook


GLOBAL_FORWARD_HOOKS = {"checks_the_output": nan_check_hook, "returns_a_new_output": doubling_hook,
                        "records_the_module": recording_hook}
