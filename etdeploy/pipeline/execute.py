"""execute: the runner on the device for every sample, under a deadline.

Warm-up and N timed iterations on the first sample, then one execution on each
of the rest. Our runner takes every sample in one call: the samples after the
first are listed in a file deploy pushed with the inputs, their inputs are byte
ranges of the packed inputs file, and all outputs come back in two files (the
outputs' bytes and one document), so a thousand samples cost one call and one
pull. Our runner writes everything to stdout and stderr, so the device's own log
(Android's logcat) is read only for upstream's. Upstream's runner takes one sample per call, its outputs a file
each. A runner that fails, crashes or passes its deadline raises RunnerFailure
with its log. With --profile the timed executions also write an ETDump, read
here with the Inspector (etdeploy.profile).
"""

from __future__ import annotations

import math
import shutil
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from etdeploy import runner as contract
from etdeploy.builder import etrecord_path
from etdeploy.devices.base import RunOutput
from etdeploy.errors import InputError, RunnerError
from etdeploy.inputs import read_raw
from etdeploy.memory.account import account
from etdeploy.paths import cache_dir
from etdeploy.pipeline.deploy import Deployed, Target, shapes_if_dynamic
from etdeploy.preflight.describe_runner import remote_runner_dir
from etdeploy.profile import summarize_etdump
from etdeploy.program import Program
from etdeploy.results.result import Latency, Profile
from etdeploy.results.result_accuracy import Throughput
from etdeploy.results.result_memory import Memory
from etdeploy.staged import Staged

LOG_HEAD_LINES = 40
LOG_TAIL_LINES = 200


@dataclass(frozen=True)
class Timing:
    """How the first sample of a call is run: warm-ups, timed executions, an ETDump."""

    iterations: int = 1
    warmup: int = 0
    profile: bool = False


@dataclass(frozen=True)
class ExecuteSettings:
    """What execute takes of a run's settings: the timed sample's timing, and the
    limits and threads of every runner call."""

    timing: Timing
    deadline_s: float
    idle_timeout_s: float | None = None
    cpu_threads: int | None = None


@dataclass(frozen=True)
class SampleRun:
    """One sample through the runner: its outputs (per tensor output) and report."""

    outputs: tuple[np.ndarray, ...]
    report: contract.RunnerResult
    log: str


@dataclass(frozen=True)
class Executed:
    outputs: tuple[tuple[np.ndarray, ...], ...]  # per sample, per tensor output
    load_ms: float | None
    iterations_ms: tuple[float, ...]
    peak_rss_bytes: int | None
    runner_version: str | None
    logs: tuple[str, ...]  # per runner call
    etdump: Path | None = None
    calls: int = 1
    # Each sample's execution time: the timed sample's median, then one each.
    sample_ms: tuple[float, ...] = ()
    # What our runner measured of its memory per phase (the timed sample's).
    memory: contract.RunnerMemory | None = None
    # The timed iterations' CPU time (our runner; empty from upstream's).
    iterations_cpu_ms: tuple[float, ...] = ()


def execute(
    target: Target,
    deployed: Deployed,
    program: Program,
    staged: Staged,
    settings: ExecuteSettings,
    local_dir: Path,
    timing: Timing | None = None,
) -> Executed:
    """Every sample through the runner: the first is the timed one (warm-ups and
    timed executions; `timing`, the settings' by default), every other runs once."""
    timing = timing or settings.timing
    call = _batched_call if target.batched else _upstream_calls
    runs, logs, etdump = call(target, deployed, program, staged, settings, local_dir, timing)
    first = runs[0].report
    return Executed(
        outputs=tuple(run.outputs for run in runs),
        load_ms=first.load_ms,
        iterations_ms=tuple(first.iterations_ms),
        peak_rss_bytes=first.peak_rss_bytes,
        runner_version=first.runner_version,
        logs=logs,
        etdump=etdump,
        calls=len(logs),
        sample_ms=tuple(
            statistics.median(run.report.iterations_ms) for run in runs if run.report.iterations_ms
        ),
        memory=first.memory,
        iterations_cpu_ms=first.iterations_cpu_ms,
    )


