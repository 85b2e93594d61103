"""generate: a causal language model's prompts through our runner on a device
(etdeploy.runner.generation holds the runner's side of the contract).

What the LLM pipeline calls, in order, on any device kind (local, ADB, SSH, an
arm64 host or phone):

    target = deploy.target_for(job, device, say)          # the runner that fits
    check_generation(device, target.bundle, pte)          # preflight, before any push
    generated = generate_on_device(target, pte, requests, settings, job_id, local_dir)
    generated.calls, generated.deployed                   # each prompt's call; the push

`generate_on_device` holds the device (its lock; the job's directory journaled
and swept as `run` does), pushes the runner, the program and every prompt's ids
(each under a content-addressed name, so a second run sends nothing it sent
before), runs one runner call per prompt under the deadline, pulls each call's
outputs and removes them from the device as soon as they are read, and removes
the job's directory after (unless `keep`). What comes back is checked against
what was asked (etdeploy.runner.generation.read_generation).

Tokenization stays on the host: only ids cross (see the contract's docstring).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from etdeploy.devices.base import Device, ProgressCallback, Push, job_dir
from etdeploy.devices.workdir import held_for_job
from etdeploy.digests import file_sha256
from etdeploy.errors import RunnerError
from etdeploy.pipeline.deploy import Target, staged_input_file
from etdeploy.pipeline.execute import check_runner_output, clip_log
from etdeploy.pipeline.job import StatusCallback
from etdeploy.preflight import PreflightReport, describe_runner, preflight, remote_runner_dir
from etdeploy.preflight.compare import PreflightError
from etdeploy.runner.generation import (
    GENERATE_CAPABILITY,
    TOKEN_DTYPE,
    GenerationFiles,
    GenerationRequest,
    GenerationResult,
    generation_argv,
    generation_invocation,
    read_generation,
)
from etdeploy.runner_build import RunnerBundle


@dataclass(frozen=True)
class GenerationSettings:
    """How each prompt's runner call runs."""

    method: str = "forward"
    # None: the runner's default (one thread per performant core).
    cpu_threads: int | None = None
    # Each call's deadline, from its start (a prompt's load, prefill, decode and
    # teacher forcing); the call is killed when it passes.
    deadline_s: float = 600.0
    # Killed after this long without a word on stdout or stderr; None: never.
    idle_timeout_s: float | None = None
    # Hash what is on the device instead of trusting its digest records.
    verify_remote: bool = False
    # Leave the job's directory on the device (for a look at it).
    keep: bool = False


@dataclass(frozen=True)
class GeneratorOnDevice:
    """The runner, the program and the prompts' ids on the device."""

    runner: str
    pte: str
    data: str | None
    token_ids: tuple[str, ...]  # per request
    job_dir: str
    bytes_sent: int
    seconds: float
    # Files sent, and files the device held already (matched by their sha256).
    files_sent: int = 0
    files_skipped: int = 0


@dataclass(frozen=True)
class Generated:
    """One prompt through the runner: what was asked, what came back, the log."""

    request: GenerationRequest
    result: GenerationResult
    log: str
    # The call as the host saw it (transport included).
    elapsed_s: float


@dataclass(frozen=True)
class DeviceGeneration:
    """Every request's call, and what deploying them cost (the run's deploy figures)."""

    calls: tuple[Generated, ...]
    deployed: GeneratorOnDevice

    @property
    def results(self) -> tuple[GenerationResult, ...]:
        return tuple(call.result for call in self.calls)


def check_generation(
    device: Device,
    bundle: RunnerBundle,
    pte: Path,
    *,
    status: StatusCallback | None = None,
    verify: bool = False,
    sha256: str | None = None,
) -> PreflightReport:
    """Preflight for generation, before anything of the program is pushed: the
    program's operators and delegates against the runner's registries (a program
    using ExecuTorch's LLM custom ops is refused here, with how to get them), and a
    runner that can generate at all (one that predates --generate, or upstream's
    executor_runner, is refused with a hint). PreflightError (exit 2) either way."""
    report = preflight(device, bundle, pte, status=status, verify=verify, sha256=sha256)
    description = describe_runner(device, bundle, status=status, verify=verify).description
    if description is None or not description.can(GENERATE_CAPABILITY):
        which = "upstream's executor_runner" if bundle.flavor != "etdeploy" else "this runner"
        raise PreflightError(
            f"{which} cannot generate (its --describe lists no {GENERATE_CAPABILITY!r})",
            "use etdeploy's runner (drop --runner), rebuilt if it is old: "
            "etdeploy runner build --rebuild",
            report=report,
        )
    return report


