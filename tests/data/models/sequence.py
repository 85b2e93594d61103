"""A tiny token-sequence classifier whose length a build makes dynamic with
--dynamic tokens:1=2..16: embedding, a 1-D convolution and a mean over the tokens. For int8 calibration on samples of
several lengths and for shape errors that must name a declared range."""

import torch
from torch import nn

MAX_LENGTH = 16


class TokenClassifier(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(32, 8)
        self.conv = nn.Conv1d(8, 8, kernel_size=1)
        self.head = nn.Linear(8, 3)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens).transpose(1, 2)  # [1, 8, L]
        x = torch.relu(self.conv(x))
        return self.head(x.mean(dim=2))


def classifier():
    from etdeploy.model import ModelSpec

    torch.manual_seed(4)
    return ModelSpec(
        module=TokenClassifier().eval(),
        example_inputs=(torch.zeros(1, MAX_LENGTH, dtype=torch.int64),),
        input_names=["tokens"],
    )
