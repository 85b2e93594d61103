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

import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

from etdeploy.config import Config
from etdeploy.devices.base import Device, DeviceInfo, ProgressCallback
from etdeploy.devices.lock import device_lock
from etdeploy.devices.workdir import JobDirs
from etdeploy.errors import (
    EXIT_CHECK_FAILED,
    EXIT_OK,
    EtdeployError,
    InfraError,
    Interruption,
    UsageError,
)
from etdeploy.pipeline.build import Program, build_program
from etdeploy.pipeline.deploy import Deployed, deploy, runner_for
from etdeploy.pipeline.execute import (
    Executed,
    clip_log,
    execute,
    keep_etdump,
    latency_of,
    profile_of,
)
from etdeploy.pipeline.job import RunJob, StatusCallback, new_job_id
from etdeploy.pipeline.references import host_runtime_outputs
from etdeploy.pipeline.stage import Staged, stage
from etdeploy.pipeline.verify import Judged, judge
from etdeploy.preflight import PreflightReport, preflight
from etdeploy.quarantine import noticed_damage
from etdeploy.report.result import (
    Artifact,
    DeployStats,
    DeviceLock,
    DeviceSummary,
    ErrorInfo,
    InputsInfo,
    JobInfo,
    Memory,
    Preflight,
    Profile,
    RunnerInfo,
    RunResult,
)
from etdeploy.runner_build import RunnerBundle


@dataclass(frozen=True)
class RunContext:
    """What the CLI or farm hands the pipeline besides the job."""

    status: StatusCallback | None = None
    progress: ProgressCallback | None = None  # for transfers
    size_config: Config | None = None  # etdeploy.toml for the size verdict
    # The runner the device's [devices.NAME] table names (registry.configured_runner),
    # used unless the job names one (--runner).
    device_runner: Path | None = None


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
    context = context or RunContext()
    say = context.status or (lambda _text: None)
    started = time.time()
    job_id = job_id or new_job_id()

    say(f"building {job.label}")
    program = build_program(job, say)
    if job.localize:
        from etdeploy.pipeline.localize import check_localizable

        check_localizable(job, program)  # bad input fails before anything runs
    say("staging inputs and the reference")
    staged = stage(job, program)
    host_outputs = (
        host_runtime_outputs(program.pte, program.method, staged.samples, program.data_path)
        if job.host_check
        else None
    )
    info = device.info()
    say(f"preparing the runner for {info.name} ({info.os} {info.abi})")
    bundle = runner_for(job, info, say, context.device_runner)
    say(f"checking that the runner for {info.name} can run the program")
    checked = preflight(
        device, bundle, program.pte, program.manifest, status=say, verify=job.verify_remote
    )

    say(f"waiting for {info.name}")
    waited_from = time.time()
    with device_lock(device), tempfile.TemporaryDirectory(prefix="etdeploy-run-") as tmp:
        held_from = time.time()
        # Job directories earlier runs here could not remove (a dropped connection,
        # a killed run) go now; this one's is noted before it exists.
        jobs = JobDirs(device)
        jobs.sweep(but=job_id)
        jobs.begin(job_id)
        try:
            say(f"deploying to {info.name}")
            deployed = deploy(
                device, bundle, program, staged, job_id, context.progress, verify=job.verify_remote
            )
            say(f"running on {info.name}")
            executed = execute(
                device, bundle, deployed, program, staged.sample_names, staged.samples,
                staged.references, job, Path(tmp),
            )  # fmt: skip
        finally:
            jobs.end(job_id, keep=job.keep)
        etdump = keep_etdump(executed.etdump, job_id) if executed.etdump else None
        lock = DeviceLock(round(held_from - waited_from, 3), held_from, time.time())

    profile, profile_warnings = None, ()
    if etdump is not None:
        say("reading the profile")
        try:
            profile = profile_of(etdump, program)
        except EtdeployError as exc:
            # The run itself succeeded: keep its verdict, say why there is no profile.
            profile_warnings = (f"no profile: {exc.message}",)

    judged = judge(job, program, staged, executed.outputs, host_outputs, context.size_config)
    localization, localize_warnings = None, ()
    if job.localize:
        from etdeploy.pipeline.localize import localize_or_warning

        say("localizing: where the device departs from eager")
        localization, localize_warnings = localize_or_warning(
            job, device, bundle, program, staged, judged, executed.outputs,
            job_id=job_id, say=say, progress=context.progress,
        )  # fmt: skip
    warnings = (
        *program.warnings, *staged.warnings, *checked.warnings, *profile_warnings,
        *localize_warnings,
    )  # fmt: skip
    result = _result(
        job, job_id, info, program, staged, bundle, checked, deployed, executed, judged, lock,
        etdump, profile, warnings, started,
    )  # fmt: skip
    return replace(result, localization=localization)


