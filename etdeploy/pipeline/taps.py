"""Judging tapped values: each against the same node's eager value, scale-aware,
and the first operator whose error outgrows what its inputs carried in.

Scale-aware: a value's error counts relative to that value's own magnitude (its
largest |eager value|), also shown in float32 ULPs at that magnitude and as
SQNR; a value on a quantization grid counts in steps of the grid. So an add of
two numbers near 1000 that is one ULP off (6e-5) is within tolerance, where an
absolute tolerance would have flagged it.

Blame needs growth: a value over tolerance whose relative error is no more than
`growth` times the worst its inputs carried in only passed an error on (a linear
layer after a broken normalisation); the first value whose error grew past that
is where the device starts to depart. An input that is exact (a model input, a
weight) is taken to carry float32's epsilon, so an operator that turns exact
inputs into a visible error is blamed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from etdeploy.builder.tap_plan import FULL
from etdeploy.builder.tapped_manifest import TapInfo
from etdeploy.results.result import (
    FirstDivergence,
    OperatorError,
    TapMetrics,
    TapResult,
    TapTolerance,
    Thresholds,
)

FLOAT32_EPS = float(np.finfo(np.float32).eps)
# An operator whose relative error is 10x (20 dB) what its inputs carried added
# the error itself; a well-conditioned operator passes an error on at about 1x.
GROWTH = 10.0
# The STATS summary's fields (executorch's intermediate_output_tap/_reducers.py,
# 1.5.1, read 2026-12-03). Order statistics pick an element, so they differ by
# no more than the elements do: compared at the value's tolerance. Sums are
# rounded differently on the device (a kernel's loop) and in eager (pairwise),
# by up to about numel * epsilon of the magnitude: a difference beyond that
# bound counts. std is not compared: the device's reducer computes it as
# sqrt(|E[x^2] - E[x]^2|), which loses every digit on a value whose mean dwarfs
# its spread (the very values a large add produces), so it would blame the add.
_ORDER_STATISTICS = ("min", "max", "abs_max", "p99_abs")
_SUMS = ("mean", "abs_mean", "rms")
_COUNTS = ("nan_count", "inf_count")
# Slack for float32 rounding of a step count (as etdeploy.numerics's steps rule).
_STEP_SLACK = 1e-3


def tap_tolerance(thresholds: Thresholds, quantized: bool) -> TapTolerance:
    """The run's own limits, applied to each value at its own scale: rtol for a
    float program; for a quantized one, quant_steps on a grid and quant_rtol off it."""
    return TapTolerance(
        rel=thresholds.quant_rtol if quantized else thresholds.rtol,
        growth=GROWTH,
        quant_steps=thresholds.quant_steps,
        floor=FLOAT32_EPS,
    )


def tap_metrics(tap: TapInfo, got: np.ndarray, want: np.ndarray) -> TapMetrics:
    """The device's value of one tap against eager's."""
    if tap.reducer == FULL:
        max_abs, magnitude, sqnr = _full_tensor(got, want)
    else:
        max_abs, magnitude = _summary(tap.fields, tap.shape, got, want)
        sqnr = None
    rel = _relative(max_abs, magnitude)
    ulp = float(np.spacing(np.float32(max(magnitude, float(np.finfo(np.float32).tiny)))))
    return TapMetrics(
        max_abs=max_abs,
        rel=rel,
        ulps=max_abs / ulp,
        magnitude=magnitude,
        sqnr_db=sqnr,
        steps=max_abs / tap.step if tap.step else None,
    )


def _relative(max_abs: float, magnitude: float) -> float:
    if magnitude > 0:
        return max_abs / magnitude
    return 0.0 if max_abs == 0 else math.inf


def _full_tensor(got: np.ndarray, want: np.ndarray) -> tuple[float, float, float]:
    a = np.asarray(got, dtype=np.float64).ravel()
    e = np.asarray(want, dtype=np.float64).ravel()
    if a.shape != e.shape:
        return math.inf, _magnitude(e), -math.inf
    with np.errstate(invalid="ignore", over="ignore"):
        diff = np.abs(a - e)
    # The same NaN or infinity on both sides is agreement.
    same = (np.isnan(a) & np.isnan(e)) | (np.isinf(a) & (a == e))
    diff = np.where(same, 0.0, diff)
    max_abs = float(np.max(diff)) if diff.size else 0.0
    if math.isnan(max_abs):
        max_abs = math.inf
    finite = np.isfinite(e)
    noise = float(np.sum(np.where(finite, diff, 0.0) ** 2))
    signal = float(np.sum(e[finite] ** 2))
    if not math.isfinite(max_abs):
        sqnr = -math.inf
    elif noise == 0:
        sqnr = math.inf
    else:
        sqnr = 10 * math.log10(signal / noise) if signal > 0 else -math.inf
    return max_abs, _magnitude(e), sqnr


def _magnitude(values: np.ndarray) -> float:
    finite = values[np.isfinite(values)]
    return float(np.max(np.abs(finite))) if finite.size else 0.0


def _summary(
    fields: Sequence[str], shape: Sequence[int], got: np.ndarray, want: np.ndarray
) -> tuple[float, float]:
    """A summary tap: the largest difference of an order statistic, or of a sum
    beyond its rounding; a different count of NaNs or infinities is an
    infinite error. A lower bound of the elements' error."""
    a = np.asarray(got, dtype=np.float64).ravel()
    e = np.asarray(want, dtype=np.float64).ravel()
    where = {name: i for i, name in enumerate(fields)}
    needed = (*_ORDER_STATISTICS, *_SUMS, *_COUNTS)
    if a.shape != e.shape or not all(f in where for f in needed):
        return math.inf, 0.0
    magnitude = abs(float(e[where["abs_max"]]))
    if not math.isfinite(magnitude):
        magnitude = 0.0
    if any(a[where[f]] != e[where[f]] for f in _COUNTS):
        return math.inf, magnitude
    diffs = [abs(float(a[where[f]] - e[where[f]])) for f in _ORDER_STATISTICS]
    rounding = max(math.prod(shape), 1) * FLOAT32_EPS * magnitude
    diffs += [d for f in _SUMS if (d := abs(float(a[where[f]] - e[where[f]]))) > rounding]
    max_abs = max(diffs)
    return (max_abs if math.isfinite(max_abs) else math.inf), magnitude


