"""deploy: the runner that fits the device, then the runner, the .pte (and its
.ptd) and the inputs in the device's work dir.

Every file goes under a content-addressed name (runners/, programs/, inputs/),
so an unchanged file is never sent twice (a program whose code changed but not
its weights sends the small .pte only: the .ptd keeps its name); the job's own
directory holds only what this run writes, and is removed after it unless --keep.
Every file is pushed in one Device.push_many, which makes the job's directory too:
on a warm run that is one round trip to the device.

The samples' inputs travel as one packed file for our runner (each sample's
inputs a byte range of it: one push and one digest check for a thousand samples),
with the list of the samples after the call's first (its --samples_file, named by
its content as well: it names the inputs relative to the job's directory, so it is
the same file for every job), and as a file per input for upstream's runner, which
reads whole files.
"""

from __future__ import annotations

import hashlib
import os
import posixpath
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from etdeploy import runner as contract
from etdeploy.devices.base import Device, DeviceInfo, ProgressCallback, Push, job_dir
from etdeploy.devices.registry import check_runner_abi
from etdeploy.errors import UsageError
from etdeploy.inputs import raw_bytes
from etdeploy.paths import cache_dir
from etdeploy.pipeline.job import StatusCallback
from etdeploy.preflight.describe_runner import remote_runner_dir
from etdeploy.program import Program
from etdeploy.quarantine import file_damage, quarantine
from etdeploy.results.result import DeviceSummary, RunnerInfo
from etdeploy.runner_build import KIND_HOST, runner_choice, runner_for_device, runner_from_path
from etdeploy.staged import Staged

if TYPE_CHECKING:
    from etdeploy.runner_build import RunnerBundle


@dataclass(frozen=True)
class Target:
    """Where a run happens: the device, what it says it is, and the runner that fits it."""

    device: Device
    info: DeviceInfo
    bundle: RunnerBundle

    @property
    def batched(self) -> bool:
        """Our runner takes every sample of a call from files on the device (a samples
        file, packed inputs, batch outputs); upstream's one sample per call."""
        return self.bundle.flavor == "etdeploy"

    def device_summary(self) -> DeviceSummary:
        """The result's device block: what the device said it is."""
        info = self.info
        return DeviceSummary(
            name=info.name, transport=info.transport, serial=info.serial, os=info.os,
            os_version=info.os_version, abi=info.abi, model=info.model, soc=info.soc,
        )  # fmt: skip

    def runner_info(self, version: str | None) -> RunnerInfo:
        """The result's runner block: the bundle that ran, and the version it reported."""
        bundle = self.bundle
        return RunnerInfo(
            flavor=bundle.flavor, abi=bundle.abi, kind=bundle.kind, version=version,
            path=str(bundle.executable_path),
        )  # fmt: skip


def target_for(
    runner: Path | None,
    device: Device,
    say: StatusCallback,
    carried: Sequence[RunnerBundle] = (),
    configured: Path | None = None,
    *,
    info: DeviceInfo | None = None,
) -> Target:
    """`runner` (--runner), else the device's configured runner, else the one a job bundle
    carries for it (`carried`: carried_runner), else the one
    etdeploy builds for it (runner_build.runner_choice: the host build, the NDK build,
    or the self-contained arm64 bundle). A runner built for another ABI is refused
    here, before anything is pushed. `info`: device.info(), when the caller has it."""
    info = info or device.info()
    say(f"preparing the runner for {info.name} ({info.os} {info.abi})")
    explicit = runner or configured
    if explicit is not None:
        bundle = runner_from_path(Path(explicit))
    elif carried:
        bundle = carried_runner(carried, info)
    else:
        bundle = runner_for_device(info, say)
    check_runner_abi(info, bundle.abi)
    return Target(device, info, bundle)


