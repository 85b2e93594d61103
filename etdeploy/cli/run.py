"""`etdeploy run`: build, deploy, execute, verify, report. Parses and renders only."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from etdeploy.cli._app import (
    check_json_target,
    command,
    console,
    emit_json,
    err_console,
    format_ms,
    json_to_stdout,
)
from etdeploy.errors import EXIT_OK, EtdeployError

if TYPE_CHECKING:
    from etdeploy.report.result import (
        Localization,
        OutputMetrics,
        RunResult,
        SizeSummary,
        TapResult,
        Verdict,
    )


MODEL_PANEL = "Model and build"
INPUTS_PANEL = "Inputs and reference"
DEVICE_PANEL = "Device"
TIMING_PANEL = "Timing and profiling"
VERIFY_PANEL = "Verification"
OUTPUT_PANEL = "Output and settings"
LOCALIZE_PANEL = "Localization"


@command(
    "run",
    examples=(
        "etdeploy run digits                                  # this machine",
        "etdeploy run model.py:build --device pixel8 --inputs samples/",
        "etdeploy run model.py:build --quantize int8 --inputs 'samples/*.npy'",
        "etdeploy run model.py:build --pte built.pte --inputs x.npz",
        "etdeploy run digits --profile                        # slowest operators",
        "etdeploy run digits --json - | jq .verdict.passed    # the result on stdout",
    ),
)
def run_command(
    model: str = typer.Argument(None, metavar="MODEL", help="file.py:factory, package.module:factory, model.pt2, or an example (digits)."),
    device: str = typer.Option(None, "--device", "-d", metavar="NAME", help="local, a devices.NAME table of etdeploy.toml, a serial, or a model name (pixel8).", rich_help_panel=DEVICE_PANEL),
    backend: str = typer.Option(None, "--backend", "-b", metavar="NAME", help="xnnpack (default), portable, coreml, vulkan.", rich_help_panel=MODEL_PANEL),
    quantize: str = typer.Option(None, "--quantize", metavar="MODE", help="int8 (calibrated on real samples) or int8-dynamic.", rich_help_panel=MODEL_PANEL),
    calibration: list[str] = typer.Option([], "--calibration", metavar="PATH", help="Real calibration samples for int8: files, dirs or globs.", rich_help_panel=MODEL_PANEL),
    dynamic: list[str] = typer.Option([], "--dynamic", metavar="INPUT:DIM=MIN..MAX", help="A dynamic dim, e.g. x:0=1..16.", rich_help_panel=MODEL_PANEL),
    pte: Path = typer.Option(None, "--pte", metavar="PATH", help="Run this .pte; MODEL is then only the eager reference.", rich_help_panel=MODEL_PANEL),
    inputs: list[str] = typer.Option([], "--inputs", "-i", metavar="PATH", help="Real samples: .npy .npz .pt .bin .png .jpg files, dirs or globs.", rich_help_panel=INPUTS_PANEL),
    preprocess: str = typer.Option(None, "--preprocess", metavar="SPEC", help="For images: resize=HxW, scale=1/255, mean=a/b/c, std=a/b/c, layout=nchw|nhwc (comma-separated).", rich_help_panel=INPUTS_PANEL),
    random: int = typer.Option(0, "--random", min=0, metavar="N", help="Verify on N random samples instead (the verdict says so).", rich_help_panel=INPUTS_PANEL),
    reference: Path = typer.Option(None, "--reference", metavar="NPZ", help="Expected outputs (.npz: s<S>_o<K>) instead of the eager model.", rich_help_panel=INPUTS_PANEL),
    host_check: bool = typer.Option(None, "--host-check/--no-host-check", help="Also run the .pte in executorch's Python runtime here.", rich_help_panel=INPUTS_PANEL),
    iterations: int = typer.Option(None, "--iterations", "-n", min=1, metavar="N", help="Timed executions (default 10).", rich_help_panel=TIMING_PANEL),
    warmup: int = typer.Option(None, "--warmup", min=0, metavar="N", help="Untimed executions first (default 3).", rich_help_panel=TIMING_PANEL),
    deadline: float = typer.Option(None, "--deadline", metavar="SECONDS", help="Seconds before the runner is killed (default 120); a call that also runs other samples gets more in proportion to its executions.", rich_help_panel=TIMING_PANEL),
    idle_timeout: float = typer.Option(None, "--idle-timeout", metavar="SECONDS", help="Seconds of runner silence that count as hung.", rich_help_panel=TIMING_PANEL),
    atol: float = typer.Option(None, "--atol", metavar="X", help="float32 absolute tolerance (default 1e-4).", rich_help_panel=VERIFY_PANEL),
    output_kind: list[str] = typer.Option([], "--output-kind", metavar="NAME=KIND", help="How an output is judged: KIND is classifier, regression, embedding, mask or other.", rich_help_panel=VERIFY_PANEL),
    min_sqnr: float = typer.Option(None, "--min-sqnr", metavar="DB", help="Quantization's accuracy budget: SQNR in dB vs the float model (default 15).", rich_help_panel=VERIFY_PANEL),
    min_top1: float = typer.Option(None, "--min-top1", metavar="X", help="... top-1 agreement of declared classifiers, 0-1 (default 0.9).", rich_help_panel=VERIFY_PANEL),
    min_cosine: float = typer.Option(None, "--min-cosine", metavar="X", help="... cosine of declared embeddings (default 0.99).", rich_help_panel=VERIFY_PANEL),
    max_abs_error: float = typer.Option(None, "--max-abs-error", metavar="X", help="... largest abs error vs the float model (default: no limit).", rich_help_panel=VERIFY_PANEL),
    quant_steps: float = typer.Option(None, "--quant-steps", metavar="N", help="A quantized program on the device: error allowed in quantization steps (default 1).", rich_help_panel=VERIFY_PANEL),
    rtol: float = typer.Option(None, "--rtol", metavar="X", help="float32 relative tolerance (default 1e-4).", rich_help_panel=VERIFY_PANEL),
    runner: Path = typer.Option(None, "--runner", metavar="PATH", help="A runner bundle dir, or an executor_runner binary (upstream's works).", rich_help_panel=DEVICE_PANEL),
    cpu_threads: int = typer.Option(None, "--cpu-threads", metavar="N", help="The runner's thread pool size (default: the performant cores).", rich_help_panel=DEVICE_PANEL),
    adb_host: str = typer.Option(None, "--adb-host", metavar="HOST", help="The adb server's host (default ANDROID_ADB_SERVER_HOST or 127.0.0.1).", rich_help_panel=DEVICE_PANEL),
    adb_port: int = typer.Option(None, "--adb-port", metavar="PORT", help="The adb server's port (default ANDROID_ADB_SERVER_PORT or 5037).", rich_help_panel=DEVICE_PANEL),
    lock_timeout: float = typer.Option(None, "--lock-timeout", metavar="SECONDS", help="Seconds to wait for a device another job holds (default 600).", rich_help_panel=DEVICE_PANEL),
    json_path: str = typer.Option(None, "--json", metavar="PATH|-", help="Write the result (etdeploy.result/1) to PATH, also when the run fails; - prints it to stdout instead of the tables.", rich_help_panel=OUTPUT_PANEL),
    keep: bool = typer.Option(None, "--keep/--no-keep", help="Keep the job's directory on the device.", rich_help_panel=DEVICE_PANEL),
    profile: bool = typer.Option(False, "--profile", help="Record an ETDump and show the slowest operators, the time per operator and where the ETDump is kept.", rich_help_panel=TIMING_PANEL),
    no_cache: bool = typer.Option(False, "--no-cache", help="Rebuild the .pte even when cached.", rich_help_panel=MODEL_PANEL),
    config_path: Path = typer.Option(None, "--config", metavar="PATH", help="etdeploy.toml to read (default: the nearest one).", rich_help_panel=OUTPUT_PANEL),
    localize: bool = typer.Option(None, "--localize/--no-localize", help="Name the operator where the device starts to depart from eager: a tapped twin of the program runs on the same device.", rich_help_panel=LOCALIZE_PANEL),
    localize_samples: int = typer.Option(None, "--localize-samples", min=0, metavar="N", help="Localise on N more samples after the most divergent one (default 0).", rich_help_panel=LOCALIZE_PANEL),
    localize_budget: str = typer.Option(None, "--localize-budget", metavar="SIZE", help="Bytes of tapped values pulled whole (default 64MiB); summaries (min, max, mean, std...) beyond.", rich_help_panel=LOCALIZE_PANEL),
    localize_module: str = typer.Option(None, "--localize-module", metavar="PATH", help="Tap only inside this module path, e.g. encoder.layers.3 (globs allowed).", rich_help_panel=LOCALIZE_PANEL),
    verify_remote: bool = typer.Option(False, "--verify-remote", rich_help_panel=DEVICE_PANEL, help="Hash every file already on the device instead of trusting its digest records."),
    data: Path = typer.Option(None, "--data", metavar="PTD", help="The external weights (.ptd) of --pte (default: the one its manifest names).", rich_help_panel=MODEL_PANEL),
    external_weights: bool = typer.Option(None, "--external-weights/--no-external-weights", help="Build MODEL with its weights in a .ptd beside the .pte (pushed content-addressed).", rich_help_panel=MODEL_PANEL),
) -> None:  # fmt: skip
    """Run MODEL on a device with real inputs and compare with eager PyTorch.

    Exit 0 when every check passes, 1 when one fails (numerics, size), 2 for bad
    input, 3 when the device, transport or runner fails (or no device answers to
    --device).
    """
    import time

    from etdeploy.cli._feedback import Feedback
    from etdeploy.config import load_config, run_settings
    from etdeploy.devices.registry import configured_runner, open_device
    from etdeploy.pipeline import (
        RunContext,
        RunJob,
        as_error,
        error_result,
        new_job_id,
        run_job,
    )

    check_json_target(json_path)
    config = load_config(config_path)
    settings = run_settings(
        config,
        device=device, backend=backend, quantize=quantize, inputs=inputs or None,
        calibration=calibration or None, dynamic=dynamic or None, external_weights=external_weights,
        preprocess=preprocess, host_check=host_check, iterations=iterations, warmup=warmup,
        deadline_s=deadline, idle_timeout_s=idle_timeout, atol=atol, rtol=rtol, keep=keep,
        lock_timeout_s=lock_timeout, runner=runner, cpu_threads=cpu_threads,
        output_kinds=output_kind or None, min_sqnr_db=min_sqnr, min_top1=min_top1,
        min_cosine=min_cosine, max_abs_error=max_abs_error, quant_steps=quant_steps,
    )  # fmt: skip
    settings.update(_localize_flags(localize, localize_samples, localize_budget, localize_module))
    job = RunJob.from_settings(
        model,
        settings,
        pte=pte,
        data=data,
        random_inputs=random,
        reference=reference,
        use_cache=not no_cache,
        profile=profile,
        verify_remote=verify_remote,
    )
    started, job_id = time.time(), new_job_id()
    try:
        with Feedback() as feedback:
            feedback.status(f"opening {job.device or 'the default device'}")
            target = open_device(
                job.device, config, adb_host=adb_host, adb_port=adb_port,
                lock_timeout_s=settings["lock_timeout_s"],
            )  # fmt: skip
            with target:
                result = run_job(
                    job,
                    target,
                    RunContext(
                        status=feedback.status, progress=feedback.transfer, size_config=config,
                        device_runner=configured_runner(job.device, config),
                    ),
                    job_id=job_id,
                )  # fmt: skip
    except BaseException as exc:
        # The result file is promised for every run that got this far: a bug of
        # ours or Ctrl-C included (then as an internal error / interruption).
        if json_path is not None:
            failed = error_result(job, job.device, as_error(exc), started, job_id)
            with contextlib.suppress(EtdeployError):
                emit_json(failed.to_json(), json_path)
        raise
    if json_path is not None:
        emit_json(result.to_json(), json_path)
    if json_to_stdout(json_path):
        # stdout is the document alone; the verdict line still reaches a person.
        _render_verdict_line(result, err_console)
    else:
        render_result(result)
    if result.exit_code != EXIT_OK:
        raise typer.Exit(result.exit_code)


def _localize_flags(
    localize: bool | None, samples: int | None, budget: str | None, module: str | None
) -> dict[str, object]:
    """The --localize flags given, over etdeploy.toml's [run] localize keys."""
    from etdeploy.sizecheck.limits import parse_size

    given = {
        "localize": localize,
        "localize_samples": samples,
        "localize_budget_bytes": parse_size(budget, what="--localize-budget") if budget else None,
        "localize_module": module,
    }
    return {key: value for key, value in given.items() if value is not None}


