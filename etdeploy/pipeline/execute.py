"""execute: the runner on the device for every sample, under a deadline.

Warm-up and N timed iterations on the first sample, then one execution on each
of the rest, as many samples per runner call as our runner's command line takes
(upstream's runner: one call per sample). The outputs, timings and logs come back; a runner that fails,
crashes or passes its deadline raises RunnerFailure with its log. With
--profile the timed executions also write an ETDump, read here with the
Inspector (etdeploy.profile).
"""

from __future__ import annotations

import dataclasses
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
    logs: tuple[str, ...]  # per runner call
    etdump: Path | None = None
    # What our runner measured of its memory per phase (the timed sample's call).
    memory: contract.RunnerMemory | None = None


# One call of our runner takes the samples after the timed one until its command
# line would pass this many bytes: an adbd older than Android 7 takes a shell
# command of at most MAX_PAYLOAD_V1 = 4 KiB in one OPEN message (adb/adb.h in AOSP
# packages/modules/adb, read 2026-12-03 via the search tool); newer ones 1 MiB.
# 3 KiB leaves room for what a device wraps around the runner's argv.
CALL_ARGV_BUDGET = 3 * 1024


@dataclass(frozen=True)
class Sample:
    """One sample's part of a runner call: its files on the device and here."""

    name: str
    inputs: Sequence[str]
    shapes: tuple[tuple[int, ...], ...] | None
    reference_shapes: Sequence[tuple[int, ...]]
    out_base: str  # on the device: OUT_BASE-out-<i>.bin, OUT_BASE-result.json
    local: Path  # here: LOCAL-out-<i>.bin, LOCAL-result.json

    @property
    def files(self) -> contract.SampleFiles:
        """Its files as the runner is told them."""
        return contract.SampleFiles(
            input_paths=tuple(self.inputs), output_base=f"{self.out_base}-out",
            result_json_path=f"{self.out_base}-result.json", input_shapes=self.shapes,
        )  # fmt: skip


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
    """Every sample through the runner. The first is the timed one (warm-ups and
    timed executions), then every other runs once; our runner takes them in as few
    calls as the command line allows, so a program is loaded (and XNNPACK packs its
    weights) once per call, not once per sample."""
    each = [
        Sample(
            name=sample_names[s], inputs=inputs,
            shapes=shapes_if_dynamic(program, samples[s]),
            reference_shapes=[tuple(r.shape) for r in references[s]],
            out_base=f"{deployed.job_dir}/s{s}", local=local_dir / f"s{s}",
        )
        for s, inputs in enumerate(deployed.inputs)
    ]  # fmt: skip
    runs = run_samples(
        device, bundle, program, job, each,
        runner=deployed.runner, pte=deployed.pte, data=deployed.data, cwd=deployed.job_dir,
        iterations=job.iterations, warmup=job.warmup, profile=job.profile,
    )  # fmt: skip
    first = runs[0].report
    return Executed(
        outputs=tuple(run.outputs for run in runs),
        load_ms=first.load_ms,
        iterations_ms=tuple(first.iterations_ms),
        peak_rss_bytes=first.peak_rss_bytes,
        runner_version=first.runner_version,
        # One log per runner call: the samples of one call share it.
        logs=tuple(dict.fromkeys(run.log for run in runs)),
        etdump=runs[0].etdump,
        memory=first.memory,
    )


def run_samples(
    device: Device,
    bundle: RunnerBundle,
    program: Program,
    job: RunJob,
    samples: Sequence[Sample],
    *,
    runner: str,
    pte: str,
    cwd: str,
    data: str | None = None,
    iterations: int = 1,
    warmup: int = 0,
    profile: bool = False,
) -> list[SampleRun]:
    """`samples` through the runner on files already on the device, their outputs
    pulled back. The first gets `warmup` and `iterations` (and the ETDump), every
    other one execution. Our runner takes several per call, upstream's one."""
    runs: list[SampleRun] = []
    for n, group in enumerate(_calls(samples, bundle, runner, pte)):
        first = n == 0
        runs += _run_call(
            device, bundle, program, job, group, runner=runner, pte=pte, cwd=cwd, data=data,
            iterations=iterations if first else 1, warmup=warmup if first else 0,
            # The timed sample's call also measures memory: its phases are the run's.
            profile=profile and first, memory=first,
        )  # fmt: skip
    return runs


def call_deadline_s(job: RunJob, executions: int) -> float:
    """A runner call's deadline: `--deadline` covers the timed sample's warm-ups and
    executions; a call that runs more executions (other samples after it) gets
    proportionally more, one that runs fewer no less."""
    return job.deadline_s * max(1.0, executions / (job.warmup + job.iterations))


