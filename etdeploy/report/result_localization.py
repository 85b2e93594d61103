"""The localization block of a RunResult (`run --localize`): each tapped
value against eager, and the first operator whose error outgrows its inputs'."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from etdeploy.report.record import Record, omitted_if_none


@dataclass(frozen=True)
class TapMetrics(Record):
    """One tapped value on the device against the same node's eager value,
    scaled by the value's own magnitude (its largest |eager value|).

    A summary tap (STATS: the value was over the byte budget) is compared by
    its summary (min, max, mean, std, rms, abs max ...), so `rel` is a lower
    bound and `sqnr_db` is absent."""

    max_abs: float
    rel: float  # max_abs / magnitude
    ulps: float  # max_abs in float32 ULPs at the magnitude
    magnitude: float
    sqnr_db: float | None = None
    steps: float | None = omitted_if_none()  # in steps of its quantization grid

    @classmethod
    def from_json(cls, data: Any) -> TapMetrics:
        # null is non-finite: the errors were infinite (a NaN where eager had a number).
        filled = dict(data)
        for key in ("max_abs", "rel", "ulps"):
            if filled.get(key, 0) is None:
                filled[key] = math.inf
        if "sqnr_db" in filled and filled["sqnr_db"] is None and filled.get("max_abs") == 0:
            filled["sqnr_db"] = math.inf
        return super().from_json(filled)


TAP_STATUSES = ("ok", "carried", "departs")


@dataclass(frozen=True)
class TapResult(Record):
    """One tapped value, in graph order: where it was computed and how far the
    device's value is from eager's, against what its inputs carried in."""

    index: int  # graph order among the taps
    node: str  # the exported program's node name
    op: str  # layer_norm
    module: str | None  # the module path (norm, encoder.layers.3.attn); None: the model itself
    module_class: str | None
    source: str | None  # the user's line: model.py:42
    code: str | None
    partition: str  # XNNPACK (a delegate) or CPU (a kernel)
    kernel: str | None  # the CPU kernel, when not delegated
    delegate: int | None  # which delegated subgraph
    reducer: str  # full | stats
    shape: tuple[int, ...]
    inputs: tuple[str, ...]  # the tapped nodes it is computed from
    sample: str  # the sample these metrics are from (the worst of the localised ones)
    metrics: TapMetrics
    carried_in: float  # the largest rel error among its inputs (0: exact inputs)
    growth: float | None  # rel / what its inputs carried (None: within tolerance)
    status: str  # one of TAP_STATUSES
    # Tapped as a value carried into --localize-module's module (never blamed).
    context: bool = False
    step: float | None = omitted_if_none()  # of the quantization grid the value lies on


@dataclass(frozen=True)
class FirstDivergence(Record):
    """The first operator whose error outgrows what its inputs carried in."""

    op: str
    node: str
    module: str | None
    source: str | None
    code: str | None
    partition: str
    kernel: str | None
    sample: str
    metrics: TapMetrics
    carried_in: float
    growth: float | None


@dataclass(frozen=True)
class LocalizeAttempt(Record):
    """One tapped program tried: did its final outputs reproduce the divergence?"""

    granularity: str  # ops | modules | partitions
    taps: int
    reproduced: bool | None  # None: the run passed, there was nothing to reproduce
    note: str


@dataclass(frozen=True)
class TapTolerance(Record):
    """What a tap may differ by, and how much growth blames an operator."""

    rel: float  # a float value: max abs error / its magnitude
    growth: float  # an operator is blamed when its rel error is this many times its inputs'
    quant_steps: float  # a value on a quantization grid: error in its steps
    floor: float  # the error an exact input is taken to carry (float32's epsilon)


@dataclass(frozen=True)
class TappedProgram(Record):
    """The tapped sibling that ran (the last one tried)."""

    sha256: str
    size_bytes: int
    untapped_size_bytes: int
    full_taps: int
    summary_taps: int
    budget_bytes: int
    cached: bool
    pte: str | None = omitted_if_none()  # in the build cache, beside its .pt2 eager twin
    # Values of dynamic size over the budget, left untapped (a summary cannot follow the size).
    untapped: tuple[str, ...] = ()


@dataclass(frozen=True)
class Localization(Record):
    """`run --localize`: the tapped sibling of the program run on the same device,
    each tapped value judged against the same node's eager value.

    status: localized (a first divergence is named), clean (every tap within
    tolerance), not_localizable (the taps made the divergence disappear at every
    granularity tried), unexplained (reproduced, but no tapped operator's error
    grew: it starts where nothing is tapped)."""

    status: str
    reason: str
    reference: str  # float eager | quantized eager
    samples: tuple[str, ...]
    granularity: str | None
    attempts: tuple[LocalizeAttempt, ...]
    tolerance: TapTolerance
    taps: tuple[TapResult, ...] = ()
    first_divergence: FirstDivergence | None = None
    program: TappedProgram | None = omitted_if_none()
    module: str | None = omitted_if_none()  # --localize-module
    seconds: float = 0.0
