# Compiled under bfloat16 autocast, then called under float16 autocast: inductor serves the bfloat16 program.
import torch

def fn(x):
    return x @ x

compiled = torch.compile(fn, backend="inductor")
x = torch.randn(8, 8)
try:
    with torch.autocast("cpu", dtype=torch.float16):
        fn(x)
except RuntimeError as error:  # torch 2.1's CPU autocast has no float16: exit 125, skip
    raise SystemExit(print(f"OUTCOME: skip: {error}") or 125)
with torch.autocast("cpu", dtype=torch.bfloat16):
    compiled(x)  # Dynamo recompiles below (its guard sees the dtype); AOTAutograd's cache key does not
with torch.autocast("cpu", dtype=torch.float16):
    eager, got = fn(x).dtype, compiled(x).dtype
print("under float16 autocast: eager", eager, "compiled", got)
assert got == eager, "the program compiled for bfloat16 autocast was served under float16"
