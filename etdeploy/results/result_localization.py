"""The localization block of a RunResult (`run --localize`): each tapped
value against eager, and the first operator whose error outgrows its inputs'."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from etdeploy.results.record import Record, infinite_where_null, omitted_if_none


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
    def from_json(cls, data: Mapping[str, object]) -> TapMetrics:
        # null is non-finite: the errors were infinite (a NaN where eager had a number).
        filled = infinite_where_null(data, ("max_abs", "rel", "ulps"))
        if "sqnr_db" in filled and filled["sqnr_db"] is None and filled.get("max_abs") == 0:
            filled["sqnr_db"] = math.inf
        return super().from_json(filled)


TAP_STATUSES = ("ok", "carried", "departs")


@dataclass(frozen=True)
class OperatorError(Record):
    """The error one operator added itself: its value on the device against the
    same operator run eagerly (in float64) on the values the device handed it,
    and against what float32 allows that operator (or, on a quantization grid,
    against the grid's step). Not what its inputs carried in."""

    max_abs: float
    rel: float  # max_abs / the value's magnitude
    # The worst element's error over what it is allowed: over 1, the operator
    # computed something float32 does not excuse.
    ratio: float
    bound_rel: float  # what it is allowed, relative to the value's magnitude
    kind: str  # elementwise | function | sum | normalization | quantized | other
    n: int  # values reduced per result element (1: elementwise)
    steps: float | None = omitted_if_none()  # on a quantization grid: error in its steps
    sample: str | None = omitted_if_none()  # where it is largest against its bound

    @property
    def over_bound(self) -> bool:
        # Slack for float32's rounding of a step count: one step computes as
        # up to ~1e-5 steps over it (as etdeploy.numerics's steps rule).
        return self.ratio > 1.0 + 1e-3

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> OperatorError:
        return super().from_json(infinite_where_null(data, ("max_abs", "rel", "ratio")))


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
    # The error this operator added itself (a whole tapped value; not a summary).
    local: OperatorError | None = omitted_if_none()
    # Tapped where another tap's value is handed out (a copy the delegate drops).
    same_as: str | None = omitted_if_none()


@dataclass(frozen=True)
class OperatorPlace(Record):
    """Where an operator is: in the graph, the model, the source, the program."""

    op: str
    node: str
    module: str | None
    source: str | None
    code: str | None
    partition: str
    kernel: str | None
    sample: str  # the sample it is named in


@dataclass(frozen=True)
class FirstDivergence(OperatorPlace):
    """The first operator whose error outgrows what its inputs carried in."""

    metrics: TapMetrics
    carried_in: float
    growth: float | None


@dataclass(frozen=True)
class Origin(OperatorPlace):
    """The operator where the error is born: the first whose own error is over
    what float32 allows it (over_bound), or, when none is, the one whose own
    error, amplified by the operators after it, makes most of the outputs'."""

    error: OperatorError
    over_bound: bool
    # Its own relative error times the amplification on its way to the outputs.
    contribution: float


AMPLIFIER_CAUSES = (
    "cancellation",
    "division by small values",
    "softmax over large logits",
    "exponential of large values",
    "normalisation of values whose mean dwarfs their spread",
    "conditioning",
)


@dataclass(frozen=True)
class Amplifier(Record):
    """An operator that computes right given its inputs (within its bound) but
    whose output's relative error is far larger than its inputs': float32's
    conditioning there, e.g. a subtraction of nearly equal values."""

    op: str
    node: str
    module: str | None
    source: str | None
    sample: str
    factor: float  # its output's relative error over its inputs'
    cause: str  # one of AMPLIFIER_CAUSES


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
    # Values left untapped: of dynamic size over the budget (a summary cannot
    # follow the size), or values a delegate cannot hand out; why, by node.
    untapped: tuple[str, ...] = ()
    why_untapped: dict[str, str] = dataclasses.field(default_factory=dict)


@dataclass(frozen=True)
class Localization(Record):
    """`run --localize`: the tapped sibling of the program run on the same device,
    each tapped value judged against the same node's eager value.

    status: localized (an operator computes something float32 does not excuse,
    or the first divergence is named), ill_conditioned (no operator is over what
    float32 allows it, yet the outputs depart: named are the origin whose
    rounding contributes most and the amplifiers), clean (every tap within
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
    origin: Origin | None = omitted_if_none()
    amplifiers: tuple[Amplifier, ...] = ()
    hint: str | None = omitted_if_none()  # what to do, for an ill-conditioned model


def describe_amplifiers(amplifiers: Sequence[Amplifier]) -> str:
    """'relative error × 8,110 at sub: cancellation; relative error × 31 at div: ...'."""
    return "; ".join(
        f"relative error × {_factor_text(a.factor)} at {a.op}: {a.cause}" for a in amplifiers
    )


def _factor_text(factor: float) -> str:
    return f"{factor:,.0f}" if factor >= 100 else f"{factor:.3g}"


def describe_own_error(error: OperatorError) -> str:
    """'4.1% of its magnitude, 37x what float32 allows a normalisation over 64 values'."""
    if error.steps is not None:
        return f"{error.steps:.1f} quantization step(s), {error.ratio:.3g}x what its grid allows"
    allowed = {
        "elementwise": "an elementwise operator (2 ULPs)",
        "function": "a function of one value (a few ULPs)",
        "sum": f"a sum of {error.n} values",
        "normalization": f"a normalisation over {error.n} values",
    }.get(error.kind, f"an operator reading {error.n} values per result")
    share = f"{error.rel:.2%}" if error.rel >= 1e-3 else f"{error.rel:.2g}"
    return f"{share} of its magnitude, {error.ratio:.3g}x what float32 allows {allowed}"


def where(tap: TapResult | FirstDivergence | Origin) -> str:
    """'layer_norm in norm (model.py:42), CPU kernel native_layer_norm'."""
    place = f"{tap.op} in {tap.module}" if tap.module else f"{tap.op} ({tap.node})"
    if tap.source:
        place += f" at {tap.source}"
    ran = f"CPU kernel {tap.kernel}" if tap.partition == "CPU" else tap.partition
    return f"{place}, {ran}"


def describe_error(metrics: TapMetrics) -> str:
    """'4.1% of its magnitude (SQNR 27.3 dB, 3.5e+05 ULPs)' or in steps."""
    if metrics.steps is not None:
        return (
            f"{metrics.steps:.1f} quantization step(s) ({_percent(metrics.rel)} of its magnitude)"
        )
    extra = [f"{metrics.ulps:.2g} ULPs"]
    if metrics.sqnr_db is not None:
        extra.insert(0, f"SQNR {metrics.sqnr_db:.1f} dB")
    return f"{_percent(metrics.rel)} of its magnitude ({', '.join(extra)})"


def _percent(rel: float) -> str:
    if not math.isfinite(rel):
        return "non-finite"
    return f"{rel:.2%}" if rel >= 1e-3 else f"{rel:.2g}"