def deploy_generator(
    target: Target,
    pte: Path,
    requests: Sequence[GenerationRequest],
    job_id: str,
    *,
    data: Path | None = None,
    progress: ProgressCallback | None = None,
    verify: bool = False,
) -> GeneratorOnDevice:
    """The runner bundle, the program (and its .ptd) and each request's ids file,
    pushed in one exchange unless the device holds the same bytes already."""
    started = time.perf_counter()
    device, bundle = target.device, target.bundle
    base = device.workdir.rstrip("/")
    runners = remote_runner_dir(device, bundle)
    files = [
        Push(path, f"{runners}/{path.name}", 0o755 if path.name == bundle.executable else 0o644)
        for path in bundle.files
    ]
    remote_pte = f"{base}/programs/{file_sha256(pte)[:24]}.pte"
    files.append(Push(pte, remote_pte))
    remote_data = None
    if data is not None:
        remote_data = f"{base}/programs/{file_sha256(data)[:24]}.ptd"
        files.append(Push(data, remote_data))
    ids_files = [
        staged_input_file(np.asarray(request.token_ids, dtype=TOKEN_DTYPE)) for request in requests
    ]
    remote_ids = tuple(f"{base}/inputs/{path.name}" for path in ids_files)
    files += [
        Push(path, remote) for path, remote in dict(zip(ids_files, remote_ids, strict=True)).items()
    ]
    jdir = job_dir(device, job_id)
    pushes = device.push_many(files, directories=(jdir,), progress=progress, verify=verify)
    return GeneratorOnDevice(
        runner=f"{runners}/{bundle.executable}",
        pte=remote_pte,
        data=remote_data,
        token_ids=remote_ids,
        job_dir=jdir,
        bytes_sent=sum(p.bytes_sent for p in pushes),
        seconds=time.perf_counter() - started,
        files_sent=sum(not p.skipped for p in pushes),
        files_skipped=sum(p.skipped for p in pushes),
    )


def generate(
    target: Target,
    deployed: GeneratorOnDevice,
    requests: Sequence[GenerationRequest],
    settings: GenerationSettings,
    local_dir: Path,
) -> tuple[Generated, ...]:
    """One runner call per request, in order; each call's outputs pulled into
    `local_dir`, read, then removed there and on the device. A call that fails,
    crashes or passes its deadline raises its RunnerFailure (exit 3)."""
    if len(requests) != len(deployed.token_ids):
        raise ValueError("deployed for another number of requests")
    return tuple(
        _one_call(target, deployed, index, request, settings, local_dir)
        for index, request in enumerate(requests)
    )


def _one_call(
    target: Target,
    deployed: GeneratorOnDevice,
    index: int,
    request: GenerationRequest,
    settings: GenerationSettings,
    local_dir: Path,
) -> Generated:
    device = target.device
    files = GenerationFiles.under(
        f"{deployed.job_dir}/g{index}", deployed.token_ids[index],
        teacher_forced=request.teacher_forced,
    )  # fmt: skip
    invocation = generation_invocation(
        deployed.pte, request, files, method=settings.method, data_path=deployed.data,
        cpu_threads=settings.cpu_threads,
    )  # fmt: skip
    out = device.run(
        generation_argv(deployed.runner, invocation),
        deadline_s=settings.deadline_s,
        cwd=deployed.job_dir,
        idle_timeout_s=settings.idle_timeout_s,
        device_log=False,  # our runner writes everything to stdout and stderr
    )
    check_runner_output(out, device.name, settings.idle_timeout_s)
    log = clip_log("\n".join(p for p in (f"$ {out.command}", out.stdout, out.stderr) if p))
    remotes = files.outputs()
    locals_ = [local_dir / f"g{index}-{Path(remote).name}" for remote in remotes]
    try:
        device.pull_files(list(zip(remotes, locals_, strict=True)))
        device.remove(*remotes)
        by_remote = dict(zip(remotes, locals_, strict=True))
        result = read_generation(
            request,
            by_remote[files.result_json],
            by_remote[files.generated],
            by_remote[files.logits] if files.logits is not None else None,
        )
    except RunnerError as exc:
        raise RunnerError(
            exc.message, exc.hint, device=device.name, command=out.command, log=log
        ) from exc
    finally:
        for path in locals_:
            path.unlink(missing_ok=True)
    return Generated(request, result, log, out.elapsed_s)


def generate_on_device(
    target: Target,
    pte: Path,
    requests: Sequence[GenerationRequest],
    settings: GenerationSettings,
    job_id: str,
    local_dir: Path,
    *,
    data: Path | None = None,
    progress: ProgressCallback | None = None,
    status: StatusCallback | None = None,
) -> DeviceGeneration:
    """Deploy and generate while holding the device: the directories of runs that
    could not remove theirs go first, the job's own goes after (unless `keep`)."""
    say = status or (lambda _text: None)
    device = target.device
    say(f"waiting for {target.info.name}")
    with held_for_job(device, job_id, keep=settings.keep):
        say(f"deploying to {target.info.name}")
        deployed = deploy_generator(
            target, pte, requests, job_id, data=data, progress=progress,
            verify=settings.verify_remote,
        )  # fmt: skip
        say(f"generating on {target.info.name}")
        return DeviceGeneration(generate(target, deployed, requests, settings, local_dir), deployed)
