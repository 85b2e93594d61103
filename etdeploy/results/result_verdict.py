"""The verdict of a RunResult: metrics per output and sample, output kinds,
the thresholds applied, and the error budget stage by stage."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from etdeploy.jsonvalue import JsonObject
from etdeploy.results.record import Record, infinite_where_null, omitted_if_none


@dataclass(frozen=True)
class OutputMetrics(Record):
    """One output of one sample against its reference.

    In memory the metrics are floats, infinite where they are (an exact match's
    SQNR); the document writes a non-finite value as null, and from_json reads
    it back as the value it must have been.
    """

    output: int
    name: str
    sample: str
    shape: tuple[int, ...]
    max_abs: float
    max_rel: float
    mean_abs: float
    sqnr_db: float
    cosine: float
    allclose: bool
    top1_agree: bool | None = None
    top5_agree: bool | None = None
    # Error in units of the output's quantization step (a stage judged in steps).
    steps: float | None = omitted_if_none()

    @property
    def tightest_atol(self) -> float:
        """The smallest atol (with rtol 0) at which this output passes: its max abs error."""
        return self.max_abs

    def to_json(self) -> JsonObject:
        data = super().to_json()
        data["tightest_atol"] = None if not math.isfinite(self.max_abs) else self.max_abs
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> OutputMetrics:
        # null is non-finite: max_abs, max_rel and mean_abs were infinite (a NaN or
        # infinite output); SQNR was +inf for an exact match, else -inf (the worst).
        filled = infinite_where_null(data, ("max_abs", "max_rel", "mean_abs"))
        if filled.get("sqnr_db", 0) is None:
            filled["sqnr_db"] = math.inf if filled.get("max_abs") == 0 else -math.inf
        if filled.get("cosine", 0) is None:
            filled["cosine"] = math.nan
        return super().from_json(filled)


OUTPUT_KINDS = ("classifier", "regression", "embedding", "mask", "other")


@dataclass(frozen=True)
class OutputKind(Record):
    """How an output is judged: declared (ModelSpec.output_kinds, --output-kind,
    [verify] output_kinds) or guessed from its shape, which is never held to a
    metric that only fits the guess."""

    name: str
    kind: str  # one of OUTPUT_KINDS
    declared: bool


@dataclass(frozen=True)
class Thresholds(Record):
    """Every limit a verdict applied, recorded with it."""

    atol: float  # fp32: allclose
    rtol: float
    min_sqnr_db: float  # the accuracy budget of quantization
    min_top1: float  # ... for declared classifiers
    min_cosine: float  # ... for declared embeddings
    max_abs: float | None  # ... optional, any kind
    quant_steps: float  # a quantized program's outputs: error in steps of the output's scale
    quant_rtol: float  # ... for an output that is not quantized: relative to its range


@dataclass(frozen=True)
class BudgetStage(Record):
    """One step of the error budget: what one stage of the chain float eager ->
    quantized eager -> host runtime -> device adds, judged by its own rule."""

    stage: str  # quantization | lowering | device
    measured: str  # what against what, e.g. "device vs quantized eager"
    rule: str  # allclose | steps | accuracy
    limit: str  # the rule in words, with its numbers
    passed: bool
    reason: str
    max_abs: float
    sqnr_db: float  # the worst output and sample
    cosine: float
    top1_agreement: float | None = None  # over the classifier outputs, when there are any
    steps: float | None = None  # the worst error in quantization steps (rule steps)
    worst: OutputMetrics | None = None
    metrics: tuple[OutputMetrics, ...] = ()

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> BudgetStage:
        filled = dict(data)
        if filled.get("max_abs", 0) is None:
            filled["max_abs"] = math.inf
        if filled.get("sqnr_db", 0) is None:
            filled["sqnr_db"] = math.inf if filled.get("max_abs") == 0 else -math.inf
        if filled.get("cosine", 0) is None:
            filled["cosine"] = math.nan
        return super().from_json(filled)


@dataclass(frozen=True)
class Verdict(Record):
    """The device's outputs against the reference (metrics: the end-to-end view,
    against the float model or the given file), and the error budget that
    decides: every stage within its limit."""

    passed: bool
    reason: str
    metrics: tuple[OutputMetrics, ...] = ()
    worst: OutputMetrics | None = None
    on_noise: bool = False
    top1_agreement: float | None = None
    reference: str | None = omitted_if_none()  # what `metrics` compare with
    budget: tuple[BudgetStage, ...] = ()
    kinds: tuple[OutputKind, ...] = ()
    thresholds: Thresholds | None = omitted_if_none()
    # Where the quantized eager program the device was held to came from: the
    # build's own, or for a .pte built elsewhere, derived from MODEL.
    quantized_reference: str | None = omitted_if_none()

    def to_json(self) -> JsonObject:
        data = super().to_json()
        # The document's historical key order, then what the budget added.
        head = ("passed", "reason", "on_noise", "top1_agreement", "worst", "metrics")
        return {**{k: data.pop(k) for k in head}, **data}

    def stage(self, name: str) -> BudgetStage | None:
        return next((s for s in self.budget if s.stage == name), None)

    @property
    def failed_stage(self) -> BudgetStage | None:
        return next((s for s in self.budget if not s.passed), None)


@dataclass(frozen=True)
class HostCheck(Record):
    """--host-check: the .pte in executorch's Python runtime on this machine."""

    device_vs_host: Verdict
    host_vs_reference: Verdict
