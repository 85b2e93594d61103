"""Compare device outputs with the eager reference: metrics per output and
sample, and a verdict.

fp32 builds are judged by allclose (defaults fit fp32 reassociation error);
quantized builds by SQNR and top-1 agreement, since int8 error is far above any
fp32 tolerance yet a correct lowering keeps the signal and the argmax.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from etdeploy.report.result import OutputMetrics, Verdict

FP32_ATOL = 1e-4
FP32_RTOL = 1e-4
INT8_MIN_SQNR_DB = 15.0
INT8_MIN_TOP1 = 0.9


@dataclass(frozen=True)
class Tolerance:
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


def _is_classifier(shape: Sequence[int]) -> bool:
    # [N, C] logits with a handful of classes or more.
    return len(shape) == 2 and shape[1] >= 2


def verify(
    outputs: Sequence[Sequence[np.ndarray]],
    references: Sequence[Sequence[np.ndarray]],
    sample_names: Sequence[str],
    output_names: Sequence[str],
    tol: Tolerance,
    *,
    on_noise: bool = False,
) -> Verdict:
    """outputs[s][o] against references[s][o] for every sample s and output o."""
    metrics: list[OutputMetrics] = []
    top1_hits = top1_total = 0
    for s, (got, want) in enumerate(zip(outputs, references, strict=True)):
        if len(got) != len(want):
            return Verdict(
                False, f"sample {sample_names[s]}: {len(got)} outputs, reference has {len(want)}"
            )
        for o, (a, e) in enumerate(zip(got, want, strict=True)):
            name = output_names[o] if o < len(output_names) else f"output_{o}"
            if tuple(a.shape) != tuple(e.shape):
                return Verdict(
                    False,
                    f"output {name} of sample {sample_names[s]}: shape {list(a.shape)}, reference {list(e.shape)}",
                )
            top1_agree = top5_agree = None
            if _is_classifier(a.shape):
                top_a, top_e = np.argsort(-a, axis=1), np.argsort(-e, axis=1)
                top1_agree = bool(np.all(top_a[:, 0] == top_e[:, 0]))
                k = min(5, a.shape[1])
                top5_agree = all(set(top_a[i, :k]) == set(top_e[i, :k]) for i in range(a.shape[0]))
                top1_hits += int(np.sum(top_a[:, 0] == top_e[:, 0]))
                top1_total += a.shape[0]
            m = OutputMetrics(
                output=o,
                name=name,
                sample=sample_names[s],
                shape=tuple(int(d) for d in a.shape),
                **compare(a, e, tol),
                top1_agree=top1_agree,
                top5_agree=top5_agree,
            )
            metrics.append(m)
    top1 = top1_hits / top1_total if top1_total else None
    if not metrics:
        return Verdict(False, "no outputs to compare", on_noise=on_noise)
    if tol.quantized:
        worst = min(metrics, key=lambda m: m.sqnr_db)
        passed = worst.sqnr_db >= tol.min_sqnr_db and (top1 is None or top1 >= tol.min_top1)
        reason = (
            f"worst SQNR {worst.sqnr_db:.1f} dB ({worst.name}, sample {worst.sample})"
            + (f", top-1 agreement {top1:.0%}" if top1 is not None else "")
            + f"; needs >= {tol.min_sqnr_db:.0f} dB"
            + (f" and >= {tol.min_top1:.0%}" if top1 is not None else "")
        )
    else:
        worst = max(metrics, key=lambda m: m.max_abs)
        passed = all(m.allclose for m in metrics)
        reason = (
            f"max abs error {worst.max_abs:.3g} ({worst.name}, sample {worst.sample}); "
            f"allclose atol={tol.atol:g} rtol={tol.rtol:g} {'holds' if passed else 'fails'}"
        )
    if on_noise:
        reason += " — measured on random inputs (--random), not real data"
    return Verdict(passed, reason, tuple(metrics), worst, on_noise, top1)
