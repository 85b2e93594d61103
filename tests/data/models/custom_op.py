"""A model calling an operator that no kernel library in the runner registers:
the program builds, and the runner must refuse it naming the operator."""

import torch
from torch.library import Library, impl

# Defined at import so the factory's module carries the op wherever it loads.
_LIBRARY = Library("etdeploy_custom", "DEF")
_LIBRARY.define("triple(Tensor x) -> Tensor")
_LIBRARY.define("triple.out(Tensor x, *, Tensor(a!) out) -> Tensor(a!)")
impl(_LIBRARY, "triple", "CompositeExplicitAutograd")(lambda x: x * 3)


def _triple_out(x: torch.Tensor, *, out: torch.Tensor) -> torch.Tensor:
    out.copy_(x * 3)
    return out


impl(_LIBRARY, "triple.out", "CompositeExplicitAutograd")(_triple_out)
impl(_LIBRARY, "triple", "Meta")(lambda x: torch.empty_like(x))
impl(_LIBRARY, "triple.out", "Meta")(lambda x, *, out: out)


class UsesCustomOp(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.etdeploy_custom.triple(x) + 1


def build():
    return UsesCustomOp().eval(), (torch.zeros(1, 4),)


def build_3d():
    """The same operator on a 3-D input: another kernel key (dim order 0,1,2)."""
    return UsesCustomOp().eval(), (torch.zeros(1, 2, 4),)
