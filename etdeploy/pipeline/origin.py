"""Where an error is born, and what made it visible.

Each tapped operator's own error (etdeploy.pipeline.operator_error: what it
computed wrong given the device's own inputs) against what float32 allows it
names the origin: the first operator over its bound from which a departing
value descends. When no operator is over its bound and the outputs still
depart, the model is ill-conditioned in float32 there: the origin is the
operator whose own (allowed) rounding, amplified on the way, contributes most,
among those whose value differs from the reference's at all (a rounding eager
makes too, bit for bit, is no part of the device's difference: an add that makes
values large rounds them the same on both sides), and the amplifiers are the operators within their bound whose output's
relative error is far larger than their inputs' (a subtraction of nearly equal
values, a division by small values, an exponential of large ones).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from etdeploy.pipeline.taps import GROWTH
from etdeploy.results.result import Amplifier, OperatorError, Origin, TapResult
from etdeploy.results.result_localization import describe_amplifiers, describe_own_error, where

# What each kind of amplifier does, by the operator (aten's name).
_CAUSES = {
    "cancellation": ("add", "sub", "rsub", "addmm", "linear", "sum", "mean", "cumsum"),
    "division by small values": ("div", "reciprocal", "rsqrt", "true_divide", "floor_divide"),
    "softmax over large logits": (
        "softmax", "_softmax", "_safe_softmax", "log_softmax", "_log_softmax",
        "scaled_dot_product_attention",
    ),
    "exponential of large values": ("exp", "exp2", "pow", "sigmoid", "tanh"),
    "normalisation of values whose mean dwarfs their spread": (
        "layer_norm", "group_norm", "native_group_norm", "native_layer_norm", "batch_norm",
        "instance_norm", "rms_norm",
    ),
}  # fmt: skip
_HINTS = {
    "cancellation": "subtract the common level before it is reduced or scaled (or compute "
    "that part in float64 on the host side), so the values that cancel are not large",
    "division by small values": "keep the divisor away from zero (a floor, or a larger "
    "unit), or compute the ratio in float64 on the host side",
    "softmax over large logits": "a softmax needs only the logits' differences: compute "
    "them against a common level so they stay small, or compute that part in float64 on the "
    "host side",
    "exponential of large values": "rescale the values before the exponential, or compute "
    "that part in float64 on the host side",
    "normalisation of values whose mean dwarfs their spread": "remove the values' level "
    "before normalising them (anomalies, not absolute readings), or normalise in float64 "
    "on the host side",
}
_GENERIC_HINT = "compute that part in float64 on the host side, reorder it, or rescale its inputs"


@dataclass(frozen=True)
class Blame:
    origin: Origin
    amplifiers: tuple[Amplifier, ...]
    # No operator is over its bound: float32 cannot compute this part of the model
    # the way eager does, and the outputs depart anyway.
    ill_conditioned: bool


def cause_of(op: str) -> str:
    return next((cause for cause, ops in _CAUSES.items() if op in ops), "conditioning")


def blame(rows: Sequence[TapResult], diverged: bool) -> Blame | None:
    """The origin and the amplifiers, or None when nothing departs (or no whole
    tapped value was measured)."""
    measured = [r for r in rows if r.local is not None and not r.context]
    departing = {r.node for r in rows if r.status != "ok"}
    if not measured or not (departing or diverged):
        return None
    below = _descendants(rows)
    # A value that departs, or (when the outputs depart but no tap is over its
    # tolerance) every value: what an origin's error must reach.
    visible = departing or {r.node for r in rows}
    over = [
        r
        for r in measured
        if _local(r).over_bound and (r.node in visible or below[r.node] & visible)
    ]
    if not over and not diverged:
        # Values over the tap tolerance, but every operator within its bound and the
        # outputs pass: rounding each operator was allowed, carried on.
        return None
    gains = _gains(rows)
    if over:
        first = over[0]
        origin = _origin(first, True, _local(first).rel * gains[first.node])
    else:
        # Only where the device's value first differs from eager's can their
        # difference start; a rounding both make alike is shared, not born here.
        differing = [r for r in measured if r.metrics.max_abs > 0] or measured
        scored = [(_local(r).rel * gains[r.node], i) for i, r in enumerate(differing)]
        contribution, index = max(scored)
        if contribution <= 0:
            return None
        origin = _origin(differing[index], False, contribution)
    amplifiers = tuple(
        _amplifier(r)
        for r in rows
        if r.node in below[origin.node]
        and (r.local is None or not r.local.over_bound)
        and _factor(r) >= GROWTH
    )
    return Blame(origin, amplifiers, ill_conditioned=not over)


def _local(row: TapResult) -> OperatorError:
    assert row.local is not None
    return row.local


def _factor(row: TapResult) -> float:
    """How many times its inputs' relative error its output's is (1: none carried in)."""
    if row.carried_in <= 0:
        return 1.0
    return row.metrics.rel / row.carried_in


def _descendants(rows: Sequence[TapResult]) -> dict[str, set[str]]:
    """Each tap's descendants among the taps (through its readers)."""
    readers: dict[str, list[str]] = {}
    for row in rows:
        for name in row.inputs:
            readers.setdefault(name, []).append(row.node)
    found: dict[str, set[str]] = {}
    for row in reversed(rows):  # graph order: readers come later
        below: set[str] = set()
        for reader in readers.get(row.node, ()):
            below |= {reader} | found.get(reader, set())
        found[row.node] = below
    return found