def call_deadline_s(settings: ExecuteSettings, executions: int) -> float:
    """A runner call's deadline: `--deadline` covers the timed sample's warm-ups and
    executions; a call that runs more executions (other samples after it) gets
    proportionally more, one that runs fewer no less."""
    timed = settings.timing.warmup + settings.timing.iterations
    return settings.deadline_s * max(1.0, executions / timed)


def _batched_call(
    target: Target,
    deployed: Deployed,
    program: Program,
    staged: Staged,
    settings: ExecuteSettings,
    local_dir: Path,
    timing: Timing,
) -> tuple[list[SampleRun], tuple[str, ...], Path | None]:
    """Every sample in one call of our runner: the samples after the first listed in
    the samples file deploy pushed, outputs and documents back in one pull of two files."""
    device, jdir = target.device, deployed.job_dir
    rest = len(deployed.inputs) - 1
    base = f"{jdir}/batch"
    invocation = contract.RunnerInvocation(
        model_path=deployed.pte, data_path=deployed.data, input_paths=deployed.inputs[0],
        num_executions=timing.iterations, warmup=timing.warmup, method=program.method,
        cpu_threads=settings.cpu_threads,
        etdump_path=f"{jdir}/run.etdump" if timing.profile else None,
        input_shapes=shapes_if_dynamic(program, staged.samples[0]),
        samples_file=deployed.samples_file, batch_output=base,
        # The timed sample's phases are the run's memory account.
        measure_memory=True,
    )  # fmt: skip
    out = _run(target, settings, invocation, executions=timing.warmup + timing.iterations + rest)
    log = _log_text(out)
    wanted = [(remote, local_dir / Path(remote).name) for remote in contract.batch_files(base)]
    if invocation.etdump_path is not None:
        wanted.append((invocation.etdump_path, local_dir / "run.etdump"))
    pulled = device.pull_files(wanted)
    reports = contract.parse_batch_json(pulled[1].read_bytes())
    if len(reports) != len(deployed.inputs):
        raise _disagree(
            target,
            out,
            log,
            f"the runner reported {len(reports)} of {len(deployed.inputs)} samples",
        )
    # A plain array over the mapping (np.asarray drops the memmap subclass): a thousand
    # outputs' views then cost no memmap bookkeeping each, in the views or in verify.
    mapped = np.memmap(pulled[0], dtype=np.uint8, mode="r") if pulled[0].stat().st_size else None
    data = np.asarray(mapped) if mapped is not None else None
    runs = [
        SampleRun(_batch_outputs(target, out, log, name, report, data), report, log)
        for name, report in zip(staged.sample_names, reports, strict=True)
    ]
    return runs, (log,), pulled[2] if invocation.etdump_path is not None else None


def _batch_outputs(
    target: Target,
    out: RunOutput,
    log: str,
    name: str,
    report: contract.RunnerResult,
    data: np.ndarray | None,
) -> tuple[np.ndarray, ...]:
    """A sample's tensor outputs as views of the batch data file (nothing copied)."""
    arrays = []
    for record in report.tensor_outputs():
        dtype = np.dtype(record.dtype or "")
        shape = tuple(record.shape or ())
        count = math.prod(shape)
        start, size = record.offset, count * dtype.itemsize
        if data is None or start is None or start + size > data.size:
            raise _disagree(
                target, out, log, f"output {record.index} of sample {name} is not in the batch file"
            )
        arrays.append(data[start : start + size].view(dtype).reshape(shape))
    return tuple(arrays)