def carried_runner(runners: Sequence[RunnerBundle], info: DeviceInfo) -> RunnerBundle:
    """A job bundle's runner for the device: the kind etdeploy would build for it
    (runner_build.runner_choice) when the bundle has it, else one whose ABI the device
    runs, a self-contained bundle before a host build. A host build is what runs on
    this machine's own devices and on the loopback phone of the tests (an Android
    device that runs host programs); a real Android phone needs its own (--abi)."""
    fitting = []
    for bundle in runners:
        try:
            check_runner_abi(info, bundle.abi)
        except UsageError:
            continue
        fitting.append(bundle)
    if not fitting:
        carried = ", ".join(f"{b.abi} ({b.kind})" for b in runners) or "none"
        raise UsageError(
            f"the job bundle has no runner for {info.name} ({info.os} {info.abi}); it carries: "
            f"{carried}",
            "make the bundle with a runner for it, e.g. etdeploy bundle MODEL --abi arm64-v8a "
            "-o DIR, or give --runner PATH",
        )
    try:
        wanted = runner_choice(info).kind
    except UsageError:
        wanted = None
    fitting.sort(key=lambda b: (b.kind != wanted, b.kind == KIND_HOST))
    return fitting[0]


@dataclass(frozen=True)
class Deployed:
    runner: str  # the executable on the device
    pte: str
    data: str | None  # the program's external data (.ptd) on the device, if it has one
    # Per sample, per method input: a file on the device, or FILE@OFFSET in the packed one.
    inputs: tuple[tuple[str, ...], ...]
    job_dir: str
    # Our runner's --samples_file: the samples after the first (None: there are none,
    # or the runner is upstream's).
    samples_file: str | None

    bytes_sent: int
    files_sent: int
    files_skipped: int
    seconds: float


def deploy(
    target: Target,
    program: Program,
    staged: Staged,
    job_id: str,
    progress: ProgressCallback | None = None,
    *,
    verify: bool = False,
) -> Deployed:
    """The runner bundle, the .pte and the inputs, each pushed unless the device
    already holds the same bytes under that name (known from its digest record, or
    with `verify` by hashing it there: --verify-remote)."""
    started = time.perf_counter()
    device, bundle = target.device, target.bundle
    base = device.workdir.rstrip("/")
    runners = remote_runner_dir(device, bundle)  # where preflight may have put it already
    jdir = job_dir(device, job_id)
    files = [
        Push(path, f"{runners}/{path.name}", 0o755 if path.name == bundle.executable else 0o644)
        for path in bundle.files
    ]
    remote_pte = f"{base}/programs/{program.sha256[:24]}.pte"
    files.append(Push(program.pte, remote_pte))
    remote_data = None
    if program.data is not None:
        remote_data = f"{base}/programs/{program.data.sha256[:24]}.ptd"
        files.append(Push(program.data.path, remote_data))
    inputs, samples_file, input_files = _inputs(target, program, staged, f"{base}/inputs", jdir)
    pushes = device.push_many(
        [*files, *input_files], directories=(jdir,), progress=progress, verify=verify
    )
    return Deployed(
        runner=f"{runners}/{bundle.executable}",
        pte=remote_pte,
        data=remote_data,
        inputs=inputs,
        job_dir=jdir,
        samples_file=samples_file,
        bytes_sent=sum(p.bytes_sent for p in pushes),
        files_sent=sum(not p.skipped for p in pushes),
        files_skipped=sum(p.skipped for p in pushes),
        seconds=time.perf_counter() - started,
    )


