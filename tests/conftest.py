import pathlib

import torch

# Loaded once here, before any pytester run: pytester's in-process runs drop the modules they
# imported, and torch, inductor and Triton's extension modules abort when imported twice.
# One tiny inductor compile pulls in everything a compile needs.
torch.compile(torch.sin, backend="inductor")(torch.ones(2))
torch._dynamo.reset()

pytest_plugins = ["pytester"]

ROOT = pathlib.Path(__file__).resolve().parent.parent
