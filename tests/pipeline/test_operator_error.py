"""What float32 allows one operator (etdeploy.pipeline.operator_bounds), and how
an origin and its amplifiers are named from each operator's own error
(etdeploy.pipeline.origin): on values made to measure, no device.

A bound must admit what a correct float32 implementation computes (eager
PyTorch's float32 against float64, on the same float32 inputs) and refuse what
a wrong one computes (the variance as E[x^2] - E[x]^2, a result scaled by a
few ULPs too many). The inputs are structured readings, not noise: pressures
near 1000 hPa, temperatures near 300 K, logits in the thousands.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
import torch

from etdeploy.pipeline.operator_bounds import bound_for
from etdeploy.pipeline.origin import blame
from etdeploy.results.result import OperatorError, TapMetrics, TapResult

aten = torch.ops.aten


def _readings(rows: int, width: int, level: float, spread: float) -> torch.Tensor:
    t = torch.arange(width, dtype=torch.float64)
    waves = [level + spread * torch.sin(t / (7.0 + r) + r) for r in range(rows)]
    return torch.round(torch.stack(waves) * 100) / 100


def _ratio(target: Any, args: tuple[Any, ...], computed32: torch.Tensor) -> float:
    """The worst element of a float32 result over its bound: the truth is the
    operator in float64 on the same float32 inputs."""
    args64 = tuple(a.double() if isinstance(a, torch.Tensor) else a for a in _f32(args))
    truth = target(*args64)
    bound = bound_for(target, args64, {}, truth)
    return float(((computed32.double() - truth).abs() / bound.allowed).max())


def _f32(args: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple(a.float() if isinstance(a, torch.Tensor) else a for a in args)


pressure = _readings(4, 64, 1000.0, 3.0)
temperature = _readings(2, 64, 300.0, 0.5).reshape(1, 8, 16)
weight = torch.linspace(-0.5, 0.5, 32 * 64, dtype=torch.float64).reshape(32, 64).sin()
logits = _readings(2, 16, 3000.0, 2.0)

CORRECT = {
    "linear": (aten.linear.default, (pressure, weight, torch.ones(32, dtype=torch.float64))),
    "sum": (aten.sum.dim_IntList, (pressure, [-1])),
    "mean": (aten.mean.dim, (pressure, [-1])),
    "layer_norm": (aten.layer_norm.default, (pressure, [64])),
    "group_norm": (aten.group_norm.default, (temperature, 4)),
    "softmax": (aten._softmax.default, (logits, -1, False)),
    "sub": (aten.sub.Tensor, (pressure, pressure.mean(dim=-1, keepdim=True))),
    "div": (aten.div.Tensor, (pressure, torch.tensor(7.0, dtype=torch.float64))),
    "exp": (aten.exp.default, (pressure / 200,)),
    "tanh": (aten.tanh.default, (pressure - 1000,)),
    "gelu": (aten.gelu.default, (pressure - 1000,)),
}


@pytest.mark.parametrize("name", list(CORRECT))
def test_eager_float32_is_within_the_bound_of_every_operator_kind(name: str) -> None:
    target, args = CORRECT[name]
    assert _ratio(target, args, target(*_f32(args))) <= 1


def test_a_variance_computed_as_the_mean_square_less_the_squared_mean_is_over_its_bound() -> None:
    """As ExecuTorch's portable layer_norm kernel does it for short rows: the sums
    in one float32 loop, then E[x^2] - E[x]^2."""
    x = pressure.float().numpy()
    total = np.cumsum(x, axis=-1, dtype=np.float32)[:, -1:].astype(np.float64)
    squares = np.cumsum(x * x, axis=-1, dtype=np.float32)[:, -1:].astype(np.float64)
    mean = total / 64
    variance = squares / 64 - mean * mean
    broken = torch.from_numpy(((x - mean) / np.sqrt(variance + 1e-5)).astype(np.float32))
    assert _ratio(aten.layer_norm.default, (pressure, [64]), broken) > 1


def test_an_elementwise_result_a_few_ulps_off_is_over_its_bound() -> None:
    target, args = CORRECT["sub"]
    exact = target(*_f32(args))
    off = exact + 8 * torch.finfo(torch.float32).eps * exact.abs()
    assert _ratio(target, args, exact) <= 1 < _ratio(target, args, off)


def test_a_sum_with_a_term_dropped_is_over_its_bound() -> None:
    target, args = CORRECT["sum"]
    dropped = pressure[:, 1:].float().sum(dim=-1)
    assert _ratio(target, args, dropped) > 1


# -- naming the origin and the amplifiers ---------------------------------------------------------


def _row(
    node: str, op: str, rel: float, own: float, ratio: float, inputs: tuple[str, ...] = (),
    carried: float = 0.0, status: str = "ok",
) -> TapResult:  # fmt: skip
    metrics = TapMetrics(max_abs=rel, rel=rel, ulps=rel / 1.2e-7, magnitude=1.0)
    local = OperatorError(max_abs=own, rel=own, ratio=ratio, bound_rel=own / max(ratio, 1e-30),
                          kind="sum", n=64, sample="s0")  # fmt: skip
    growth = None if status == "ok" else (rel / carried if carried else math.inf)
    return TapResult(
        index=0, node=node, op=op, module=None, module_class=None, source=None, code=None,
        partition="CPU", kernel=op, delegate=None, reducer="full", shape=(1, 64), inputs=inputs,
        sample="s0", metrics=metrics, carried_in=carried, growth=growth, status=status,
        local=local,
    )  # fmt: skip


def test_a_rounding_within_its_bound_that_a_subtraction_amplifies_is_ill_conditioned() -> None:
    rows = [
        _row("mean", "mean", 1e-6, 1e-6, 0.05),
        _row("sub", "sub", 1e-2, 0.0, 0.0, ("mean",), carried=1e-6, status="departs"),
        _row("linear", "linear", 1.2e-2, 1e-7, 0.01, ("sub",), carried=1e-2, status="carried"),
    ]
    found = blame(rows, diverged=True)
    assert found is not None and found.ill_conditioned
    assert found.origin.node == "mean" and not found.origin.over_bound
    [amplifier] = found.amplifiers
    assert (amplifier.op, amplifier.cause) == ("sub", "cancellation")
    assert amplifier.factor == pytest.approx(1e4)


def test_the_first_operator_over_its_bound_is_the_origin_whatever_grows_after_it() -> None:
    rows = [
        _row("add", "add", 0.0, 3e-8, 0.1),
        _row("norm", "layer_norm", 5e-2, 5e-2, 12.0, ("add",), status="departs"),
        _row("div", "div", 0.5, 0.0, 0.0, ("norm",), carried=5e-2, status="carried"),
    ]
    found = blame(rows, diverged=True)
    assert found is not None and not found.ill_conditioned
    assert found.origin.node == "norm" and found.origin.over_bound
    # Within its bound, the division makes the relative error 10 times larger.
    assert [(a.op, a.cause) for a in found.amplifiers] == [("div", "division by small values")]


def test_an_operator_over_its_bound_whose_error_reaches_nothing_that_departs_is_not_blamed() -> (
    None
):
    rows = [
        _row("side", "mean", 1e-6, 1e-6, 2.0),  # over its bound, read by nothing that departs
        _row("mean", "mean", 1e-6, 1e-6, 0.05),
        _row("sub", "sub", 1e-2, 0.0, 0.0, ("mean",), carried=1e-6, status="departs"),
    ]
    found = blame(rows, diverged=True)
    assert found is not None and found.origin.node == "mean"


def test_nothing_is_blamed_when_nothing_departs() -> None:
    rows = [_row("mean", "mean", 1e-7, 1e-7, 0.05), _row("sub", "sub", 1e-7, 0.0, 0.0, ("mean",))]
    assert blame(rows, diverged=False) is None


def test_own_errors_read_back_from_json_with_an_infinite_ratio() -> None:
    error = OperatorError(math.inf, math.inf, math.inf, 1e-6, "sum", 64, sample="s0")
    assert OperatorError.from_json(error.to_json()) == error
    assert np.isinf(OperatorError.from_json(error.to_json()).ratio) and error.over_bound


def test_a_rounding_eager_shares_bit_for_bit_is_not_the_origin_of_a_difference() -> None:
    """Issue 39's case: values made large by an add (~1,000), a mean over 4,096 of them
    that departs from eager by 1 ULP, a subtraction that cancels (x67,148). The add's own
    rounding is the larger, but eager rounds the same: its output equals the reference's
    exactly. The origin is the mean, where the device's value first differs."""
    ulp = 6.1e-5 / 1013.0  # float32's spacing near 1,013, relative
    rows = [
        _row("add", "add", 0.0, 0.5 * ulp, 0.12),
        _row("mean", "mean", ulp, 0.2 * ulp, 0.002, ("add",), status="departs"),
        _row("sub", "sub", ulp * 67_148, 0.0, 0.0, ("mean", "add"), carried=ulp, status="departs"),
    ]
    found = blame(rows, diverged=True)
    assert found is not None and found.ill_conditioned
    assert found.origin.node == "mean"
    [amplifier] = found.amplifiers
    assert (amplifier.op, amplifier.factor) == ("sub", pytest.approx(67_148))
