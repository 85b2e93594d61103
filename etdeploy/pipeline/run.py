"""run: the stages composed, and the RunResult they add up to.

    resolve -> build -> stage -> deploy -> execute -> verify -> report
    (job.py)  (build)   (stage,   (deploy)  (execute)  (verify)  (the RunResult
                         refer-                                   every report
                         ences)                                   renders)

Bad input and infrastructure failures raise an EtdeployError; a numeric
mismatch does not (it is a result with status "failed"). `error_result` turns
a raised error into the result a report shows, so a farm can tell a broken
phone from a broken model.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import etdeploy
from etdeploy.ahead import Ahead
from etdeploy.atomic import write_json
from etdeploy.bundle.job_bundle import JobBundle, open_bundle, prepare
from etdeploy.devices.base import Device
from etdeploy.devices.workdir import held_for_job
from etdeploy.errors import (
    EXIT_CHECK_FAILED,
    EXIT_OK,
    EtdeployError,
    InfraError,
    Interruption,
    UsageError,
)
from etdeploy.interrupts import signal_name
from etdeploy.memory.limit import JudgedMemory, judge_memory
from etdeploy.model.loader import CausalLmReturned
from etdeploy.pipeline.build import build_program
from etdeploy.pipeline.deploy import Deployed, Target, deploy, target_for
from etdeploy.pipeline.execute import (
    Executed,
    clip_log,
    execute,
    keep_etdump,
    latency_of,
    memory_of,
    profile_of,
    throughput_of,
)
from etdeploy.pipeline.job import RunContext, RunJob, StatusCallback, new_job_id
from etdeploy.pipeline.llm.bundle import run_lm_bundle
from etdeploy.pipeline.llm.factory import language_model_folder, save_factory_lm
from etdeploy.pipeline.llm.run import run_lm_job
from etdeploy.pipeline.localize import check_localizable, localize_or_warning
from etdeploy.pipeline.plan import RunPlan, lm_request_of, plan_of
from etdeploy.pipeline.references import host_runtime_outputs
from etdeploy.pipeline.shapes import check_points, run_points
from etdeploy.pipeline.stage import stage
from etdeploy.pipeline.task import check_task
from etdeploy.pipeline.verify import Judged, judge, size_verdict
from etdeploy.preflight import PreflightReport, preflight
from etdeploy.program import Program
from etdeploy.quarantine import noticed_damage
from etdeploy.results.result import (
    Artifact,
    DeployStats,
    DeviceLock,
    DeviceSummary,
    ErrorInfo,
    InputsInfo,
    JobInfo,
    Preflight,
    Profile,
    RunResult,
    ShapePoint,
)
from etdeploy.runner_build import RunnerBundle
from etdeploy.scratch import scratch_dir
from etdeploy.staged import Staged

if TYPE_CHECKING:
    import numpy as np

    from etdeploy.results.result import Localization


@dataclass(frozen=True)
class Stages:
    """What each stage of one run returned: all a RunResult is made of."""

    job: RunJob
    job_id: str
    started: float
    program: Program
    staged: Staged
    target: Target
    checked: PreflightReport
    deployed: Deployed
    executed: Executed
    judged: Judged
    lock: DeviceLock
    etdump: Path | None = None
    profile: Profile | None = None
    localization: Localization | None = None
    warnings: tuple[str, ...] = ()


def run_job(
    job: RunJob, device: Device, context: RunContext | None = None, *, job_id: str | None = None
) -> RunResult:
    """The whole loop for one job on one device. What the cache checks found on the
    way (etdeploy.quarantine: an entry moved aside and made again) is among the
    result's warnings."""
    with noticed_damage() as damage:
        result = _run_job(job, device, context, job_id=job_id)
    return replace(result, warnings=(*result.warnings, *damage)) if damage else result


def _run_job(
    job: RunJob, device: Device, context: RunContext | None = None, *, job_id: str | None = None
) -> RunResult:
    """The road is decided here, once, and each road takes its own record of the job: a
    job bundle of a language model (opened and checked whole) or of a program, a
    language-model folder (MODEL, or a factory's causal LM saved by an earlier run), or
    a program (built, or --pte; a program's bundle read while the device is asked what
    it is)."""
    context = context or RunContext()
    job_id = job_id or new_job_id()
    if job.bundle is not None:  # no torch: the bundle's, opened and checked once
        bundle = open_bundle(job.bundle)
        if bundle.manifest.language_model is not None:
            return run_lm_bundle(bundle, lm_request_of(job), device, context, job_id)
        return _run_program(job, device, context, job_id, bundle)
    lm_folder = _language_model_folder(job.model, job.use_cache)
    if lm_folder is not None:
        return run_lm_job(lm_request_of(job), device, context, job_id, lm_folder)
    return _run_program(job, device, context, job_id, None)


