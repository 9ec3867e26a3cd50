# Dynamo installs no guard on a getset descriptor's method-wrapper passed to a compiled frame.
# A frame traced with Tensor._backward_hooks.__get__ runs again for Tensor.device.__get__ and returns
# None. A TorchFunctionMode meets it: its `func` for a tensor attribute is such a method-wrapper,
# so copy.copy(tensor) in compiled code, under any mode, reads None for the device.
import torch

f = torch.compile(lambda getter, x: getter(x), backend="eager")
x = torch.randn(2)
f(torch.Tensor._backward_hooks.__get__, x)
device = f(torch.Tensor.device.__get__, x)
print("eager:", torch.Tensor.device.__get__(x), "compiled:", device)
assert device == x.device, f"compiled returned {device!r}"
