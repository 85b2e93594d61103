"""Text that more than one report format shows: a clipped log, the error budget and
the task accuracy as lines, a metric's value (files are written by etdeploy.atomic).

Kept free of heavy imports: the CLI imports the report package on every start.
"""

from __future__ import annotations

import math

from etdeploy.results.result import OutputMetrics, RunResult, Verdict
from etdeploy.results.result_accuracy import PairedDifference, TaskAccuracy

# A log in a report is for a reader, not a forensic copy: the full log is in
# the result JSON. Head and tail keep the command line and the final error.
LOG_CLIP_CHARS = 8000


def clip(text: str, limit: int = LOG_CLIP_CHARS) -> str:
    """Head and tail of `text` within about `limit` characters."""
    if len(text) <= limit:
        return text
    half = limit // 2
    omitted = len(text) - 2 * half
    return f"{text[:half]}\n[... {omitted} characters omitted ...]\n{text[-half:]}"


def joined_logs(result: RunResult, limit: int = LOG_CLIP_CHARS) -> str:
    return clip("\n".join(result.logs), limit)


def metrics_by_output(verdict: Verdict | None) -> dict[tuple[int, str], list[OutputMetrics]]:
    """The verdict's metrics rows grouped by output (index, name), in their order."""
    table: dict[tuple[int, str], list[OutputMetrics]] = {}
    for row in verdict.metrics if verdict is not None else ():
        table.setdefault((row.output, row.name), []).append(row)
    return table


def budget_lines(verdict: Verdict | None) -> list[str]:
    """The error budget, a line per stage: what it measured, its numbers, its verdict."""
    lines = []
    for stage in verdict.budget if verdict is not None else ():
        numbers = [f"max abs {stage.max_abs:.3g}", f"SQNR {stage.sqnr_db:.1f} dB"]
        if stage.top1_agreement is not None:
            numbers.append(f"top-1 {stage.top1_agreement:.0%}")
        if stage.steps is not None:
            numbers.append(f"{stage.steps:.1f} step(s)")
        mark = "within limit" if stage.passed else "OVER LIMIT"
        lines.append(
            f"budget: {stage.stage} ({stage.measured}): {', '.join(numbers)}; {mark} ({stage.limit})"
        )
    return lines


def metric_text(value: float | None, as_pct: bool) -> str:
    """A task metric as every report shows it: a percentage for a classifier's."""
    if value is None or not math.isfinite(value):
        return "-"
    return f"{value:.2%}" if as_pct else f"{value:.4g}"


def paired_line(paired: PairedDifference, as_pct: bool) -> str:
    """ "device vs float eager: -0.28 pp (95% CI -1.56..+0.77), p = 0.5 (McNemar ...)"."""
    scale, unit = (100, " pp") if as_pct else (1, "")

    def signed(value: float) -> str:
        return f"{value * scale:+.2f}" if as_pct else f"{value:+.3g}"

    p = "" if paired.p_value is None else f", p = {paired.p_value:.2g}"
    counts = (
        f"; {paired.reference_only} only eager right, {paired.program_only} only {paired.program} right"
        if as_pct
        else ""
    )
    return (
        f"{paired.program} vs {paired.reference}: {signed(paired.difference)}{unit} "
        f"(95% CI {signed(paired.ci_low)}..{signed(paired.ci_high)}{unit}){p}{counts} "
        f"[{paired.method}]"
    )


def accuracy_lines(result: RunResult) -> list[str]:
    """The task-accuracy block as plain lines (what the console shows, for JUnit's
    system-out): the metric three ways, the paired differences, how many samples
    disagree, the gate's word, and the throughput over the samples."""
    found: TaskAccuracy | None = result.accuracy
    if found is None:
        return []
    as_pct = found.task == "classification"
    lines = [
        f"task accuracy: {found.task} of {found.output} on {found.samples} labelled "
        f"samples ({found.labels})"
    ]
    quantized = found.quantized_vs_eager is not None
    for score in found.scores:
        shown = [("float eager", score.eager), *([("quantized eager", score.quantized)]
                 if quantized else []), ("device", score.device)]  # fmt: skip
        lines.append(
            f"  {score.metric}: " + ", ".join(f"{who} {metric_text(v, as_pct)}" for who, v in shown)
        )
    lines += [paired_line(p, as_pct) for p in (found.quantized_vs_eager, found.device_vs_eager)
              if p is not None]  # fmt: skip
    if found.disagreeing:
        lines.append(
            f"{found.disagreeing} sample(s) where the device and eager disagree (--json lists them)"
        )
    lines.append(f"{'ACCURACY' if found.passed else 'ACCURACY FAIL'} {found.reason}")
    rate = result.throughput
    if rate is not None:
        lines.append(
            f"throughput: {rate.samples} samples, {rate.samples_per_s:,.0f} samples/s of "
            f"execution; per sample p50 {rate.p50_ms:.4g} ms, p90 {rate.p90_ms:.4g} ms"
        )
    return lines