def _run_program(
    job: RunJob, device: Device, context: RunContext, job_id: str, bundle: JobBundle | None
) -> RunResult:
    """A program's road: built (or given, or read from a bundle), staged, run on the
    device, and judged once."""
    say = context.status or (lambda _text: None)
    started = time.time()
    plan = plan_of(job)
    # What the device is (a round trip or two; over SSH the connection too) is asked
    # while the program and samples are read here; target_for then has it.
    asked = Ahead(device.info)
    try:
        program, staged, host_outputs, carried = _prepared(bundle, job.label, plan, say)
    except CausalLmReturned as returned:  # the factory made a causal LM: saved, its road
        folder = save_factory_lm(returned.ref, returned.spec)
        return run_lm_job(lm_request_of(job), device, context, job_id, folder)
    target = target_for(
        plan.runner, device, say, carried, context.device_runner, info=asked.result()
    )
    say(f"checking that the runner for {target.info.name} can run the program")
    # --verify-remote: hash what the device holds instead of trusting its records.
    checked = preflight(
        device, target.bundle, program.pte, program.manifest, status=say,
        verify=plan.verify_remote, sha256=program.sha256,
    )  # fmt: skip
    # The size verdict needs nothing the device returns: worked out while it runs.
    size = Ahead(size_verdict, program, context.size_config)
    deployed, executed, points, lock, etdump = _on_device(
        plan, job_id, target, program, staged, context
    )
    profile, profile_warnings = None, ()
    if etdump is not None:
        say("reading the profile")
        try:
            profile = profile_of(etdump, program)
        except EtdeployError as exc:
            # The run itself succeeded: keep its verdict, say why there is no profile.
            profile_warnings = (f"no profile: {exc.message}",)
    # The one verdict of the run: outputs, task, size and memory together.
    judged = judge(
        plan.verify, program, staged, executed.outputs, host_outputs=host_outputs,
        size_config=context.size_config, job_id=job_id, size=size.result(),
        memory=judge_memory(memory_of(program, executed), points, plan.memory_limit),
    )  # fmt: skip
    localization, localize_warnings = None, ()
    if plan.localize is not None:
        say("localizing: where the device departs from eager")
        localization, localize_warnings = localize_or_warning(
            plan.localize, target, program, staged, judged, executed.outputs,
            job_id=job_id, say=say, progress=context.progress,
        )  # fmt: skip
    warnings = (
        *program.warnings, *staged.warnings, *checked.warnings, *profile_warnings,
        *localize_warnings, *judged.warnings,
    )  # fmt: skip
    return result_of(
        Stages(
            job, job_id, started, program, staged, target, checked, deployed, executed, judged,
            lock, etdump, profile, localization, warnings,
        )
    )  # fmt: skip


def _language_model_folder(model: str | None, use_cache: bool) -> Path | None:
    """The causal-LM folder a run takes the language-model road with (MODEL, or where a
    factory's causal LM was saved), or None."""
    return language_model_folder(model, use_cache=use_cache)


def _prepared(
    bundle: JobBundle | None, label: str, plan: RunPlan, say: StatusCallback
) -> tuple[Program, Staged, Sequence[Sequence[np.ndarray]] | None, tuple[RunnerBundle, ...]]:
    """build and stage: the program, the samples and their references (and the host
    runtime's outputs with --host-check), built and computed here, or read from a job
    bundle with the runners it carries (etdeploy.bundle: no torch)."""
    if bundle is not None:
        say(f"reading the job bundle {bundle.path}")
        ready = prepare(bundle)
        return ready.program, ready.staged, ready.host_outputs, ready.runners
    say(f"building {label}")
    program = build_program(plan.build, say)
    if plan.localize is not None:
        check_localizable(plan.localize, program)  # bad input fails before anything runs
    say("staging inputs and the reference")
    staged = stage(plan.stage, program)
    check_task(plan.verify.gate, plan.verify.labels, program, staged)
    if plan.shapes is not None:
        # Points outside the dynamic range: before anything runs.
        check_points(plan.shapes.points, program)
    host_outputs = (
        host_runtime_outputs(program.pte, program.method, staged.samples, program.data_path)
        if plan.host_check
        else None
    )
    return program, staged, host_outputs, ()