def _invocation(
    bundle: RunnerBundle,
    program: Program,
    job: RunJob,
    group: Sequence[Sample],
    *,
    pte: str,
    data: str | None,
    iterations: int,
    warmup: int,
    profile: bool,
    memory: bool = False,
) -> contract.RunnerInvocation:
    first, rest = group[0], group[1:]
    upstream = bundle.flavor == "upstream"
    return contract.RunnerInvocation(
        model_path=pte,
        data_path=data,
        input_paths=tuple(first.inputs),
        output_base=first.files.output_base,
        num_executions=iterations,
        warmup=warmup,
        method=program.method,
        cpu_threads=job.cpu_threads,
        etdump_path=f"{first.out_base}-run.etdump" if profile else None,
        result_json_path=None if upstream else first.files.result_json_path,
        flavor=bundle.flavor,
        input_shapes=first.shapes,
        next_samples=tuple(s.files for s in rest),
        measure_memory=memory and not upstream,
    )  # fmt: skip


def _calls(
    samples: Sequence[Sample], bundle: RunnerBundle, runner: str, pte: str
) -> list[list[Sample]]:
    """`samples` split into runner calls: one each for upstream's runner; for ours,
    as many per call as fit CALL_ARGV_BUDGET (always at least one)."""
    if bundle.flavor != "etdeploy":
        return [[sample] for sample in samples]
    calls: list[list[Sample]] = []
    used = 0
    for sample in samples:
        cost = sum(len(arg) + 1 for arg in contract.next_sample_argv(sample.files))
        if not calls or used + cost > CALL_ARGV_BUDGET:
            calls.append([])
            # The call's fixed part: the runner and the program paths, the flags.
            used = len(runner) + len(pte) + 256
        calls[-1].append(sample)
        used += cost
    return calls


def _run_call(
    device: Device,
    bundle: RunnerBundle,
    program: Program,
    job: RunJob,
    group: Sequence[Sample],
    *,
    runner: str,
    pte: str,
    cwd: str,
    data: str | None,
    iterations: int,
    warmup: int,
    profile: bool,
    memory: bool = False,
) -> list[SampleRun]:
    invocation = _invocation(
        bundle, program, job, group, pte=pte, data=data,
        iterations=iterations, warmup=warmup, profile=profile,
        memory=memory,
    )  # fmt: skip
    argv = contract.runner_argv(runner, invocation)
    executions = warmup + iterations + len(group) - 1
    out = device.run(
        argv,
        deadline_s=call_deadline_s(job, executions),
        cwd=cwd,
        idle_timeout_s=job.idle_timeout_s,
    )
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
    runs = _collect(device, program, group, invocation, out, log)
    if invocation.etdump_path is not None:
        etdump = device.pull(invocation.etdump_path, Path(f"{group[0].local}-run.etdump"))
        runs[0] = dataclasses.replace(runs[0], etdump=etdump)
    return runs


def _collect(
    device: Device,
    program: Program,
    group: Sequence[Sample],
    invocation: contract.RunnerInvocation,
    out: RunOutput,
    log: str,
) -> list[SampleRun]:
    """Each sample's report and outputs, pulled back: every result document in one
    pull_files, then every output file in another (over adb, two sync sessions
    for the whole call). With upstream's runner (no result JSON), the output shapes
    are the reference's."""
    if invocation.flavor == "upstream":
        (sample,) = group
        reports = [
            contract.result_from_log(f"{out.stdout}\n{out.stderr}\n{out.device_log}", invocation)
        ]
        wanted = [
            [
                (index, program.outputs[index].dtype or "", list(sample.reference_shapes[k]))
                for k, index in enumerate(program.tensor_outputs)
            ]
        ]
    else:
        documents = device.pull_files(
            [(s.files.result_json_path, Path(f"{s.local}-result.json")) for s in group]
        )
        reports = [contract.parse_result_json(d.read_bytes()) for d in documents]
        wanted = [
            [(o.index, o.dtype or "", list(o.shape or ())) for o in report.tensor_outputs()]
            for report in reports
        ]
    pulled = iter(
        device.pull_files(
            [
                (
                    contract.output_files(sample.files.output_base, [index])[0],
                    Path(f"{sample.local}-out-{index}.bin"),
                )
                for sample, outputs in zip(group, wanted, strict=True)
                for index, _, _ in outputs
            ]
        )
    )
    runs = []
    for sample, report, outputs in zip(group, reports, wanted, strict=True):
        arrays = []
        for index, dtype, shape in outputs:
            try:
                arrays.append(_read_output(next(pulled), dtype, shape))
            except InputError as exc:
                # The runner wrote it: a wrong size is the runner's fault, not the user's input.
                raise RunnerError(
                    f"output {index} of sample {sample.name}: {exc.message}",
                    "the runner and the program disagree on the output; with upstream's runner "
                    "shapes come from the reference, so check that it matches the program",
                    device=device.name,
                    command=out.command,
                    log=log,
                ) from exc
        runs.append(SampleRun(tuple(arrays), report, log))
    return runs


def _read_output(path: Path, dtype: str, shape: list[int]) -> np.ndarray:
    from etdeploy.inputs import read_raw

    return read_raw(path, dtype, shape)


def shapes_if_dynamic(
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
