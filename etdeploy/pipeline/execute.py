"""execute: the runner on the device, once per sample, under a deadline.

Warm-up and N timed iterations on the first sample, one execution on each of
the rest. The outputs, timings and logs come back; a runner that fails,
crashes or passes its deadline raises RunnerFailure with its log. With
--profile the timed executions also write an ETDump, read here with the
Inspector (etdeploy.profile).
"""

from __future__ import annotations

import shutil
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from etdeploy import runner as contract
from etdeploy.devices.base import Device, RunOutput
from etdeploy.errors import InputError, RunnerError
from etdeploy.pipeline.build import Program
from etdeploy.pipeline.deploy import Deployed
from etdeploy.pipeline.job import RunJob
from etdeploy.report.result import Latency, Profile
from etdeploy.runner_build import RunnerBundle

LOG_HEAD_LINES = 40
LOG_TAIL_LINES = 200


@dataclass(frozen=True)
class SampleRun:
    """One runner call: its outputs (per tensor output) and what it reported."""

    outputs: tuple[np.ndarray, ...]
    report: contract.RunnerResult
    log: str
    etdump: Path | None = None


@dataclass(frozen=True)
class Executed:
    outputs: tuple[tuple[np.ndarray, ...], ...]  # per sample, per tensor output
    load_ms: float | None
    iterations_ms: tuple[float, ...]
    peak_rss_bytes: int | None
    runner_version: str | None
    logs: tuple[str, ...]
    etdump: Path | None = None


def execute(
    device: Device,
    bundle: RunnerBundle,
    deployed: Deployed,
    program: Program,
    sample_names: Sequence[str],
    samples: Sequence[tuple[np.ndarray, ...]],
    references: Sequence[Sequence[np.ndarray]],
    job: RunJob,
    local_dir: Path,
) -> Executed:
    """Every sample through the runner; the first is the timed one."""
    runs: list[SampleRun] = []
    for s, inputs in enumerate(deployed.inputs):
        timed = s == 0
        runs.append(
            run_sample(
                device, bundle, program, job,
                runner=deployed.runner, pte=deployed.pte, data=deployed.data, inputs=inputs,
                shapes=_shapes_if_dynamic(program, samples[s]),
                reference_shapes=[tuple(r.shape) for r in references[s]],
                out_base=f"{deployed.job_dir}/s{s}",
                cwd=deployed.job_dir,
                local=local_dir / f"s{s}",
                sample_name=sample_names[s],
                iterations=job.iterations if timed else 1,
                warmup=job.warmup if timed else 0,
                profile=timed and job.profile,
            )
        )  # fmt: skip
    first = runs[0].report
    return Executed(
        outputs=tuple(run.outputs for run in runs),
        load_ms=first.load_ms,
        iterations_ms=tuple(first.iterations_ms),
        peak_rss_bytes=first.peak_rss_bytes,
        runner_version=first.runner_version,
        logs=tuple(run.log for run in runs),
        etdump=runs[0].etdump,
    )


def run_sample(
    device: Device,
    bundle: RunnerBundle,
    program: Program,
    job: RunJob,
    *,
    runner: str,
    pte: str,
    inputs: Sequence[str],
    data: str | None = None,
    shapes: tuple[tuple[int, ...], ...] | None,
    reference_shapes: Sequence[tuple[int, ...]],
    out_base: str,
    cwd: str,
    local: Path,
    sample_name: str,
    iterations: int = 1,
    warmup: int = 0,
    profile: bool = False,
) -> SampleRun:
    """One runner call on files already on the device; its outputs pulled back to
    `local`-prefixed files. With upstream's runner (no result JSON), the output
    shapes are the reference's."""
    upstream = bundle.flavor == "upstream"
    invocation = contract.RunnerInvocation(
        model_path=pte,
        data_path=data,
        input_paths=tuple(inputs),
        output_base=f"{out_base}-out",
        num_executions=iterations,
        warmup=warmup,
        method=program.method,
        cpu_threads=job.cpu_threads,
        etdump_path=f"{out_base}-run.etdump" if profile else None,
        result_json_path=None if upstream else f"{out_base}-result.json",
        flavor=bundle.flavor,
        input_shapes=shapes,
    )
    argv = contract.runner_argv(runner, invocation)
    out = device.run(argv, deadline_s=job.deadline_s, cwd=cwd, idle_timeout_s=job.idle_timeout_s)
    log = _log_text(out)
    if out.timed_out or out.exit_code != 0:
        raise contract.runner_failure(
            None if out.timed_out else out.exit_code,
            out.stdout,
            out.stderr,
            device_log=out.device_log,
            timed_out=out.timed_out,
            command=out.command,
            device=device.name,
            silent_for_s=job.idle_timeout_s if out.idle else None,
        )
    if upstream:
        report = contract.result_from_log(
            f"{out.stdout}\n{out.stderr}\n{out.device_log}", invocation
        )
        wanted = [
            (index, program.outputs[index].dtype or "", list(reference_shapes[k]))
            for k, index in enumerate(program.tensor_outputs)
        ]
    else:
        assert invocation.result_json_path is not None
        local_json = device.pull(invocation.result_json_path, Path(f"{local}-result.json"))
        report = contract.parse_result_json(local_json.read_bytes())
        wanted = [(o.index, o.dtype or "", list(o.shape or ())) for o in report.tensor_outputs()]
    outputs = []
    for index, dtype, shape in wanted:
        (remote_output,) = contract.output_files(invocation.output_base, [index])
        pulled = device.pull(remote_output, Path(f"{local}-out-{index}.bin"))
        try:
            outputs.append(_read_output(pulled, dtype, shape))
        except InputError as exc:
            # The runner wrote it: a wrong size is the runner's fault, not the user's input.
            raise RunnerError(
                f"output {index} of sample {sample_name}: {exc.message}",
                "the runner and the program disagree on the output; with upstream's runner "
                "shapes come from the reference, so check that it matches the program",
                device=device.name,
                command=out.command,
                log=log,
            ) from exc
    etdump = None
    if invocation.etdump_path is not None:
        etdump = device.pull(invocation.etdump_path, Path(f"{local}-run.etdump"))
    return SampleRun(tuple(outputs), report, log, etdump)


def _read_output(path: Path, dtype: str, shape: list[int]) -> np.ndarray:
    from etdeploy.inputs import read_raw

    return read_raw(path, dtype, shape)


def _shapes_if_dynamic(
    program: Program, sample: tuple[np.ndarray, ...]
) -> tuple[tuple[int, ...], ...] | None:
    """The sample's shapes when any differs from the program's (a dynamic dim)."""
    shapes = tuple(tuple(int(d) for d in array.shape) for array in sample)
    planned = tuple(value.shape for value in program.inputs)
    return None if shapes == planned else shapes


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


def latency_of(load_ms: float | None, times_ms: Sequence[float]) -> Latency:
    """min, median, p90, max and a 10%-trimmed mean; the spread as stdev."""
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
    )


def keep_etdump(path: Path, job_id: str) -> Path:
    """The run's ETDump moved to the cache, where a report can point at it."""
    from etdeploy.paths import cache_dir

    kept = cache_dir("etdumps") / f"{job_id}.etdump"
    # The temporary dir may be on another filesystem (a tmpfs /tmp): copy, not rename.
    shutil.move(path, kept)
    return kept


def profile_of(etdump: Path, program: Program) -> Profile:
    from etdeploy.builder import etrecord_path
    from etdeploy.profile import summarize_etdump

    record = etrecord_path(program.pte)
    return Profile.from_json(summarize_etdump(etdump, record if record.is_file() else None))