def _on_device(
    plan: RunPlan,
    job_id: str,
    target: Target,
    program: Program,
    staged: Staged,
    context: RunContext,
) -> tuple[Deployed, Executed, tuple[ShapePoint, ...], DeviceLock, Path | None]:
    """Deploy and execute (and run --shapes' points) while holding the device; the job's
    directory goes after (unless --keep), and the directories of runs that could not
    remove theirs go first."""
    info, device, say = target.info, target.device, context.status or (lambda _text: None)
    say(f"waiting for {info.name}")
    waited_from = time.time()
    with held_for_job(device, job_id, keep=plan.keep), scratch_dir("run") as tmp:
        held_from = time.time()
        say(f"deploying to {info.name}")
        deployed = deploy(
            target, program, staged, job_id, context.progress, verify=plan.verify_remote
        )
        say(f"running on {info.name}")
        # Outputs may be views of a mapped file in `tmp`: a mapping outlives the
        # file's removal (POSIX), so they are read as compared, never copied.
        executed = execute(target, deployed, program, staged, plan.execute, Path(tmp))
        points: tuple[ShapePoint, ...] = ()
        if plan.shapes is not None:  # --shapes: the program at points of its range
            points = run_points(
                plan.shapes, target, program, staged, job_id=job_id, local_dir=Path(tmp),
                say=say, progress=context.progress,
            )  # fmt: skip
        etdump = keep_etdump(executed.etdump, job_id) if executed.etdump else None
    lock = DeviceLock(round(held_from - waited_from, 3), held_from, time.time())
    return deployed, executed, points, lock, etdump


def result_of(stages: Stages) -> RunResult:
    """The RunResult of a run that reached a verdict."""
    job, program, judged, executed = stages.job, stages.program, stages.judged, stages.executed
    deployed = stages.deployed
    memory = judged.memory or JudgedMemory(memory_of(program, executed))
    return RunResult(
        etdeploy=etdeploy.__version__,
        status="passed" if judged.passed else "failed",
        exit_code=EXIT_OK if judged.passed else EXIT_CHECK_FAILED,
        job=JobInfo(
            id=stages.job_id, model=job.model, backend=program.backend or job.backend,
            quantization=program.quantization, method=program.method,
            iterations=job.iterations, warmup=job.warmup,
        ),
        device=stages.target.device_summary(),
        artifact=Artifact(
            pte=str(program.pte), sha256=program.sha256, size_bytes=program.size_bytes,
            backend=program.backend, quantization=program.quantization,
            delegation=program.delegation, built_with=program.built_with,
            data=program.data_record,
        ),
        runner=stages.target.runner_info(executed.runner_version),
        inputs=InputsInfo(
            names=tuple(value.name for value in program.inputs),
            samples=stages.staged.sample_names, on_noise=stages.staged.on_noise,
            reference=stages.staged.reference_kind,
        ),
        device_lock=stages.lock,
        preflight=Preflight.from_json(stages.checked.to_json()),
        deploy=DeployStats(
            bytes_sent=deployed.bytes_sent, files_sent=deployed.files_sent,
            files_skipped=deployed.files_skipped, seconds=round(deployed.seconds, 3),
        ),
        latency_ms=latency_of(executed.load_ms, executed.iterations_ms, executed.iterations_cpu_ms),
        throughput=throughput_of(executed.sample_ms),
        memory=memory.memory,
        shapes=memory.points or None,
        verdict=judged.verdict,
        accuracy=judged.accuracy,
        host_check=judged.host_check,
        size=judged.size,
        etdump=str(stages.etdump) if stages.etdump else None,
        profile=stages.profile,
        localization=stages.localization,
        warnings=stages.warnings,
        started_at=_timestamp(stages.started),
        seconds=round(time.time() - stages.started, 3),
        logs=executed.logs,
    )  # fmt: skip


def error_result(
    job: RunJob, device_name: str, exc: EtdeployError, started: float, job_id: str | None = None
) -> RunResult:
    """The result of a run that raised: status "error", the error kept whole
    (kind, device, command, log) so a report can tell a broken phone from a
    broken model."""
    return RunResult(
        etdeploy=etdeploy.__version__,
        status="error",
        exit_code=exc.exit_code,
        job=JobInfo(
            id=job_id,
            model=job.model,
            backend=job.backend,
            quantization=job.quantize,
            iterations=job.iterations,
            warmup=job.warmup,
        ),
        device=DeviceSummary(name=device_name),
        error=ErrorInfo(
            kind=type(exc).__name__,
            message=str(exc),
            hint=exc.hint,
            infrastructure=isinstance(exc, InfraError),
            retryable=bool(getattr(exc, "retryable", False)),
            device=getattr(exc, "device", None),
            command=getattr(exc, "command", None),
        ),
        started_at=_timestamp(started),
        seconds=round(time.time() - started, 3),
        logs=(clip_log(exc.log),) if exc.log else (),
    )


def as_error(exc: BaseException) -> EtdeployError:
    """Any exception as the EtdeployError its result records."""
    if isinstance(exc, EtdeployError):
        return exc
    if isinstance(exc, KeyboardInterrupt):
        return Interruption(
            f"interrupted by {signal_name(exc)} before the run finished",
            "run it again to completion",
        )
    return InfraError(
        f"internal error: {type(exc).__name__}: {exc}",
        "rerun with --verbose and report the traceback",
    )


def write_result_json(result: RunResult, path: Path) -> None:
    """Temporary name, fsync, then rename: a killed run never leaves half a result."""
    try:
        write_json(result.to_json(), path)
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror}", "check the --json path") from None


def _timestamp(when: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(when))
