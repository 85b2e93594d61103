"""Compare outputs with their references: metrics per output and sample, the
error budget per stage, and a verdict.

Each stage of the chain float eager -> quantized eager -> host runtime -> device
is judged by the rule that fits what it can cost:

- allclose: fp32 arithmetic reassociated by a backend (defaults fit fp32 error);
- steps: a quantized program computed again (the device, or this host's runtime,
  against the converted quantize/dequantize model that was lowered). A correct
  int8 kernel lands on the reference's grid point of each quantized output, or
  the next one, so the error is counted in the output's quantization step: a
  flipped weight is many steps off even when it costs only a few dB of SQNR;
- accuracy: what quantization costs against the float model (SQNR, top-1 for
  classifiers, cosine for embeddings), a budget the user sets.

Output kinds decide which metrics apply: a classifier's top-1 agreement, an
embedding's cosine, SQNR and abs error for the rest. A kind guessed from the
shape is reported, never required.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from etdeploy.errors import UsageError
from etdeploy.results.result import (
    OUTPUT_KINDS,
    BudgetStage,
    OutputKind,
    OutputMetrics,
    Thresholds,
    Verdict,
)

# The defaults of the settings that set them, declared there (etdeploy.settings).
from etdeploy.settings import FP32_ATOL as FP32_ATOL
from etdeploy.settings import FP32_RTOL as FP32_RTOL
from etdeploy.settings import INT8_MIN_SQNR_DB as INT8_MIN_SQNR_DB
from etdeploy.settings import INT8_MIN_TOP1 as INT8_MIN_TOP1
from etdeploy.settings import MIN_COSINE as MIN_COSINE
from etdeploy.settings import QUANT_STEPS as QUANT_STEPS

# An output of a quantized program that is not itself quantized (a float op after
# the last dequantize): error relative to the output's largest magnitude.
QUANT_RTOL = 1e-3

DEFAULT_THRESHOLDS = Thresholds(
    atol=FP32_ATOL,
    rtol=FP32_RTOL,
    min_sqnr_db=INT8_MIN_SQNR_DB,
    min_top1=INT8_MIN_TOP1,
    min_cosine=MIN_COSINE,
    max_abs=None,
    quant_steps=QUANT_STEPS,
    quant_rtol=QUANT_RTOL,
)


@dataclass(frozen=True)
class Tolerance:
    """The one-stage judgement: allclose for fp32, or the accuracy rule (SQNR
    and top-1) when `quantized`."""

    atol: float = FP32_ATOL
    rtol: float = FP32_RTOL
    min_sqnr_db: float = INT8_MIN_SQNR_DB
    min_top1: float = INT8_MIN_TOP1
    quantized: bool = False


def compare(actual: np.ndarray, expected: np.ndarray, tol: Tolerance) -> dict[str, Any]:
    a = actual.astype(np.float64).ravel()
    e = expected.astype(np.float64).ravel()
    diff = np.abs(a - e)
    max_abs = float(diff.max()) if diff.size else 0.0
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.where(np.abs(e) > 0, diff / np.abs(e), np.where(diff > 0, np.inf, 0.0))
    noise = float(np.sum((a - e) ** 2))
    signal = float(np.sum(e**2))
    sqnr = (
        math.inf if noise == 0 else (10 * math.log10(signal / noise) if signal > 0 else -math.inf)
    )
    norms = float(np.linalg.norm(a) * np.linalg.norm(e))
    cosine = float(np.dot(a, e) / norms) if norms > 0 else (1.0 if noise == 0 else 0.0)
    allclose = bool(np.all(diff <= tol.atol + tol.rtol * np.abs(e))) and bool(
        np.all(np.isfinite(a))
    )
    return {
        "max_abs": max_abs,
        "max_rel": float(rel.max()) if rel.size else 0.0,
        "mean_abs": float(diff.mean()) if diff.size else 0.0,
        "sqnr_db": sqnr,
        "cosine": cosine,
        "allclose": allclose,
    }


# -- output kinds ---------------------------------------------------------------------


def guess_kind(shape: Sequence[int]) -> str:
    # [N, C] with a handful of classes or more reads like logits; anything else
    # is judged as a signal. A guess only ever adds reported metrics.
    return "classifier" if len(shape) == 2 and shape[1] >= 2 else "regression"


def check_kinds(declared: Mapping[str, str], output_names: Sequence[str], where: str) -> None:
    """A declared kind must name an output and be one of OUTPUT_KINDS."""
    for name, kind in declared.items():
        if kind not in OUTPUT_KINDS:
            raise UsageError(
                f"{where}: output kind {kind!r} for {name!r} is not one of {', '.join(OUTPUT_KINDS)}",
                "e.g. --output-kind logits=classifier",
            )
        if output_names and name not in output_names:
            raise UsageError(
                f"{where}: no output named {name!r} (outputs: {', '.join(output_names)})",
                "name outputs with ModelSpec.output_names, or use the names the program reports",
            )


def output_kinds(
    output_names: Sequence[str], shapes: Sequence[Sequence[int]], declared: Mapping[str, str]
) -> tuple[OutputKind, ...]:
    return tuple(
        OutputKind(name, declared[name], True)
        if name in declared
        else OutputKind(name, guess_kind(shape), False)
        for name, shape in zip(output_names, shapes, strict=True)
    )


# -- metrics of one comparison -------------------------------------------------------------


def measure(
    outputs: Sequence[Sequence[np.ndarray]],
    references: Sequence[Sequence[np.ndarray]],
    sample_names: Sequence[str],
    output_names: Sequence[str],
    tol: Tolerance,
    steps: Sequence[float | None] = (),
) -> list[OutputMetrics] | str:
    """outputs[s][o] against references[s][o]: the metrics, or why they cannot be
    compared (a missing output, a shape that differs). `steps[o]` is output o's
    quantization step, when its error is to be counted in steps. The samples whose
    output o has one shape are measured together (_measure_rows: a test set of a
    thousand samples costs a few array operations, not a thousand)."""
    groups: dict[tuple[int, tuple[int, ...]], list[int]] = {}
    for s, (got, want) in enumerate(zip(outputs, references, strict=True)):
        if len(got) != len(want):
            return f"sample {sample_names[s]}: {len(got)} outputs, reference has {len(want)}"
        for o, (a, e) in enumerate(zip(got, want, strict=True)):
            if tuple(a.shape) != tuple(e.shape):
                name = output_names[o] if o < len(output_names) else f"output_{o}"
                return f"output {name} of sample {sample_names[s]}: shape {list(a.shape)}, reference {list(e.shape)}"
            groups.setdefault((o, tuple(int(d) for d in a.shape)), []).append(s)
    found: dict[tuple[int, int], OutputMetrics] = {}
    for (o, shape), samples in groups.items():
        name = output_names[o] if o < len(output_names) else f"output_{o}"
        step = steps[o] if o < len(steps) else None
        rows = _measure_rows(
            np.stack([outputs[s][o] for s in samples]),
            np.stack([references[s][o] for s in samples]),
            tol,
        )
        for s, row in zip(samples, rows, strict=True):
            found[(s, o)] = OutputMetrics(
                output=o, name=name, sample=sample_names[s], shape=shape, **row,
                steps=row["max_abs"] / step if step else None,
            )  # fmt: skip
    return [found[key] for key in sorted(found)]


class Measurements:
    """measure(), each comparison worked out once for one run's judging.

    The end-to-end verdict and the budget's device stage compare the same outputs
    with the same references (the same tolerances, no steps) for every float run:
    a thousand samples' metrics are worth working out once. A comparison is the
    same one when its outputs and references are the very same objects (kept here,
    so neither can be freed and its id reused) and its names, tolerances and
    steps are equal.
    """

    def __init__(self) -> None:
        self._done: list[tuple[object, object, tuple[Any, ...], list[OutputMetrics] | str]] = []

    def measure(
        self,
        outputs: Sequence[Sequence[np.ndarray]],
        references: Sequence[Sequence[np.ndarray]],
        sample_names: Sequence[str],
        output_names: Sequence[str],
        tol: Tolerance,
        steps: Sequence[float | None] = (),
    ) -> list[OutputMetrics] | str:
        key = (tuple(sample_names), tuple(output_names), tol.atol, tol.rtol, tuple(steps))
        for got, want, known, found in self._done:
            if got is outputs and want is references and known == key:
                return found
        found = measure(outputs, references, sample_names, output_names, tol, steps)
        self._done.append((outputs, references, key, found))
        return found


def _measure_rows(got: np.ndarray, want: np.ndarray, tol: Tolerance) -> list[dict[str, Any]]:
    """compare() and the top-k agreement of each row got[i] against want[i] (one
    sample's output each), computed for all rows at once."""
    a = got.astype(np.float64).reshape(len(got), -1)
    e = want.astype(np.float64).reshape(len(want), -1)
    size = a.shape[1]
    diff = np.abs(a - e)
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.where(np.abs(e) > 0, diff / np.abs(e), np.where(diff > 0, np.inf, 0.0))
    noise = np.sum((a - e) ** 2, axis=1)
    signal = np.sum(e**2, axis=1)
    # Row by row as compare() computes them (BLAS dot products round as a whole-array
    # reduction does not): the same cosine to the last bit.
    dots = [float(np.dot(x, y)) for x, y in zip(a, e, strict=True)]
    norms = [math.sqrt(np.dot(x, x)) * math.sqrt(np.dot(y, y)) for x, y in zip(a, e, strict=True)]
    close = np.all(diff <= tol.atol + tol.rtol * np.abs(e), axis=1) & np.all(np.isfinite(a), axis=1)
    closes = close.tolist()
    empty = np.zeros(len(a))
    max_abs = (diff.max(axis=1) if size else empty).tolist()
    max_rel = (rel.max(axis=1) if size else empty).tolist()
    mean_abs = (diff.mean(axis=1) if size else empty).tolist()
    top1: list[bool | None] = [None] * len(a)
    top5: list[bool | None] = [None] * len(a)
    if guess_kind(got.shape[1:]) == "classifier":
        top_a, top_e = np.argsort(-got, axis=2), np.argsort(-want, axis=2)
        top1 = [bool(x) for x in np.all(top_a[:, :, 0] == top_e[:, :, 0], axis=1)]
        k = min(5, got.shape[2])
        # Distinct indices: the same set of k is the same k sorted.
        same = np.sort(top_a[:, :, :k], axis=2) == np.sort(top_e[:, :, :k], axis=2)
        top5 = [bool(x) for x in np.all(same, axis=(1, 2))]
    rows = []
    for i, (n, sig, norm, dot) in enumerate(
        zip(noise.tolist(), signal.tolist(), norms, dots, strict=True)
    ):
        sqnr = math.inf if n == 0 else (10 * math.log10(sig / n) if sig > 0 else -math.inf)
        rows.append({
            "max_abs": max_abs[i],
            "max_rel": max_rel[i],
            "mean_abs": mean_abs[i],
            "sqnr_db": sqnr,
            "cosine": dot / norm if norm > 0 else (1.0 if n == 0 else 0.0),
            "allclose": closes[i],
            "top1_agree": top1[i],
            "top5_agree": top5[i],
        })  # fmt: skip
    return rows


def top1_agreement(metrics: Sequence[OutputMetrics], names: set[str] | None = None) -> float | None:
    """The share of classifier rows (each sample's batch) whose argmax agrees."""
    agreed = [
        m.top1_agree
        for m in metrics
        if m.top1_agree is not None and (names is None or m.name in names)
    ]
    return sum(agreed) / len(agreed) if agreed else None


def verify(
    outputs: Sequence[Sequence[np.ndarray]],
    references: Sequence[Sequence[np.ndarray]],
    sample_names: Sequence[str],
    output_names: Sequence[str],
    tol: Tolerance,
    *,
    on_noise: bool = False,
    measured: Measurements | None = None,
) -> Verdict:
    """One comparison judged alone: allclose, or (quantized) SQNR and top-1."""
    found = (measured or Measurements()).measure(
        outputs, references, sample_names, output_names, tol
    )
    if isinstance(found, str):
        return Verdict(False, found, on_noise=on_noise)
    if not found:
        return Verdict(False, "no outputs to compare", on_noise=on_noise)
    top1 = _batch_top1(outputs, references, output_names, found)
    if tol.quantized:
        worst = min(found, key=lambda m: m.sqnr_db)
        passed = worst.sqnr_db >= tol.min_sqnr_db and (top1 is None or top1 >= tol.min_top1)
        reason = (
            f"worst SQNR {worst.sqnr_db:.1f} dB ({worst.name}, sample {worst.sample})"
            + (f", top-1 agreement {top1:.0%}" if top1 is not None else "")
            + f"; needs >= {tol.min_sqnr_db:.0f} dB"
            + (f" and >= {tol.min_top1:.0%}" if top1 is not None else "")
        )
    else:
        worst = max(found, key=lambda m: m.max_abs)
        passed = all(m.allclose for m in found)
        reason = _allclose_reason(worst, tol.atol, tol.rtol, passed)
    if on_noise:
        reason += NOISE_NOTE
    return Verdict(passed, reason, tuple(found), worst, on_noise, top1)


NOISE_NOTE = " — measured on random inputs (--random), not real data"


def _allclose_reason(worst: OutputMetrics, atol: float, rtol: float, passed: bool) -> str:
    return (
        f"max abs error {worst.max_abs:.3g} ({worst.name}, sample {worst.sample}); "
        f"allclose atol={atol:g} rtol={rtol:g} {'holds' if passed else 'fails'}"
    )


def _batch_top1(
    outputs: Sequence[Sequence[np.ndarray]],
    references: Sequence[Sequence[np.ndarray]],
    output_names: Sequence[str],
    metrics: Sequence[OutputMetrics],
    names: set[str] | None = None,
) -> float | None:
    """Top-1 agreement over every row of every classifier-shaped output (a batch
    of N rows counts N times)."""
    # The outputs of one shape are compared together (a test set: one argmax each side).
    groups: dict[tuple[int, tuple[int, ...]], tuple[list[np.ndarray], list[np.ndarray]]] = {}
    for got, want in zip(outputs, references, strict=True):
        for o, (a, e) in enumerate(zip(got, want, strict=True)):
            name = output_names[o] if o < len(output_names) else f"output_{o}"
            if guess_kind(a.shape) != "classifier" or (names is not None and name not in names):
                continue
            group = groups.setdefault((o, tuple(a.shape)), ([], []))
            group[0].append(a)
            group[1].append(e)
    hits = total = 0
    for got_rows, want_rows in groups.values():
        a, e = np.stack(got_rows), np.stack(want_rows)
        hits += int(np.sum(np.argmax(a, axis=2) == np.argmax(e, axis=2)))
        total += a.shape[0] * a.shape[1]
    return hits / total if total else None


# -- the error budget ------------------------------------------------------------------------


@dataclass(frozen=True)
class Comparison:
    """One stage's data: `got` against `want`, both per sample, per tensor output."""

    stage: str  # quantization | lowering | device
    measured: str  # "device vs quantized eager"
    got: Sequence[Sequence[np.ndarray]]
    want: Sequence[Sequence[np.ndarray]]
    rule: str  # allclose | steps | accuracy


def judge_stage(
    comparison: Comparison,
    sample_names: Sequence[str],
    kinds: Sequence[OutputKind],
    thresholds: Thresholds,
    steps: Sequence[float | None],
    measured: Measurements | None = None,
) -> BudgetStage:
    """One stage of the budget, judged by its rule."""
    names = [k.name for k in kinds]
    tol = Tolerance(atol=thresholds.atol, rtol=thresholds.rtol)
    found = (measured or Measurements()).measure(
        comparison.got,
        comparison.want,
        sample_names,
        names,
        tol,
        steps if comparison.rule == "steps" else (),
    )
    if isinstance(found, str) or not found:
        reason = found if isinstance(found, str) and found else "no outputs to compare"
        return BudgetStage(
            comparison.stage, comparison.measured, comparison.rule, "-", False, reason,
            math.inf, -math.inf, math.nan,
        )  # fmt: skip
    top1 = _batch_top1(comparison.got, comparison.want, names, found)
    judge = {"allclose": _allclose, "steps": _steps, "accuracy": _accuracy}[comparison.rule]
    passed, limit, reason, worst = judge(found, comparison, kinds, thresholds, top1, steps)
    return BudgetStage(
        stage=comparison.stage,
        measured=comparison.measured,
        rule=comparison.rule,
        limit=limit,
        passed=passed,
        reason=reason,
        max_abs=max(m.max_abs for m in found),
        sqnr_db=min(m.sqnr_db for m in found),
        cosine=min(m.cosine for m in found),
        top1_agreement=top1,
        steps=max((m.steps for m in found if m.steps is not None), default=None),
        worst=worst,
        metrics=_worst_kept(found, comparison.rule),
    )


# A stage keeps the metrics of its worst samples per output; the verdict keeps every
# sample's. A test set of thousands would otherwise repeat them in every stage.
STAGE_METRICS_KEPT = 8


def _worst_kept(found: Sequence[OutputMetrics], rule: str) -> tuple[OutputMetrics, ...]:
    def severity(m: OutputMetrics) -> float:
        if rule == "steps" and m.steps is not None:
            return m.steps
        return -m.sqnr_db if rule == "accuracy" else m.max_abs

    by_output: dict[int, list[OutputMetrics]] = {}
    for m in found:
        by_output.setdefault(m.output, []).append(m)
    kept = []
    for rows in by_output.values():
        kept += sorted(rows, key=severity, reverse=True)[:STAGE_METRICS_KEPT]
    return tuple(sorted(kept, key=lambda m: (m.output, found.index(m))))


_Judgement = tuple[bool, str, str, OutputMetrics]


def _allclose(
    found: list[OutputMetrics],
    comparison: Comparison,
    kinds: Sequence[OutputKind],
    t: Thresholds,
    top1: float | None,
    steps: Sequence[float | None],
) -> _Judgement:
    worst = max(found, key=lambda m: m.max_abs)
    passed = all(m.allclose for m in found)
    limit = f"allclose atol={t.atol:g} rtol={t.rtol:g}"
    return passed, limit, _allclose_reason(worst, t.atol, t.rtol, passed), worst


def _steps(
    found: list[OutputMetrics],
    comparison: Comparison,
    kinds: Sequence[OutputKind],
    t: Thresholds,
    top1: float | None,
    steps: Sequence[float | None],
) -> _Judgement:
    """Quantized outputs within quant_steps of their grid; other outputs within
    quant_rtol of their range."""

    def excess(m: OutputMetrics) -> float:
        # How far past its limit (>1 fails): in steps, or relative to the range.
        if m.steps is not None:
            if not t.quant_steps:
                return 0.0 if m.steps == 0 else math.inf
            return m.steps / t.quant_steps
        scale = _range(comparison.want, m)
        allowed = t.quant_rtol * scale + t.atol
        return m.max_abs / allowed

    worst = max(found, key=excess)
    # Slack for float32 rounding: an error of exactly the limit (one step of a
    # value up to 255 steps from zero) computes as up to ~1e-5 steps over it.
    passed = all(excess(m) <= 1 + 1e-3 for m in found)
    limit = (
        f"<= {t.quant_steps:g} quantization step(s); "
        f"unquantized outputs <= {t.quant_rtol:g} of their range"
    )
    where = f"{worst.name}, sample {worst.sample}"
    if worst.steps is not None:
        step = (steps[worst.output] if worst.output < len(steps) else None) or 0.0
        detail = (
            f"{worst.steps:.1f} step(s) of {step:.3g} off ({where}; max abs {worst.max_abs:.3g})"
        )
    else:
        share = worst.max_abs / max(_range(comparison.want, worst), 1e-30)
        detail = f"{share:.2g} of its range off ({where}; max abs {worst.max_abs:.3g})"
    subject = comparison.measured.split(" vs ")[0]
    if passed:
        reason = f"{subject} matches the quantized program: worst {detail}; limit {t.quant_steps:g} step(s)"
    else:
        reason = f"the {subject} departs from the quantized program: {detail}; limit {t.quant_steps:g} step(s)"
    return passed, limit, reason, worst


def _range(want: Sequence[Sequence[np.ndarray]], m: OutputMetrics) -> float:
    values = [float(np.max(np.abs(row[m.output]))) for row in want if row[m.output].size]
    return max(values, default=0.0)


def _accuracy(
    found: list[OutputMetrics],
    comparison: Comparison,
    kinds: Sequence[OutputKind],
    t: Thresholds,
    top1: float | None,
    steps: Sequence[float | None],
) -> _Judgement:
    """What quantization costs, each output held to the metrics of its kind."""
    kind_of = {k.name: k for k in kinds}
    failures: list[str] = []
    by_name: dict[str, list[OutputMetrics]] = {}
    for m in found:
        by_name.setdefault(m.name, []).append(m)
    required_top1 = {n for n, k in kind_of.items() if k.declared and k.kind == "classifier"}
    parts: list[str] = []
    for name, rows in by_name.items():
        kind = kind_of.get(name, OutputKind(name, "regression", False))
        worst_sqnr = min(rows, key=lambda m: m.sqnr_db)
        if kind.kind == "embedding" and kind.declared:
            worst_cos = min(rows, key=lambda m: m.cosine)
            parts.append(f"cosine {worst_cos.cosine:.4f} ({name})")
            if not worst_cos.cosine >= t.min_cosine:
                failures.append(
                    f"{name} cosine {worst_cos.cosine:.4f} (sample {worst_cos.sample}) < {t.min_cosine:g}"
                )
        else:
            parts.append(f"SQNR {worst_sqnr.sqnr_db:.1f} dB ({name})")
            if not worst_sqnr.sqnr_db >= t.min_sqnr_db:
                failures.append(
                    f"{name} SQNR {worst_sqnr.sqnr_db:.1f} dB (sample {worst_sqnr.sample}) < {t.min_sqnr_db:g} dB"
                )
        if t.max_abs is not None:
            worst_abs = max(rows, key=lambda m: m.max_abs)
            if not worst_abs.max_abs <= t.max_abs:
                failures.append(
                    f"{name} max abs {worst_abs.max_abs:.3g} (sample {worst_abs.sample}) > {t.max_abs:g}"
                )
        if name in required_top1:
            agree = _batch_top1(
                comparison.got, comparison.want, [k.name for k in kinds], found, {name}
            )
            if agree is not None:
                parts.append(f"top-1 agreement {agree:.0%} ({name})")
                if agree < t.min_top1:
                    failures.append(f"{name} top-1 agreement {agree:.0%} < {t.min_top1:.0%}")
    guessed_top1 = {n for n, k in kind_of.items() if not k.declared and k.kind == "classifier"}
    if guessed_top1 and top1 is not None and not required_top1:
        parts.append(f"top-1 agreement {top1:.0%} (reported: classifier kind is a guess)")
    limit = (
        f"SQNR >= {t.min_sqnr_db:g} dB; declared classifiers top-1 >= {t.min_top1:.0%}; declared embeddings cosine >= {t.min_cosine:g}"
        + (f"; max abs <= {t.max_abs:g}" if t.max_abs is not None else "")
    )
    worst = min(found, key=lambda m: m.sqnr_db)
    if failures:
        reason = f"quantization costs more than the accuracy budget: {'; '.join(failures)}"
    else:
        reason = f"quantization costs {', '.join(parts)}: within the accuracy budget"
    return not failures, limit, reason, worst


def budget_verdict(
    stages: Sequence[BudgetStage],
    end_to_end: Verdict,
    kinds: Sequence[OutputKind],
    thresholds: Thresholds,
    reference: str,
) -> Verdict:
    """The verdict of the whole chain: every stage within its limit. Its metrics
    stay the end-to-end comparison (device against the float model or file); its
    reason names the stage that broke its limit."""
    failed = next((s for s in stages if not s.passed), None)
    if failed is not None:
        reason = failed.reason
    elif len(stages) == 1:
        reason = stages[0].reason
    else:
        # The device stage first: it is what this run measured on the device.
        ordered = sorted(stages, key=lambda s: s.stage != "device")
        reason = "; ".join(s.reason for s in ordered)
    if end_to_end.on_noise:
        reason += NOISE_NOTE
    return replace(
        end_to_end,
        passed=failed is None and bool(stages),
        reason=reason,
        reference=reference,
        budget=tuple(stages),
        kinds=tuple(kinds),
        thresholds=thresholds,
    )
