"""A model with two inputs and two outputs, for the build and run tests."""

import torch
from torch import nn


class TwoInTwoOut(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(6, 4)
        self.b = nn.Linear(3, 4)

    def forward(self, left: torch.Tensor, right: torch.Tensor):
        mixed = torch.tanh(self.a(left)) + torch.sigmoid(self.b(right))
        return mixed, mixed.sum(dim=1, keepdim=True) * 2.0


def build():
    torch.manual_seed(0)
    return TwoInTwoOut().eval(), (torch.zeros(2, 6), torch.zeros(2, 3))


def batch_mlp():
    from etdeploy.model import ModelSpec

    torch.manual_seed(1)
    model = nn.Sequential(nn.Linear(5, 8), nn.ReLU(), nn.Linear(8, 2)).eval()
    return ModelSpec(module=model, example_inputs=(torch.zeros(4, 5),), input_names=["x"])


class MostlyCpu(nn.Module):
    """Ops XNNPACK does not take (cumsum, flip, argmax-like reductions) around one linear."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.cumsum(x, dim=1)
        y = torch.flip(y, dims=[1])
        y = torch.cumsum(y, dim=1)
        y = torch.flip(y, dims=[1])
        return self.fc(y)


def mostly_cpu():
    torch.manual_seed(2)
    return MostlyCpu().eval(), (torch.zeros(1, 8),)


def dynamic_mlp():
    """A batch dimension exported dynamic (1..16), declared by the factory."""
    from etdeploy.model import ModelSpec

    torch.manual_seed(3)
    model = nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 3)).eval()
    return ModelSpec(
        module=model,
        example_inputs=(torch.zeros(4, 5),),
        input_names=["x"],
        dynamic={"x": {0: (1, 16)}},
    )