def render_result(result: RunResult) -> None:
    """The verdict table, latency, memory, size, warnings and the one-line verdict."""
    verdict, artifact = result.verdict, result.artifact
    assert verdict is not None and artifact is not None  # a result that ran
    quant = f", {artifact.quantization}" if artifact.quantization else ""
    title = f"{result.model_label} on {result.device.name} ({artifact.backend or '?'}{quant})"
    table = Table(title=escape(title))
    for column in (
        "output",
        "samples ok",
        "worst sample",
        "max abs",
        "max rel",
        "SQNR dB",
        "cosine",
        "top-1",
    ):
        table.add_column(
            column, justify="left" if column in ("output", "worst sample") else "right"
        )
    # One row per output, showing its worst sample; --json has every sample.
    by_output: dict[int, list[OutputMetrics]] = {}
    for m in verdict.metrics:
        by_output.setdefault(m.output, []).append(m)
    quantized = bool(artifact.quantization)
    for rows in by_output.values():
        worst = (
            min(rows, key=lambda m: m.sqnr_db) if quantized else max(rows, key=lambda m: m.max_abs)
        )
        ok = (
            sum(1 for m in rows if m.allclose)
            if not quantized
            else sum(1 for m in rows if m.top1_agree is not False)
        )
        top1 = [m.top1_agree for m in rows if m.top1_agree is not None]
        table.add_row(
            escape(worst.name), f"{ok}/{len(rows)}", escape(worst.sample), f"{worst.max_abs:.2e}",
            _num(worst.max_rel, ".2e"), _num(worst.sqnr_db, ".1f"),
            f"{worst.cosine:.6f}", f"{sum(top1)}/{len(top1)}" if top1 else "-",
        )  # fmt: skip
    console.print(table)
    if len(verdict.budget) > 1 or (verdict.budget and verdict.budget[0].rule != "allclose"):
        _render_budget(verdict)
    latency = result.latency_ms
    if latency is not None and latency.n:
        console.print(
            f"latency: load {format_ms(latency.load)}; {latency.n} iterations after "
            f"{result.job.warmup} warm-up: median {format_ms(latency.median)} "
            f"(min {format_ms(latency.min)}, p90 {format_ms(latency.p90)}, max {format_ms(latency.max)}, "
            f"trimmed mean {format_ms(latency.trimmed_mean)}, stdev {format_ms(latency.stdev)})",
            highlight=False,
        )
    if result.memory is not None:
        console.print(
            f"memory: planned arena {_bytes(result.memory.planned_bytes)}; "
            f"runner peak RSS {_bytes(result.memory.peak_rss_bytes)}",
            highlight=False,
        )
    if result.deploy is not None:
        deploy = result.deploy
        console.print(
            f"deploy: {_bytes(deploy.bytes_sent)} sent in {deploy.files_sent} file(s), "
            f"{deploy.files_skipped} unchanged file(s) skipped",
            highlight=False,
        )
    if result.host_check is not None:
        host = result.host_check
        console.print(
            f"host runtime: vs reference {host.host_vs_reference.reason}; "
            f"device vs host {host.device_vs_host.reason}",
            highlight=False,
        )
    if result.size is not None:
        _render_size(result.size)
    if result.profile is not None:
        _render_profile(result)
    if result.localization is not None:
        render_localization(result.localization)
    for warning in result.warnings:
        err_console.print(f"[yellow]warning:[/] {escape(warning)}", highlight=False, soft_wrap=True)
    _render_verdict_line(result, console)