def _gains(rows: Sequence[TapResult]) -> dict[str, float]:
    """How much a relative error at each tap grows on its way to the outputs:
    the largest product of the readers' amplification along a path."""
    readers: dict[str, list[TapResult]] = {}
    for row in rows:
        for name in row.inputs:
            readers.setdefault(name, []).append(row)
    gains: dict[str, float] = {}
    for row in reversed(rows):
        paths = [_factor(r) * gains[r.node] for r in readers.get(row.node, ())]
        gains[row.node] = max(paths, default=1.0)
    return gains


def _origin(row: TapResult, over_bound: bool, contribution: float) -> Origin:
    return Origin(
        op=row.op, node=row.node, module=row.module, source=row.source, code=row.code,
        partition=row.partition, kernel=row.kernel, sample=_local(row).sample or row.sample,
        error=_local(row), over_bound=over_bound, contribution=contribution,
    )  # fmt: skip


def _amplifier(row: TapResult) -> Amplifier:
    return Amplifier(
        op=row.op, node=row.node, module=row.module, source=row.source, sample=row.sample,
        factor=_factor(row), cause=cause_of(row.op),
    )  # fmt: skip


def hint_for(found: Blame) -> str | None:
    """What a user can do about an ill-conditioned part of the model."""
    if not found.ill_conditioned:
        return None
    causes = [a.cause for a in found.amplifiers]
    return _HINTS.get(causes[0], _GENERIC_HINT) if causes else _GENERIC_HINT


def verdict(found: Blame, diverged: bool) -> tuple[str, str]:
    """The localisation's status and its one-line reason, from the origin."""
    origin = found.origin
    amplified = f"; on the way, {describe_amplifiers(found.amplifiers)}" if found.amplifiers else ""
    passing = "" if diverged else "; the model's outputs still pass"
    if not found.ill_conditioned:
        return "localized", (
            f"the device departs from eager at {where(origin)}: given the device's own "
            f"inputs it is off by {describe_own_error(origin.error)}{amplified}{passing}"
        )
    return "ill_conditioned", (
        "no operator computes anything float32 does not allow it, given what it was handed: "
        "the model is ill-conditioned in float32 here. The error starts as the rounding of "
        f"{where(origin)} ({describe_own_error(origin.error)})"
        + (
            f", and {describe_amplifiers(found.amplifiers)}"
            if found.amplifiers
            else ", which the operators after it carry to the outputs"
        )
        + passing
    )
