# torch.set_default_dtype inside a compiled function does not reach the integer division after it.
# The division gets the dtype outside, not the one the function set: Dynamo keeps the setter in its
# graph, AOTAutograd (aot_eager, inductor) traces it to nothing, and div reads the default when it runs.
import torch

def halve_in_float64(x):
    torch.set_default_dtype(torch.float64)
    try:
        return x / 2
    finally:
        torch.set_default_dtype(torch.float32)

x = torch.arange(6)
expected = halve_in_float64(x)  # eager: float64
for backend in ("eager", "aot_eager", "inductor"):
    torch._dynamo.reset()  # each backend compiles afresh (torch 2.1 would reuse the first backend's code)
    got = torch.compile(halve_in_float64, backend=backend)(x)
    torch.testing.assert_close(got, expected)  # aot_eager: dtype float32 != float64
    print(backend, "as eager")