def _render_verdict_line(result: RunResult, out: Console) -> None:
    """PASS or FAIL with the reason; a numeric FAIL also says the loosest setting
    that would have passed, so a reader can tell a near miss from a broken model."""
    verdict = result.verdict
    assert verdict is not None
    mark = "[bold green]PASS[/]" if result.passed else "[bold red]FAIL[/]"
    reason = verdict.reason
    if not verdict.passed:
        passing = passing_setting(verdict)
        if passing:
            reason += f"; {passing}"
    out.print(
        f"{mark} {escape(reason)}{_localize_suggestion(result)}", highlight=False, soft_wrap=True
    )
    if result.size is not None and not result.size.passed:
        out.print(
            "[bold red]FAIL[/] the program is over a store size limit (above)", highlight=False
        )


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
    scale = 10 ** (math.floor(math.log10(value)) - 2)
    return math.ceil(value / scale) * scale


def _render_budget(verdict: Verdict) -> None:
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
    console.print(table)
    kinds = ", ".join(
        f"{k.name} {k.kind}{'' if k.declared else ' (guessed)'}" for k in verdict.kinds
    )
    if kinds:
        console.print(f"output kinds: {escape(kinds)}", highlight=False)


def _render_profile(result: RunResult) -> None:
    """The slowest events, the time per operator kind, and where the ETDump is kept."""
    from etdeploy.profile import short_op

    profile = result.profile
    assert profile is not None
    table = Table(title=f"slowest events (median of {profile.executions_ms.count} executions: "
                        f"{format_ms(profile.executions_ms.median)})")  # fmt: skip
    for column in ("event", "backend", "operators", "module", "p50", "max", "share"):
        table.add_column(column, justify="right" if column in ("p50", "max", "share") else "left")
    kernels = False
    for event in profile.events:
        if event.op_types:
            ops = _counted(short_op(op) for op in event.op_types)
            module = event.module or "-"
        elif event.delegated:
            # XNNPACK's kernel events carry their own names and no debug handle:
            # ExecuTorch's Inspector cannot map them to ATen operators or modules.
            kernels = True
            ops, module = "delegate kernel", "(in the delegate call)"
        else:
            ops, module = "-", event.module or "-"
        table.add_row(
            escape(event.name), escape(event.backend or "-"), escape(ops), escape(module),
            format_ms(event.p50_ms), format_ms(event.max_ms), _share(event.share),
        )  # fmt: skip
    console.print(table)
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
        console.print(totals)
    if kernels:
        console.print(
            "[dim]kernel rows are the delegate's own operators, timed inside its DELEGATE_CALL; "
            "the call's row names the ATen operators and modules it holds[/]",
            highlight=False, soft_wrap=True,
        )  # fmt: skip
    if result.etdump:
        console.print(
            f"profile: ETDump kept at {escape(result.etdump)}", highlight=False, soft_wrap=True
        )
    if not profile.etrecord:
        err_console.print(
            "[yellow]warning:[/] no ETRecord beside the .pte: events carry runtime names only",
            highlight=False,
        )
        err_console.print(
            "[dim]hint:[/] build with `etdeploy build MODEL --etrecord -o FILE.pte` to keep it "
            "beside the program, or run MODEL without --pte",
            highlight=False, soft_wrap=True,
        )  # fmt: skip


