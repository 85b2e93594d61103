"""The console rendering of a run's result (`etdeploy run`): the verdict table, the
error budget, latency, throughput and memory, task accuracy, the size verdict, the
profile and the localization, warnings, then the one-line verdict. Like the JSON, JUnit
and HTML writers beside it, it reads the RunResult alone.

Piped (a CI log), tables keep their natural width and lines never wrap.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from etdeploy.profile import modules_label, short_op
from etdeploy.report.console_lm import render_language_model
from etdeploy.report.console_localization import render_localization
from etdeploy.report.console_memory import failure_lines, render_memory, render_shapes
from etdeploy.report.text import metric_text, paired_line
from etdeploy.results.result import (
    OutputMetrics,
    RunResult,
    SizeSummary,
    TaskAccuracy,
    Verdict,
)
from etdeploy.units import format_bytes, format_ms

if TYPE_CHECKING:
    from etdeploy.results.result import Localization


@dataclass(frozen=True)
class RunConsole:
    """Renders a RunResult for a person: results on `out`, warnings on `err`."""

    out: Console
    err: Console

    def render_result(self, result: RunResult) -> None:
        """Everything a run found, then the one-line verdict."""
        verdict = result.verdict
        assert verdict is not None and result.artifact is not None  # a result that ran
        if result.language_model is not None:
            render_language_model(self.out, result.language_model)
        else:
            self._render_outputs(result)
        if len(verdict.budget) > 1 or (verdict.budget and verdict.budget[0].rule != "allclose"):
            self._render_budget(verdict)
        if result.accuracy is not None:
            self.render_accuracy(result.accuracy)
        self._render_figures(result)
        if result.size is not None:
            self._render_size(result.size)
        if result.profile is not None:
            self._render_profile(result)
        if result.localization is not None:
            self.render_localization(result.localization)
        for warning in result.warnings:
            self.err.print(
                f"[yellow]warning:[/] {escape(warning)}", highlight=False, soft_wrap=True
            )
        self.render_verdict_line(result, self.out)

    def _render_outputs(self, result: RunResult) -> None:
        """One row per output, showing its worst sample; --json has every sample."""
        verdict, artifact = result.verdict, result.artifact
        assert verdict is not None and artifact is not None
        quant = f", {artifact.quantization}" if artifact.quantization else ""
        title = f"{result.model_label} on {result.device.name} ({artifact.backend or '?'}{quant})"
        table = Table(title=escape(title))
        columns = ("output", "samples ok", "worst sample", "max abs", "max rel", "SQNR dB",
                   "cosine", "top-1")  # fmt: skip
        for column in columns:
            table.add_column(
                column, justify="left" if column in ("output", "worst sample") else "right"
            )
        by_output: dict[int, list[OutputMetrics]] = {}
        for m in verdict.metrics:
            by_output.setdefault(m.output, []).append(m)
        quantized = bool(artifact.quantization)
        for rows in by_output.values():
            if quantized:
                worst = min(rows, key=lambda m: m.sqnr_db)
                ok = sum(1 for m in rows if m.top1_agree is not False)
            else:
                worst = max(rows, key=lambda m: m.max_abs)
                ok = sum(1 for m in rows if m.allclose)
            top1 = [m.top1_agree for m in rows if m.top1_agree is not None]
            table.add_row(
                escape(worst.name), f"{ok}/{len(rows)}", escape(worst.sample), f"{worst.max_abs:.2e}",
                _num(worst.max_rel, ".2e"), _num(worst.sqnr_db, ".1f"),
                f"{worst.cosine:.6f}", f"{sum(top1)}/{len(top1)}" if top1 else "-",
            )  # fmt: skip
        self.out.print(table)

    def _render_figures(self, result: RunResult) -> None:
        """Latency, throughput, memory, what was sent, the host runtime's check."""
        lines = []
        latency = result.latency_ms
        if latency is not None and latency.n:
            lines.append(
                f"latency: load {format_ms(latency.load)}; {latency.n} iterations after "
                f"{result.job.warmup} warm-up: median {format_ms(latency.median)} "
                f"(min {format_ms(latency.min)}, p90 {format_ms(latency.p90)}, max {format_ms(latency.max)}, "
                f"trimmed mean {format_ms(latency.trimmed_mean)}, stdev {format_ms(latency.stdev)})"
            )
        rate = result.throughput
        if rate is not None:
            lines.append(
                f"throughput: {rate.samples} samples, {rate.samples_per_s:,.0f} samples/s of "
                f"execution; per sample p50 {format_ms(rate.p50_ms)}, p90 {format_ms(rate.p90_ms)}"
            )
        if result.deploy is not None:
            deploy = result.deploy
            lines.append(
                f"deploy: {_bytes(deploy.bytes_sent)} sent in {deploy.files_sent} file(s), "
                f"{deploy.files_skipped} unchanged file(s) skipped"
            )
        if result.host_check is not None:
            host = result.host_check
            lines.append(
                f"host runtime: vs reference {host.host_vs_reference.reason}; "
                f"device vs host {host.device_vs_host.reason}"
            )
        for line in lines:
            self.out.print(escape(line), highlight=False, soft_wrap=True)
        render_memory(result, self.out)
        if result.shapes:
            render_shapes(result.shapes, self.out)

    def render_accuracy(self, found: TaskAccuracy) -> None:
        """The task's metric three ways, the paired differences, the disagreements."""
        self.out.print(
            escape(
                f"task accuracy: {found.task} of {found.output} on {found.samples} "
                f"labelled samples ({found.labels})"
            ),
            highlight=False,
            soft_wrap=True,
        )
        table = Table()
        quantized = found.quantized_vs_eager is not None
        columns = ["metric", "float eager", *(["quantized eager"] if quantized else []), "device"]
        for column in columns:
            table.add_column(column, justify="left" if column == "metric" else "right")
        as_pct = found.task == "classification"
        for score in found.scores:
            cells = [score.eager, *([score.quantized] if quantized else []), score.device]
            table.add_row(score.metric, *(metric_text(v, as_pct) for v in cells))
        self.out.print(table)
        for paired in (found.quantized_vs_eager, found.device_vs_eager):
            if paired is not None:
                self.out.print(escape(paired_line(paired, as_pct)), highlight=False, soft_wrap=True)
        for d in found.disagreements:
            where = f"  (etdeploy run ... --inputs {d.input} --localize)" if d.input else ""
            self.out.print(
                escape(
                    f"  disagrees: {d.sample}: label {d.label}, eager {d.eager}, "
                    f"device {d.device} (margin {d.margin:.3g}){where}"
                ),
                highlight=False,
                soft_wrap=True,
            )
        if found.disagreeing > len(found.disagreements):
            more = found.disagreeing - len(found.disagreements)
            self.out.print(f"  ... and {more} more (all in --json)", highlight=False)
        colour = "green" if found.passed else "bold red"
        mark = "ACCURACY" if found.passed else "ACCURACY FAIL"
        self.out.print(
            f"[{colour}]{mark}[/] {escape(found.reason)}", highlight=False, soft_wrap=True
        )

    def render_verdict_line(self, result: RunResult, out: Console) -> None:
        """The numerics' PASS or FAIL with the reason; a numeric FAIL also says the
        loosest setting that would have passed, so a reader can tell a near miss from a
        broken model. Each other gate that failed (size, memory, a shape point) gets its
        own FAIL line after it: a line says what its own check found."""
        verdict = result.verdict
        assert verdict is not None
        mark = "[bold green]PASS[/]" if verdict.passed else "[bold red]FAIL[/]"
        reason = verdict.reason
        if not verdict.passed:
            passing = passing_setting(verdict)
            if passing:
                reason += f"; {passing}"
        out.print(
            f"{mark} {escape(reason)}{_localize_suggestion(result)}",
            highlight=False,
            soft_wrap=True,
        )
        if result.size is not None and not result.size.passed:
            out.print(
                "[bold red]FAIL[/] the program is over a store size limit (above)", highlight=False
            )
        failure_lines(result, out)

    def _render_budget(self, verdict: Verdict) -> None:
        """The error budget: what each stage of float eager -> quantized eager -> host
        runtime -> device adds, and whether it stayed within its limit."""
        table = Table(title="error budget")
        for column in ("stage", "measured", "max abs", "SQNR dB", "top-1", "steps", "within limit"):
            table.add_column(column, justify="left" if column in ("stage", "measured") else "right")
        for stage in verdict.budget:
            table.add_row(
                stage.stage, stage.measured, f"{stage.max_abs:.2e}", _num(stage.sqnr_db, ".1f"),
                "-" if stage.top1_agreement is None else f"{stage.top1_agreement:.0%}",
                "-" if stage.steps is None else f"{stage.steps:.1f}",
                "[green]yes[/]" if stage.passed else "[bold red]no[/]",
            )  # fmt: skip
        self.out.print(table)
        kinds = ", ".join(
            f"{k.name} {k.kind}{'' if k.declared else ' (guessed)'}" for k in verdict.kinds
        )
        if kinds:
            self.out.print(f"output kinds: {escape(kinds)}", highlight=False)

    def _render_profile(self, result: RunResult) -> None:
        """The slowest events, the time per operator kind, and where the ETDump is kept."""
        profile = result.profile
        assert profile is not None
        table = Table(title=f"slowest events (median of {profile.executions_ms.count} executions: "
                            f"{format_ms(profile.executions_ms.median)})")  # fmt: skip
        for column in ("event", "backend", "operators", "module", "p50", "max", "share"):
            table.add_column(
                column, justify="right" if column in ("p50", "max", "share") else "left"
            )
        kernels = False
        for event in profile.events:
            if event.op_types:
                ops = _counted(short_op(op) for op in event.op_types)
                module = modules_label(event.module)
            elif event.delegated:
                # XNNPACK's kernel events carry their own names and no debug handle:
                # ExecuTorch's Inspector cannot map them to ATen operators or modules.
                kernels = True
                ops, module = "delegate kernel", "(in the delegate call)"
            else:
                ops, module = "-", modules_label(event.module)
            table.add_row(
                escape(event.name), escape(event.backend or "-"), escape(ops), escape(module),
                format_ms(event.p50_ms), format_ms(event.max_ms), _share(event.share),
            )  # fmt: skip
        self.out.print(table)
        if profile.operators:
            totals = Table(title="time per operator (one execution, medians summed)")
            for column in ("operator", "backend", "instances", "p50 total", "share"):
                totals.add_column(
                    column, justify="left" if column in ("operator", "backend") else "right"
                )
            for total in profile.operators:
                totals.add_row(
                    escape(total.name), escape(total.backend or "-"), str(total.instances),
                    format_ms(total.p50_ms), _share(total.share),
                )  # fmt: skip
            self.out.print(totals)
        if kernels:
            self.out.print(
                "[dim]kernel rows are the delegate's own operators, timed inside its DELEGATE_CALL; "
                "the call's row names the ATen operators and modules it holds[/]",
                highlight=False, soft_wrap=True,
            )  # fmt: skip
        if result.etdump:
            self.out.print(
                f"profile: ETDump kept at {escape(result.etdump)}", highlight=False, soft_wrap=True
            )
        if not profile.etrecord:
            self.err.print(
                "[yellow]warning:[/] no ETRecord beside the .pte: events carry runtime names only",
                highlight=False,
            )
            self.err.print(
                "[dim]hint:[/] build with `etdeploy build MODEL --etrecord -o FILE.pte` to keep it "
                "beside the program, or run MODEL without --pte",
                highlight=False, soft_wrap=True,
            )  # fmt: skip

    def _render_size(self, size: SizeSummary) -> None:
        for verdict in size.verdicts:
            colour = {"fits": "green", "over": "bold red", "warning": "yellow"}.get(
                verdict.status, ""
            )
            self.out.print(
                f"size: {escape(verdict.label)}: [{colour}]{escape(verdict.text or verdict.status)}[/]",
                highlight=False,
            )

    def render_localization(self, found: Localization) -> None:
        render_localization(found, self.out)


