# torch.compile keeps running the attention kernel of its first compile after SDPA's backends are switched.
# Dynamo guards none of SDPA's backend switches, and AOTAutograd put the chosen kernel's op into the graph.
import torch
import torch.nn.functional as F

def attend(q, k, v):
    return F.scaled_dot_product_attention(q, k, v)

torch.manual_seed(0)
q, k, v = (torch.randn(2, 3, 16, 8) for _ in range(3))
compiled = torch.compile(attend, backend="aot_eager")
first = compiled(q, k, v)  # the CPU's flash kernel, SDPA's default where it applies
torch.backends.cuda.enable_flash_sdp(False)  # read on the CPU too: the math kernel from here on
torch.backends.cuda.enable_mem_efficient_sdp(False)
eager, again = attend(q, k, v), compiled(q, k, v)
print("eager changed:", not torch.equal(eager, first), "| compiled changed:", not torch.equal(again, first))
assert torch.equal(again, eager), "the compiled function still runs the kernel of its first compile"