def within(metrics: TapMetrics, tolerance: TapTolerance) -> bool:
    if metrics.steps is not None:
        return metrics.steps <= tolerance.quant_steps * (1 + _STEP_SLACK)
    return metrics.rel <= tolerance.rel


@dataclass(frozen=True)
class Judged:
    """One tap in one sample."""

    metrics: TapMetrics
    carried_in: float
    growth: float | None
    status: str


def judge_sample(
    taps: Sequence[TapInfo], metrics: Mapping[str, TapMetrics], tolerance: TapTolerance
) -> dict[str, Judged]:
    """Every tap of one sample, in graph order: ok, carried (over tolerance,
    but no more than its inputs explain) or departs (its error grew)."""
    judged: dict[str, Judged] = {}
    for tap in taps:
        found = metrics[tap.node]
        carried = max((metrics[name].rel for name in tap.inputs if name in metrics), default=0.0)
        if within(found, tolerance):
            judged[tap.node] = Judged(found, carried, None, "ok")
            continue
        # An infinite error in, any error out: passed on.
        growth = 1.0 if math.isinf(carried) else found.rel / max(carried, tolerance.floor)
        # A value carried into the localised module has untapped inputs: not blamed.
        status = "departs" if growth >= tolerance.growth and not tap.context else "carried"
        judged[tap.node] = Judged(found, carried, growth, status)
    return judged


_SEVERITY = {"ok": 0, "carried": 1, "departs": 2}


def tap_results(
    taps: Sequence[TapInfo],
    per_sample: Mapping[str, Mapping[str, Judged]],
    own: Mapping[str, Mapping[str, OperatorError]] | None = None,
) -> tuple[list[TapResult], FirstDivergence | None]:
    """The table over the localised samples: each tap's worst status, with the
    metrics of the sample where its error is largest, and its own error
    (`own`, per sample) where it is largest against its bound; and the first
    divergence, the earliest tap in graph order that departs in any sample."""
    rows: list[TapResult] = []
    first: FirstDivergence | None = None
    for index, tap in enumerate(taps):
        samples = {name: judged[tap.node] for name, judged in per_sample.items()}
        status = max((j.status for j in samples.values()), key=_SEVERITY.__getitem__)
        # The sample it departs in (largest growth), else the one with the largest error.
        if status == "departs":
            sample = max(
                (s for s, j in samples.items() if j.status == "departs"),
                key=lambda s: samples[s].growth or 0.0,
            )
        else:
            sample = max(samples, key=lambda s: samples[s].metrics.rel)
        judged = samples[sample]
        row = TapResult(
            index=index, node=tap.node, op=tap.op, module=tap.module,
            module_class=tap.module_class, source=tap.source, code=tap.code,
            partition=tap.partition, kernel=tap.kernel, delegate=tap.delegate,
            reducer=tap.reducer, shape=tap.shape, inputs=tap.inputs, sample=sample,
            metrics=judged.metrics, carried_in=judged.carried_in, growth=judged.growth,
            status=status, context=tap.context, step=tap.step,
            local=_worst_own(tap.node, own or {}), same_as=tap.same_as,
        )  # fmt: skip
        rows.append(row)
        if first is None and status == "departs":
            first = FirstDivergence(
                op=tap.op, node=tap.node, module=tap.module, source=tap.source, code=tap.code,
                partition=tap.partition, kernel=tap.kernel, sample=sample,
                metrics=judged.metrics, carried_in=judged.carried_in, growth=judged.growth,
            )  # fmt: skip
    return rows, first


def _worst_own(node: str, own: Mapping[str, Mapping[str, OperatorError]]) -> OperatorError | None:
    found = [replace(errors[node], sample=name) for name, errors in own.items() if node in errors]
    return max(found, key=lambda e: e.ratio) if found else None
