"""`etdeploy run`: build, deploy, execute, verify, report. Parses and renders only."""

from __future__ import annotations

from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

import typer
from rich.markup import escape
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    SpinnerColumn,
    TaskID,
    TextColumn,
    TransferSpeedColumn,
)
from rich.table import Table

from etdeploy.cli._app import command, console, err_console, format_ms
from etdeploy.errors import EXIT_OK

if TYPE_CHECKING:
    from etdeploy.report.result import OutputMetrics, Profile, RunResult, SizeSummary, Verdict


@command("run")
def run_command(
    model: str = typer.Argument(None, help="file.py:factory, package.module:factory, model.pt2, or an example (digits)."),
    device: str = typer.Option(None, "--device", "-d", help="local, a devices.NAME table of etdeploy.toml, a serial, or a model name (pixel8)."),
    backend: str = typer.Option(None, "--backend", "-b", help="xnnpack (default), portable, coreml, vulkan."),
    quantize: str = typer.Option(None, "--quantize", "-q", help="int8 (calibrated on real samples) or int8-dynamic."),
    calibration: list[str] = typer.Option([], "--calibration", help="Real calibration samples for int8: files, dirs or globs."),
    dynamic: list[str] = typer.Option([], "--dynamic", help="A dynamic dim: INPUT:DIM=MIN..MAX (e.g. x:0=1..16)."),
    pte: Path = typer.Option(None, "--pte", help="Run this .pte; MODEL is then only the eager reference."),
    data: Path = typer.Option(None, "--data", help="The external weights (.ptd) of --pte (default: the one its manifest names)."),
    external_weights: bool = typer.Option(None, "--external-weights/--no-external-weights", help="Build MODEL with its weights in a .ptd beside the .pte (pushed content-addressed)."),
    inputs: list[str] = typer.Option([], "--inputs", "-i", help="Real samples: .npy/.npz/.pt/.bin/.png/.jpg files, dirs or globs."),
    preprocess: str = typer.Option(None, "--preprocess", help="For images: resize=HxW,scale=1/255,mean=a/b/c,std=a/b/c,layout=nchw|nhwc."),
    random: int = typer.Option(0, "--random", min=0, help="Verify on N random samples instead (the verdict says so)."),
    reference: Path = typer.Option(None, "--reference", help="Expected outputs (.npz: s<S>_o<K>) instead of the eager model."),
    host_check: bool = typer.Option(None, "--host-check/--no-host-check", help="Also run the .pte in executorch's Python runtime here."),
    iterations: int = typer.Option(None, "--iterations", "-n", min=1, help="Timed executions (default 10)."),
    warmup: int = typer.Option(None, "--warmup", min=0, help="Untimed executions first (default 3)."),
    deadline: float = typer.Option(None, "--deadline", help="Seconds before the runner is killed (default 120)."),
    idle_timeout: float = typer.Option(None, "--idle-timeout", help="Seconds of runner silence that count as hung."),
    atol: float = typer.Option(None, "--atol", help="fp32 absolute tolerance (default 1e-4)."),
    output_kind: list[str] = typer.Option([], "--output-kind", help="How an output is judged: NAME=classifier|regression|embedding|mask|other.", rich_help_panel="Verification"),
    min_sqnr: float = typer.Option(None, "--min-sqnr", help="Quantization's accuracy budget: SQNR in dB vs the float model (default 15).", rich_help_panel="Verification"),
    min_top1: float = typer.Option(None, "--min-top1", help="... top-1 agreement of declared classifiers, 0-1 (default 0.9).", rich_help_panel="Verification"),
    min_cosine: float = typer.Option(None, "--min-cosine", help="... cosine of declared embeddings (default 0.99).", rich_help_panel="Verification"),
    max_abs_error: float = typer.Option(None, "--max-abs-error", help="... largest abs error vs the float model (default: no limit).", rich_help_panel="Verification"),
    quant_steps: float = typer.Option(None, "--quant-steps", help="A quantized program on the device: error allowed in quantization steps (default 1).", rich_help_panel="Verification"),
    rtol: float = typer.Option(None, "--rtol", help="fp32 relative tolerance (default 1e-4)."),
    runner: Path = typer.Option(None, "--runner", help="A runner bundle dir, or an executor_runner binary (upstream's works)."),
    cpu_threads: int = typer.Option(None, "--cpu-threads", help="The runner's thread pool size (default: the performant cores)."),
    adb_host: str = typer.Option(None, "--adb-host", help="The adb server's host (default ANDROID_ADB_SERVER_HOST or 127.0.0.1)."),
    adb_port: int = typer.Option(None, "--adb-port", help="The adb server's port (default ANDROID_ADB_SERVER_PORT or 5037)."),
    lock_timeout: float = typer.Option(None, "--lock-timeout", help="Seconds to wait for a device another job holds (default 600)."),
    json_path: Path = typer.Option(None, "--json", help="Write the result (etdeploy.result/1) here, also when the run fails."),
    keep: bool = typer.Option(None, "--keep/--no-keep", help="Keep the job's directory on the device."),
    profile: bool = typer.Option(False, "--profile", help="Record an ETDump and show the slowest operators and delegate calls."),
    no_cache: bool = typer.Option(False, "--no-cache", help="Rebuild the .pte even when cached."),
    config_path: Path = typer.Option(None, "--config", help="etdeploy.toml to read (default: the nearest one)."),
) -> None:  # fmt: skip
    """Run MODEL on a device with real inputs and compare with eager PyTorch."""
    import time

    from etdeploy.config import load_config, run_settings
    from etdeploy.devices.registry import open_device
    from etdeploy.pipeline import (
        RunContext,
        RunJob,
        as_error,
        error_result,
        new_job_id,
        run_job,
        write_result_json,
    )

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
    job = RunJob.from_settings(
        model,
        settings,
        pte=pte,
        data=data,
        random_inputs=random,
        reference=reference,
        use_cache=not no_cache,
        profile=profile,
    )
    started, job_id = time.time(), new_job_id()
    try:
        with RunDisplay() as display:
            target = open_device(
                job.device, config, adb_host=adb_host, adb_port=adb_port,
                lock_timeout_s=settings["lock_timeout_s"],
            )  # fmt: skip
            with target:
                result = run_job(
                    job,
                    target,
                    RunContext(
                        status=display.status, progress=display.transfer, size_config=config
                    ),
                    job_id=job_id,
                )
    except BaseException as exc:
        # The result file is promised for every run that got this far: a bug of
        # ours or Ctrl-C included (then as an internal error / interruption).
        if json_path is not None:
            write_result_json(
                error_result(job, job.device, as_error(exc), started, job_id), json_path
            )
        raise
    if json_path is not None:
        write_result_json(result, json_path)
    render_result(result)
    if result.exit_code != EXIT_OK:
        raise typer.Exit(result.exit_code)