def passing_setting(verdict: Verdict) -> str | None:
    """The tightest tolerance that would pass the stage that failed, as the flags
    that set it ("passes with --atol 0.0124 --rtol 0"); None when no setting can
    (a NaN output) or the stage has no numbers."""
    stage = verdict.failed_stage
    limits = verdict.thresholds
    if stage is None:
        # A result without a budget (upstream's runner, an older document): its metrics.
        if verdict.worst is None or verdict.budget:
            return None
        return _atol_that_passes(max(m.max_abs for m in verdict.metrics or (verdict.worst,)))
    if stage.rule == "allclose":
        return _atol_that_passes(stage.max_abs)
    if stage.rule == "steps" and stage.worst is not None and stage.worst.steps is not None:
        if not math.isfinite(stage.worst.steps):
            return "no tolerance passes: an output is NaN or infinite"
        return f"passes with --quant-steps {math.ceil(stage.worst.steps * 10) / 10:g}"
    if stage.rule == "accuracy" and limits is not None:
        flags = []
        if stage.sqnr_db < limits.min_sqnr_db:
            if not math.isfinite(stage.sqnr_db):
                return "no tolerance passes: an output is NaN or infinite"
            flags.append(f"--min-sqnr {math.floor(stage.sqnr_db * 10) / 10:g}")
        if stage.top1_agreement is not None and stage.top1_agreement < limits.min_top1:
            flags.append(f"--min-top1 {math.floor(stage.top1_agreement * 100) / 100:g}")
        if stage.cosine < limits.min_cosine and math.isfinite(stage.cosine):
            flags.append(f"--min-cosine {math.floor(stage.cosine * 1e4) / 1e4:g}")
        if limits.max_abs is not None and stage.max_abs > limits.max_abs:
            flags.append(f"--max-abs-error {_ceil_3(stage.max_abs):g}")
        return f"passes with {' '.join(flags)}" if flags else None
    return None


