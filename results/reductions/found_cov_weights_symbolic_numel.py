# A compiled torch.cov with weights fails once the number of observations changes.
# The recompile makes the size symbolic (automatic dynamic shapes), and cov's weight checks call numel().
import torch

def weighted_cov(x, w):
    return torch.cov(x, fweights=w)

compiled = torch.compile(weighted_cov, backend="eager")
for observations in (4, 5, 6):
    x, w = torch.randn(3, observations), torch.ones(observations, dtype=torch.int64)
    expected = weighted_cov(x, w)  # eager: fine at every size
    torch.testing.assert_close(compiled(x, w), expected)  # 5: TorchRuntimeError (numel() on symbolic sizes)
    print(observations, "observations: as eager")