def _counted(names: Iterable[str]) -> str:
    """ "convolution×2, relu×2, view_copy, linear": one delegate call's operators on one line."""
    counts: dict[str, int] = {}
    for name in names:
        counts[name] = counts.get(name, 0) + 1
    return ", ".join(f"{n}×{c}" if c > 1 else n for n, c in counts.items())


def _share(share: float | None) -> str:
    return "-" if share is None else f"{share:.0%}"


def _render_size(size: SizeSummary) -> None:
    for verdict in size.verdicts:
        colour = {"fits": "green", "over": "bold red", "warning": "yellow"}.get(verdict.status, "")
        console.print(
            f"size: {escape(verdict.label)}: [{colour}]{escape(verdict.text or verdict.status)}[/]",
            highlight=False,
        )


def _num(value: float, spec: str) -> str:
    # An exact match's SQNR is infinite: "inf", as format() spells it.
    return format(value, spec)


def _bytes(value: int | None) -> str:
    if value is None:
        return "-"
    from etdeploy.sizecheck.limits import format_bytes

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


def render_localization(found: Localization) -> None:
    """The taps in graph order with the first divergence marked, then what was
    found on one line. A CI log is read wide: piped, the table is not squeezed
    to 80 columns, and the lines do not wrap."""
    from rich import box

    from etdeploy.pipeline.taps import describe_error

    if found.taps:
        title = (
            f"localization: {len(found.taps)} taps ({found.granularity}) vs {found.reference}; "
            f"sample{'s' if len(found.samples) > 1 else ''} {', '.join(found.samples)}"
        )
        table = Table(title=escape(title), box=box.SIMPLE_HEAD, title_justify="left")
        columns = ("#", "op", "module", "source", "partition", "value", "error", "SQNR dB",
                   "ULPs", "vs inputs", "status")  # fmt: skip
        for column in columns:
            right = column in ("#", "error", "SQNR dB", "ULPs", "vs inputs")
            table.add_column(column, justify="right" if right else "left", no_wrap=True)
        first = found.first_divergence.node if found.first_divergence else None
        for tap in found.taps:
            m = tap.metrics
            error = f"{m.steps:.1f} steps" if m.steps is not None else f"{m.rel:.2e}"
            if tap.partition == "CPU":
                partition = f"CPU {tap.kernel or ''}".strip()
            else:
                partition = f"{tap.partition} #{tap.delegate}"
            status = "FIRST DIVERGENCE" if tap.node == first else tap.status
            row = [
                str(tap.index), tap.op, tap.module or "(model)", tap.source or "-", partition,
                "summary" if tap.reducer != "full" else "full", error, "-" if m.sqnr_db is None else _num(m.sqnr_db, ".1f"), f"{m.ulps:.3g}",
                _growth(tap), status,
            ]  # fmt: skip
            style = "bold red" if tap.node == first else ("red" if tap.status == "departs" else "")
            table.add_row(*(escape(cell) for cell in row), style=style or None)
        _print_wide(table)
    if found.program is not None and found.program.untapped:
        console.print(
            f"localize: {len(found.program.untapped)} value(s) of dynamic size over the budget "
            f"not tapped: {escape(', '.join(found.program.untapped))}",
            highlight=False,
            soft_wrap=True,
        )
    for attempt in found.attempts:
        if attempt.reproduced is False or not attempt.taps:
            console.print(
                f"localize ({attempt.granularity}): {escape(attempt.note)}",
                highlight=False,
                soft_wrap=True,
            )
    divergence = found.first_divergence
    if divergence is not None and divergence.source:
        console.print(
            f"first divergence: {escape(divergence.source)}  {escape(divergence.code or '')}  "
            f"— {escape(describe_error(divergence.metrics))}",
            highlight=False,
            soft_wrap=True,
        )
    colour = {"localized": "bold yellow", "clean": "green"}.get(found.status, "bold red")
    console.print(f"[{colour}]LOCALIZE[/] {escape(found.reason)}", highlight=False, soft_wrap=True)


def _growth(tap: TapResult) -> str:
    """How much the tap's relative error outgrew its inputs'; from exact inputs
    (a model input, weights) the ratio to float32's epsilon says little."""
    if tap.growth is None:
        return "-"
    return "exact in" if tap.carried_in == 0 else f"{tap.growth:.3g}x"


def _print_wide(table: Table) -> None:
    """A table at its natural width when piped (rich would squeeze it to 80
    columns and cut every cell), as plain lines; on a terminal, as usual."""
    if console.is_terminal:
        console.print(table)
        return
    import io

    from rich.console import Console

    buffer = io.StringIO()
    Console(file=buffer, width=240, color_system=None).print(table)
    for line in buffer.getvalue().splitlines():
        console.print(line.rstrip(), markup=False, highlight=False, soft_wrap=True)