def _inputs(
    target: Target, program: Program, staged: Staged, inputs_dir: str, jdir: str
) -> tuple[tuple[tuple[str, ...], ...], str | None, list[Push]]:
    """Where each sample's inputs will be on the device, our runner's samples file,
    and the files that put them there."""
    if not target.batched:
        # Each input its own content-addressed file (what upstream's runner reads).
        files: dict[str, Push] = {}
        rows = []
        for sample in staged.samples:
            row = []
            for array in sample:
                local = staged_input_file(array)
                remote = f"{inputs_dir}/{local.name}"
                files.setdefault(remote, Push(local, remote))
                row.append(remote)
            rows.append(tuple(row))
        return tuple(rows), None, list(files.values())
    packed, offsets = packed_inputs(staged.samples)
    remote = f"{inputs_dir}/{packed.name}"
    inputs = tuple(tuple(contract.packed_input(remote, o) for o in row) for row in offsets)
    pushes = [Push(packed, remote)]
    listing = samples_list(program, staged, inputs, jdir)
    if listing is None:
        return inputs, None, pushes
    remote_listing = f"{inputs_dir}/{listing.name}"
    return inputs, remote_listing, [*pushes, Push(listing, remote_listing)]


def samples_list(
    program: Program, staged: Staged, inputs: Sequence[tuple[str, ...]], jdir: str
) -> Path | None:
    """Our runner's samples file for the samples after the first (None: there are
    none): their inputs named relative to the job's directory, where the runner runs.
    A file's contents are never rewritten on the way (a stand-in phone's sandbox, a
    work dir reached through another mount point), relative names are shorter, and
    every job's file is the same, so it is sent once."""
    relative: dict[str, str] = {}  # the packed file's path, once for every sample

    def named(path: str) -> str:
        where, at, offset = path.rpartition("@")
        if not at or not offset.isdigit():
            where, at, offset = path, "", ""
        if where not in relative:
            relative[where] = posixpath.relpath(where, jdir)
        return f"{relative[where]}{at}{offset}"

    rest = [
        contract.SampleFiles(
            input_paths=tuple(named(i) for i in inputs[s]),
            output_base="", result_json_path="",
            input_shapes=shapes_if_dynamic(program, staged.samples[s]),
        )
        for s in range(1, len(inputs))
    ]  # fmt: skip
    if not rest:
        return None
    text = contract.samples_file_text(rest).encode()
    return _cached_input(hashlib.sha256(text).hexdigest(), [text], ".tsv")


def shapes_if_dynamic(
    program: Program, sample: tuple[np.ndarray, ...]
) -> tuple[tuple[int, ...], ...] | None:
    """The sample's shapes when any differs from the program's (a dynamic dim)."""
    shapes = tuple(array.shape for array in sample)  # numpy's shapes: tuples of ints
    planned = tuple(value.shape for value in program.inputs)
    return None if shapes == planned else shapes


def packed_inputs(
    samples: Sequence[tuple[np.ndarray, ...]],
) -> tuple[Path, list[list[int]]]:
    """Every sample's inputs as raw bytes back to back in one file named by its content
    (cached locally, so a transport's digest record sees the same file each run), and
    where each input starts in it."""
    digest = hashlib.sha256()
    offsets: list[list[int]] = []
    chunks: list[bytes] = []
    at = 0
    for sample in samples:
        row = []
        for array in sample:
            data = raw_bytes(array)
            row.append(at)
            at += len(data)
            digest.update(data)
            chunks.append(data)
        offsets.append(row)
    return _cached_input(digest.hexdigest(), chunks), offsets


def staged_input_file(array: np.ndarray) -> Path:
    """The raw runner file for `array`, named by its content."""
    data = raw_bytes(array)
    return _cached_input(hashlib.sha256(data).hexdigest(), [data])


def _cached_input(digest: str, chunks: Sequence[bytes], suffix: str = ".bin") -> Path:
    """The staged file of these bytes (sha256 `digest`), named by its first 32 digits.
    One already there is used only when it holds exactly these bytes
    (etdeploy.quarantine): a damaged or linked one is moved aside and written again."""
    name = digest[:32]
    path = cache_dir("staged-inputs") / f"{name}{suffix}"
    if os.path.lexists(path):
        damage = file_damage(path, digest)
        if damage is None:
            return path
        quarantine(path, "staged input", damage)
    tmp = path.with_name(f".{name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as out:
        for chunk in chunks:
            out.write(chunk)
    os.replace(tmp, path)
    return path
