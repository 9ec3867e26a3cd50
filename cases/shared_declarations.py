"""Upstream declarations that more than one family carries, defined once."""

import pytest

# torch < 2.5 ran an eager checkpoint's saved-tensor hooks while tracing (fixed in 2.5 by PR #123196).
# The eager backend: the first compiling call packs more tensors than the recompute. aot_eager and
# inductor: AOTAutograd's joint trace (torch.autograd.grad) meets the checkpoint's unpack_hook
# (torch/utils/checkpoint.py, unpack_hook -> recompute_fn, measured on 2.4.1), which runs the compiled
# function inside the trace.
EAGER_CHECKPOINT_OF_COMPILED = (
    pytest.mark.upstream_bug("pytorch/pytorch#113263", raises="CheckpointError",
                             match="A different number of tensors was saved"),
    pytest.mark.upstream_bug("pytorch/pytorch#113263", raises="RuntimeError",
                             match="FX to symbolically trace a dynamo-optimized function", until="2.4"),
)

# fullgraph=True "will raise an error" for a graph break (torch.compile's documentation); an op
# program that fails so and passes without fullgraph shows that (cases/programs/op_programs.py).
FULLGRAPH_REFUSES_GRAPH_BREAK = pytest.mark.limitation(
    "https://docs.pytorch.org/docs/stable/generated/torch.compile.html", raises="FullgraphRefused",
    match="fullgraph=True refused a graph break")


def with_marks(marks):
    """A decorator applying several marks (one declaration per version range, say) in order."""
    def apply(fn):
        for mark in reversed(marks):
            fn = mark(fn)
        return fn
    return apply
