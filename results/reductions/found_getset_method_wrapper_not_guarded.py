# copy.copy(tensor) under a TorchFunctionMode raises in compiled code: Dynamo does not guard a getset descriptor's method-wrapper passed to a frame.
# It has none from torch 2.5 on; 2.2-2.4 guard the id of a short-lived object, which the next takes.
# A frame traced with Tensor._backward_hooks.__get__ runs again for Tensor.device.__get__: None.
# A TorchFunctionMode meets it: its `func` for a tensor attribute is such a method-wrapper, so
# copy.copy(tensor) in compiled code, under any mode, reads None for the device.
import torch

f = torch.compile(lambda getter, x: getter(x), backend="eager")
x = torch.randn(2)
getter = torch.Tensor._backward_hooks.__get__
f(getter, x)
del getter  # torch 2.2-2.4 guard this short-lived object's id, which the next method-wrapper takes
device = f(torch.Tensor.device.__get__, x)
print("eager:", torch.Tensor.device.__get__(x), "compiled:", device)
assert device == x.device, f"compiled returned {device!r}"