def _atol_that_passes(max_abs: float) -> str:
    if not math.isfinite(max_abs):
        return "no tolerance passes: an output is NaN or infinite"
    return f"the tightest tolerance that passes is --atol {_ceil_3(max_abs):.3g} --rtol 0"


def _ceil_3(value: float) -> float:
    """`value` rounded up to 3 significant digits: a tolerance that surely holds."""
    if value <= 0:
        return 0.0
    # An int power of ten, or a float one below 100 (typeshed: int ** int is Any).
    scale: float = 10 ** (math.floor(math.log10(value)) - 2)
    return math.ceil(value / scale) * scale


def _counted(names: Iterable[str]) -> str:
    """ "convolution×2, relu×2, view_copy, linear": one delegate call's operators on one line."""
    counts: dict[str, int] = {}
    for name in names:
        counts[name] = counts.get(name, 0) + 1
    return ", ".join(f"{n}×{c}" if c > 1 else n for n, c in counts.items())


def _share(share: float | None) -> str:
    return "-" if share is None else f"{share:.0%}"


def _num(value: float, spec: str) -> str:
    # An exact match's SQNR is infinite: "inf", as format() spells it.
    return format(value, spec)


def _bytes(value: int | None) -> str:
    if value is None:
        return "-"

    return format_bytes(value)


def _localize_suggestion(result: RunResult) -> str:
    """For a device or lowering divergence not yet localised: how to find where it starts."""
    verdict = result.verdict
    failed = verdict.failed_stage if verdict is not None else None
    if (
        failed is None
        or failed.stage == "quantization"
        or result.localization is not None
        or not result.job.model
    ):
        return ""
    return "; rerun with --localize to name the operator where it starts"
