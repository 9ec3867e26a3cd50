# Compiled under bfloat16 autocast, then called under float16 autocast: Dynamo does not recompile.
import torch

def fn(x):
    return x @ x

compiled = torch.compile(fn, backend="aot_eager")  # the traced graph holds autocast's casts
x = torch.randn(8, 8)
try:
    with torch.autocast("cpu", dtype=torch.float16):
        fn(x)
except RuntimeError as error:  # torch 2.1's CPU autocast has no float16: exit 125, skip
    raise SystemExit(print(f"OUTCOME: skip: {error}") or 125)
with torch.autocast("cpu", dtype=torch.bfloat16):
    compiled(x)
with torch.autocast("cpu", dtype=torch.float16):
    eager, got = fn(x).dtype, compiled(x).dtype
print("under float16 autocast: eager", eager, "compiled", got)
assert got == eager, "the graph traced under bfloat16 autocast ran under float16"