def _upstream_calls(
    target: Target,
    deployed: Deployed,
    program: Program,
    staged: Staged,
    settings: ExecuteSettings,
    local_dir: Path,
    timing: Timing,
) -> tuple[list[SampleRun], tuple[str, ...], Path | None]:
    """One call a sample (upstream's runner): its outputs a file each, its report
    read from its log, the output shapes the reference's."""
    runs, etdump = [], None
    for s, inputs in enumerate(deployed.inputs):
        first = s == 0
        base = f"{deployed.job_dir}/s{s}-out"
        invocation = contract.RunnerInvocation(
            model_path=deployed.pte, data_path=deployed.data, input_paths=inputs,
            output_base=base, num_executions=timing.iterations if first else 1,
            warmup=timing.warmup if first else 0, method=program.method,
            cpu_threads=settings.cpu_threads, flavor="upstream",
            etdump_path=f"{deployed.job_dir}/run.etdump" if timing.profile and first else None,
        )  # fmt: skip
        out = _run(
            target, settings, invocation, executions=invocation.warmup + invocation.num_executions
        )
        log = _log_text(out)
        report = contract.result_from_log(
            f"{out.stdout}\n{out.stderr}\n{out.device_log}", invocation
        )
        indices = program.tensor_outputs
        locals_ = [local_dir / f"s{s}-out-{index}.bin" for index in indices]
        files = list(zip(contract.output_files(base, indices), locals_, strict=True))
        if invocation.etdump_path is not None:
            files.append((invocation.etdump_path, local_dir / "run.etdump"))
            etdump = local_dir / "run.etdump"
        target.device.pull_files(files)
        arrays = []
        for k, (index, local) in enumerate(zip(indices, locals_, strict=True)):
            shape = list(staged.references[s][k].shape) if staged.references else []
            arrays.append(_read_output(target, out, log, staged.sample_names[s], index, local,
                                       program.outputs[index].dtype or "", shape))  # fmt: skip
        runs.append(SampleRun(tuple(arrays), report, log))
    return runs, tuple(run.log for run in runs), etdump


def _run(
    target: Target,
    settings: ExecuteSettings,
    invocation: contract.RunnerInvocation,
    *,
    executions: int,
) -> RunOutput:
    """One runner call; a failure, crash or timeout raises RunnerFailure with its log."""
    argv = contract.runner_argv(invocation_runner(target, invocation), invocation)
    out = target.device.run(
        argv,
        deadline_s=call_deadline_s(settings, executions),
        cwd=_cwd(invocation),
        idle_timeout_s=settings.idle_timeout_s,
        # Upstream's runner logs to logcat on Android; ours to stdout and stderr.
        device_log=invocation.flavor == "upstream",
    )
    check_runner_output(out, target.device.name, settings.idle_timeout_s)
    return out


def check_runner_output(out: RunOutput, device: str, idle_timeout_s: float | None) -> None:
    """A runner call that failed, crashed or passed its deadline (or was stopped by
    --idle-timeout) raises its RunnerFailure (exit 3), its log attached: for a forward
    pass and for generation alike."""
    if out.timed_out or out.exit_code != 0:
        raise contract.runner_failure(
            None if out.timed_out else out.exit_code,
            out.stdout,
            out.stderr,
            device_log=out.device_log,
            timed_out=out.timed_out,
            command=out.command,
            device=device,
            silent_for_s=idle_timeout_s if out.idle else None,
        )


def invocation_runner(target: Target, invocation: contract.RunnerInvocation) -> str:
    """The runner executable on the device, beside the other bundle files."""
    return f"{remote_runner_dir(target.device, target.bundle)}/{target.bundle.executable}"


def _cwd(invocation: contract.RunnerInvocation) -> str | None:
    base = invocation.batch_output or invocation.output_base
    return base.rsplit("/", 1)[0] if base and "/" in base else None


def _read_output(
    target: Target, out: RunOutput, log: str, sample: str, index: int, path: Path,
    dtype: str, shape: list[int],
) -> np.ndarray:  # fmt: skip

    try:
        return read_raw(path, dtype, shape)
    except InputError as exc:
        # The runner wrote it: a wrong size is the runner's fault, not the user's input.
        raise _disagree(
            target, out, log, f"output {index} of sample {sample}: {exc.message}"
        ) from exc


def _disagree(target: Target, out: RunOutput, log: str, problem: str) -> RunnerError:
    return RunnerError(
        problem,
        "the runner and the program disagree on the output; with upstream's runner shapes "
        "come from the reference, so check that it matches the program",
        device=target.device.name,
        command=out.command,
        log=log,
    )


def _log_text(out: RunOutput) -> str:
    parts = [f"$ {out.command}", out.stdout.rstrip(), out.stderr.rstrip()]
    if out.device_log.strip():
        parts += ["--- device log", out.device_log.rstrip()]
    return clip_log("\n".join(p for p in parts if p))


