"""A tiny attention block that calls ExecuTorch's LLM custom operator
llama::custom_sdpa, as ExecuTorch's Llama export does (its sdpa replacement).

The program builds with the installed executorch (the op's export-time plugin,
libcustom_ops_aot_lib.so, is loaded by importing custom_ops); a runner needs
the LLM custom ops kernel library to load it, which the wheel does not ship in
a form a runner can link.
"""

# Registers torch.ops.llama.* (the export-time plugin): needed to trace the call.
import executorch.extension.llm.custom_ops.custom_ops  # noqa: F401
import torch
from torch import nn

HEADS = 2
HEAD_DIM = 4


class Attention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        width = HEADS * HEAD_DIM
        self.qkv = nn.Linear(width, 3 * width)
        self.out = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, width = x.shape
        q, k, v = self.qkv(x).split(width, dim=-1)
        # custom_sdpa takes [batch, seq, heads, head_dim] and attends causally from
        # position 0 (start_pos), as the Llama export's KV-cache-free prefill does.
        shape = (batch, seq, HEADS, HEAD_DIM)
        y = torch.ops.llama.custom_sdpa(
            q.reshape(shape), k.reshape(shape), v.reshape(shape), 0, None, 0.0, True
        )
        return self.out(y.reshape(batch, seq, width))


def build():
    torch.manual_seed(0)
    return Attention().eval(), (torch.zeros(1, 3, HEADS * HEAD_DIM),)
