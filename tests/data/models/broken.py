"""Factories that fail in the ways users' factories fail."""

import torch
from torch import nn


def raises():
    raise RuntimeError("weights file missing")


def wrong_type():
    return 42


def not_a_module():
    return "model", (torch.zeros(1),)


class Thresholded(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.sum() > 0:  # data-dependent control flow: torch.export cannot capture it
            return x * 2
        return x


def data_dependent():
    return Thresholded(), (torch.ones(3),)
