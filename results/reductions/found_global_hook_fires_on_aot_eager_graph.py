# With backend="aot_eager", a global forward hook is also called on AOTAutograd's compiled forward graph.
# The hook gets an fx GraphModule and the graph's list of outputs, not a Linear and a tensor: a hook that
# checks outputs for NaN raises, and one that returns a value replaces the graph's outputs (torch 2.14+).
import torch

def nan_check(module, args, output):
    if not torch.isfinite(output).all():  # TypeError: ... must be Tensor, not tuple (aot_eager only)
        print("non-finite output in", module)

torch.nn.modules.module.register_module_forward_hook(nan_check)
layer, x = torch.nn.Linear(4, 4), torch.randn(2, 4)
for backend in ("eager", "aot_eager", "inductor"):
    torch._dynamo.reset()
    torch.testing.assert_close(torch.compile(lambda x: layer(x) + 1, backend=backend)(x), layer(x) + 1)
    print(backend, "as eager")