def _result(
    job: RunJob,
    job_id: str,
    info: DeviceInfo,
    program: Program,
    staged: Staged,
    bundle: RunnerBundle,
    checked: PreflightReport,
    deployed: Deployed,
    executed: Executed,
    judged: Judged,
    lock: DeviceLock,
    etdump: Path | None,
    profile: Profile | None,
    warnings: tuple[str, ...],
    started: float,
) -> RunResult:
    import etdeploy

    return RunResult(
        etdeploy=etdeploy.__version__,
        status="passed" if judged.passed else "failed",
        exit_code=EXIT_OK if judged.passed else EXIT_CHECK_FAILED,
        job=JobInfo(
            id=job_id,
            model=job.model,
            backend=program.backend or job.backend,
            quantization=program.quantization,
            method=program.method,
            iterations=job.iterations,
            warmup=job.warmup,
        ),
        device=DeviceSummary(
            name=info.name,
            transport=info.transport,
            serial=info.serial,
            os=info.os,
            os_version=info.os_version,
            abi=info.abi,
            model=info.model,
            soc=info.soc,
        ),
        artifact=Artifact(
            pte=str(program.pte),
            sha256=program.sha256,
            size_bytes=program.size_bytes,
            backend=program.backend,
            quantization=program.quantization,
            delegation=program.delegation,
            built_with=program.built_with,
            data=program.data_record,
        ),
        runner=RunnerInfo(
            flavor=bundle.flavor,
            abi=bundle.abi,
            kind=bundle.kind,
            version=executed.runner_version,
            path=str(bundle.executable_path),
        ),
        inputs=InputsInfo(
            names=tuple(value.name for value in program.inputs),
            samples=staged.sample_names,
            on_noise=staged.on_noise,
            reference=staged.reference_kind,
        ),
        device_lock=lock,
        preflight=Preflight.from_json(checked.to_json()),
        deploy=DeployStats(
            bytes_sent=deployed.bytes_sent,
            files_sent=deployed.files_sent,
            files_skipped=deployed.files_skipped,
            seconds=round(deployed.seconds, 3),
        ),
        latency_ms=latency_of(executed.load_ms, executed.iterations_ms),
        memory=Memory(planned_bytes=program.planned_bytes, peak_rss_bytes=executed.peak_rss_bytes),
        verdict=judged.verdict,
        host_check=judged.host_check,
        size=judged.size,
        etdump=str(etdump) if etdump else None,
        profile=profile,
        warnings=(*warnings, *judged.warnings),
        started_at=_timestamp(started),
        seconds=round(time.time() - started, 3),
        logs=executed.logs,
    )


def error_result(
    job: RunJob, device_name: str, exc: EtdeployError, started: float, job_id: str | None = None
) -> RunResult:
    """The result of a run that raised: status "error", the error kept whole
    (kind, device, command, log) so a report can tell a broken phone from a
    broken model."""
    import etdeploy

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
        from etdeploy.interrupts import signal_name

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
    from etdeploy.atomic import write_json

    try:
        write_json(result.to_json(), path)
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror}", "check the --json path") from None


def _timestamp(when: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(when))
