"""deploy: the runner that fits the device, then the runner, the .pte (and its
.ptd) and the inputs in the device's work dir.

Every file goes under a content-addressed name (runners/, programs/, inputs/),
so an unchanged file is never sent twice (a program whose code changed but not
its weights sends the small .pte only: the .ptd keeps its name); the job's own directory holds only
what this run writes, and is removed after it unless --keep.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from pathlib import Path

from etdeploy.devices.base import Device, DeviceInfo, ProgressCallback, PushResult, job_dir
from etdeploy.errors import EtdeployError
from etdeploy.pipeline.build import Program
from etdeploy.pipeline.job import RunJob, StatusCallback
from etdeploy.pipeline.stage import Staged, staged_input_file
from etdeploy.preflight.describe import remote_runner_dir
from etdeploy.runner_build import RunnerBundle


def runner_for(
    job: RunJob, info: DeviceInfo, say: StatusCallback, configured: Path | None = None
) -> RunnerBundle:
    """--runner, else the device's configured runner (`configured`), else the one
    etdeploy builds for it (runner_build.runner_choice: the host build, the NDK
    build, or the self-contained arm64 bundle). A runner built for another ABI is
    refused here, before anything is pushed."""
    from etdeploy.devices.registry import check_runner_abi
    from etdeploy.runner_build import runner_for_device, runner_from_path

    explicit = job.runner or configured
    bundle = (
        runner_from_path(Path(explicit)) if explicit is not None else runner_for_device(info, say)
    )
    check_runner_abi(info, bundle.abi)
    return bundle


@dataclass(frozen=True)
class Deployed:
    runner: str  # the executable on the device
    pte: str
    data: str | None  # the program's external data (.ptd) on the device, if it has one
    inputs: tuple[tuple[str, ...], ...]  # per sample, per method input
    job_dir: str
    bytes_sent: int
    files_sent: int
    files_skipped: int
    seconds: float


def deploy(
    device: Device,
    bundle: RunnerBundle,
    program: Program,
    staged: Staged,
    job_id: str,
    progress: ProgressCallback | None = None,
    *,
    verify: bool = False,
) -> Deployed:
    """The runner bundle, the .pte and the inputs, each pushed unless the device
    already holds the same bytes under that name (by its digest record, or with
    `verify` by hashing it there: --verify-remote)."""
    started = time.perf_counter()
    base = device.workdir.rstrip("/")
    runners = remote_runner_dir(device, bundle)  # where preflight may have put it already
    inputs_dir = f"{base}/inputs"
    jdir = job_dir(device, job_id)
    for directory in (runners, f"{base}/programs", inputs_dir, jdir):
        device.makedirs(directory)
    pushes: list[PushResult] = []
    for path in bundle.files:
        mode = 0o755 if path.name == bundle.executable else 0o644
        pushes.append(
            device.push(path, f"{runners}/{path.name}", progress=progress, mode=mode, verify=verify)
        )
    remote_pte = f"{base}/programs/{program.sha256[:24]}.pte"
    pushes.append(device.push(program.pte, remote_pte, progress=progress, verify=verify))
    remote_data = None
    if program.data is not None:
        remote_data = f"{base}/programs/{program.data.sha256[:24]}.ptd"
        pushes.append(device.push(program.data.path, remote_data, progress=progress, verify=verify))
    remote_inputs: list[tuple[str, ...]] = []
    for sample in staged.samples:
        row = []
        for array in sample:
            local = staged_input_file(array)
            remote = f"{inputs_dir}/{local.name}"
            pushes.append(device.push(local, remote, progress=progress, verify=verify))
            row.append(remote)
        remote_inputs.append(tuple(row))
    return Deployed(
        runner=f"{runners}/{bundle.executable}",
        pte=remote_pte,
        data=remote_data,
        inputs=tuple(remote_inputs),
        job_dir=jdir,
        bytes_sent=sum(p.bytes_sent for p in pushes),
        files_sent=sum(not p.skipped for p in pushes),
        files_skipped=sum(p.skipped for p in pushes),
        seconds=time.perf_counter() - started,
    )


def remove_quietly(device: Device, path: str) -> None:
    # Cleanup must not hide the error that got us here; a failed removal is
    # visible on the next run as a stale dir, which the next job does not read.
    with contextlib.suppress(EtdeployError):
        device.remove(path, recursive=True)