def clip_log(text: str) -> str:
    """The head and tail of a log: a runner prints a line per iteration, and a
    hung one killed after a million iterations must not put them all in a report."""
    lines = text.splitlines()
    if len(lines) <= LOG_HEAD_LINES + LOG_TAIL_LINES:
        return text
    omitted = len(lines) - LOG_HEAD_LINES - LOG_TAIL_LINES
    return "\n".join(
        [*lines[:LOG_HEAD_LINES], f"[... {omitted} lines omitted ...]", *lines[-LOG_TAIL_LINES:]]
    )


def latency_of(
    load_ms: float | None, times_ms: Sequence[float], cpu_ms: Sequence[float] = ()
) -> Latency:
    """min, median, p90, max and a 10%-trimmed mean; the spread as stdev; the CPU
    time's median where the runner measured it."""
    if not times_ms:
        return Latency(load=load_ms, n=0, iterations=())
    ordered = sorted(times_ms)
    cut = len(ordered) // 10
    trimmed = ordered[cut : len(ordered) - cut] or ordered
    return Latency(
        load=load_ms,
        n=len(ordered),
        min=ordered[0],
        median=statistics.median(ordered),
        p90=ordered[min(len(ordered) - 1, round(0.9 * (len(ordered) - 1)))],
        max=ordered[-1],
        trimmed_mean=statistics.fmean(trimmed),
        stdev=statistics.pstdev(ordered),
        iterations=tuple(times_ms),
        cpu_median=statistics.median(cpu_ms) if cpu_ms else None,
        cpu_iterations=tuple(cpu_ms) if cpu_ms else None,
    )


def throughput_of(sample_ms: Sequence[float]) -> Throughput | None:
    """MLPerf's two views of a test set: the single-stream latency percentiles (a sample
    at a time) and the offline throughput (samples per second of execution)."""
    if len(sample_ms) < 2:
        return None
    ordered = sorted(sample_ms)
    total_s = math.fsum(ordered) / 1000
    return Throughput(
        samples=len(ordered),
        samples_per_s=len(ordered) / total_s if total_s > 0 else math.inf,
        p50_ms=percentile(ordered, 50),
        p90_ms=percentile(ordered, 90),
    )


def percentile(ordered: Sequence[float], q: float) -> float:
    """numpy.percentile's default ("linear": numpy/lib/_function_base_impl.py, _lerp,
    numpy 2.x, read 2026-12-04) of sorted values, computed alike to the last bit,
    without numpy.percentile importing numpy.ma (~0.01 s of a run)."""
    at = (len(ordered) - 1) * (q / 100)
    below = math.floor(at)
    low, high = ordered[below], ordered[min(below + 1, len(ordered) - 1)]
    t, step = at - below, high - low
    return high - step * (1 - t) if t >= 0.5 else low + step * t


def keep_etdump(path: Path, job_id: str) -> Path:
    """The run's ETDump moved to the cache, where a report can point at it."""
    kept = cache_dir("etdumps") / f"{job_id}.etdump"
    # The temporary dir may be on another filesystem (a tmpfs /tmp): copy, not rename.
    shutil.move(path, kept)
    return kept


def profile_of(etdump: Path, program: Program) -> Profile:
    record = etrecord_path(program.pte)
    return Profile.from_json(summarize_etdump(etdump, record if record.is_file() else None))


def memory_of(program: Program, executed: Executed) -> Memory:
    """The memory block of one runner call: the manifest's planned arena, the
    runner's peak RSS and, from our runner, the account per phase."""
    reading = executed.memory
    phases = account(reading) if reading is not None else ()
    return Memory(
        planned_bytes=program.planned_bytes,
        peak_rss_bytes=executed.peak_rss_bytes,
        peak_bytes=max((p.peak_bytes for p in phases), default=None),
        phases=phases if reading is not None else None,
        planned_buffers=reading.planned_buffers if reading is not None else None,
        measured_by=reading.source if reading is not None else None,
        heap_source=reading.heap_source if reading is not None else None,
    )