class RunDisplay:
    """What the run is doing (a spinner line) and each transfer as a bar with
    bytes/s, on stderr, gone when the run ends. One rich live display for both:
    rich allows only one at a time."""

    def __init__(self) -> None:
        self._progress = Progress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            BarColumn(),
            DownloadColumn(),
            TransferSpeedColumn(),
            console=err_console,
            transient=True,
        )
        self._status = self._progress.add_task("starting", total=None)
        self._transfers: dict[str, TaskID] = {}

    def __enter__(self) -> RunDisplay:
        self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._progress.stop()

    def status(self, text: str) -> None:
        self._progress.update(self._status, description=escape(text))

    def transfer(self, path: str, done: int, total: int) -> None:
        task = self._transfers.get(path)
        if task is None:
            if done >= total:
                return  # skipped or instant: no bar worth drawing
            task = self._transfers[path] = self._progress.add_task(
                escape(PurePosixPath(path).name), total=total
            )
        self._progress.update(task, completed=done)
        if done >= total:
            self._progress.remove_task(task)
            del self._transfers[path]


def render_result(result: RunResult) -> None:
    """The verdict table, latency, memory, size, warnings and the one-line verdict."""
    verdict, artifact = result.verdict, result.artifact
    assert verdict is not None and artifact is not None  # a result that ran
    quant = f", {artifact.quantization}" if artifact.quantization else ""
    title = f"{result.model_label} on {result.device.name} ({artifact.backend or '?'}{quant})"
    table = Table(title=title)
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
            worst.name, f"{ok}/{len(rows)}", worst.sample, f"{worst.max_abs:.2e}",
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
        _render_profile(result.profile)
    for warning in result.warnings:
        err_console.print(f"[yellow]warning:[/] {warning}", highlight=False)
    mark = "[bold green]PASS[/]" if result.passed else "[bold red]FAIL[/]"
    console.print(f"{mark} {escape(verdict.reason)}", highlight=False)
    if result.size is not None and not result.size.passed:
        console.print(
            "[bold red]FAIL[/] the program is over a store size limit (above)", highlight=False
        )


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


def _render_profile(profile: Profile) -> None:
    table = Table(title=f"slowest events (median of {profile.executions_ms.count} executions: "
                        f"{format_ms(profile.executions_ms.median)})")  # fmt: skip
    for column in ("event", "backend", "operators", "module", "p50", "max", "share"):
        table.add_column(column, justify="right" if column in ("p50", "max", "share") else "left")
    for event in profile.events:
        table.add_row(
            event.name, event.backend or "-", ", ".join(event.op_types[:4]) or "-",
            event.module or "-", format_ms(event.p50_ms), format_ms(event.max_ms),
            "-" if event.share is None else f"{event.share:.0%}",
        )  # fmt: skip
    console.print(table)
    if not profile.etrecord:
        err_console.print(
            "[yellow]warning:[/] no ETRecord beside the .pte: events carry runtime names only"
        )


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
