"""The Device protocol every transport implements, and what they share.

A Device is a small controller (Mobly's shape): it knows how to put files in its
work dir, run a command there under a deadline, list and remove what is there,
and get files back. It never prints; progress goes through a callback and
failures raise InfraError kinds (etdeploy.errors) that name the device and the
command.

Contract (design.md):
- info(): what the device is (os, abi, model, serial); lock_key(): which physical
  device it is on this host.
- workdir: the directory etdeploy owns on the device (jobs live below it).
- push(local, remote): skip when the digest already matches; otherwise write a
  temporary name, then rename, so a dropped transfer never leaves a half file
  under the real name. Returns how many bytes were sent (0 on a skip). What is
  there is known from the device's digest record while the file's stat is as
  recorded (devices/digest_records.py), else hashed there; `verify=True` hashes always.
  push_many(files, directories=...): the same for several files, what is at every
  destination read in one exchange (and the directories made in it) where the
  transport can: a warm run's files cost one round trip, not one each.
- pull(remote, local), pull_files(pairs): to temporary local names, then renamed.
- run(argv, deadline): exit code, stdout, stderr, elapsed; the process is killed
  when the deadline passes. `device_log=False`: the device's own log (Android's
  logcat) is not read for it (a command that writes everything to stdout and
  stderr, as etdeploy's runner does).
- listing(): every file in the work dir with its size and mtime; makedirs(path);
  remove(*paths): files or directories, with their digest records.
- close(): release connections.

Optional abilities are services over that contract, kept by their owners: the
lock that holds a device for one job (devices/lock.py, over lock_key), the
journal of job directories and the sweep of what dead runs left
(devices/workdir.py, over listing and remove), the runner a device's table names
(devices/registry.py, configured_runner).

`Device` is that contract as a typing.Protocol: what the pipeline, the farm and
the registry hold. `DeviceBase` is the one implementation of what the contract
says regardless of transport (the push decision, temporary names, the checks on
a command, the listing); local, adb, ssh and the simulator fill in its hooks.
"""

from __future__ import annotations

import abc
import contextlib
import shlex
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, TypeVar, runtime_checkable

from etdeploy.devices.digest_records import (
    Listing,
    StatFlavour,
    listing_script,
    parse_listing,
    probe_batches,
    probes_script,
    read_probes,
)
from etdeploy.devices.process import RunClock, check_env_names
from etdeploy.devices.transfer import (
    BackgroundDigest,
    Download,
    ProgressCallback,
    Push,
    RemoteFile,
    TransferProgress,
    Upload,
    local_partial,
)
from etdeploy.errors import DeviceError, UsageError

# ProgressCallback is part of push's signature.
__all__ = [
    "Command",
    "Device",
    "DeviceBase",
    "DeviceInfo",
    "ProgressCallback",
    "Push",
    "PushResult",
    "RunOutput",
    "job_dir",
]


@dataclass(frozen=True)
class DeviceInfo:
    """What a device is. `abi` uses Android's names: arm64-v8a, x86_64, ..."""

    name: str
    transport: str
    serial: str
    os: str
    abi: str
    model: str = ""
    os_version: str = ""
    soc: str = ""
    state: str = "device"
    extra: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class RunOutput:
    """The result of one command on a device."""

    argv: tuple[str, ...]
    exit_code: int
    stdout: str
    stderr: str
    elapsed_s: float
    timed_out: bool = False
    # Extra device logs captured for the run (Android: logcat lines, tag ExecuTorch).
    device_log: str = ""
    # With timed_out: it was stopped for saying nothing for idle_timeout_s, not at
    # its deadline.
    idle: bool = False

    @property
    def command(self) -> str:
        return shlex.join(self.argv)


@dataclass(frozen=True)
class PushResult:
    remote: str
    bytes_sent: int
    skipped: bool


@runtime_checkable
class Device(Protocol):
    """What every device offers; see the module docstring for the contract."""

    #: The name the user gave it (--device NAME), in every error about it.
    name: str
    #: The transport's name as used in etdeploy.toml (`transport = "adb"`).
    transport: str
    #: How long the device lock waits for another job by default (--lock-timeout).
    lock_timeout_s: float

    def info(self) -> DeviceInfo: ...

    def lock_key(self) -> str:
        """A string naming this physical device uniquely on this host."""
        ...

    @property
    def workdir(self) -> str:
        """The base directory etdeploy owns on the device (jobs live below it)."""
        ...

    def push(
        self,
        local: Path,
        remote: str,
        *,
        progress: ProgressCallback | None = None,
        mode: int = 0o644,
        verify: bool = False,
    ) -> PushResult:
        """Put `local` at `remote` unless the same bytes are there; `verify` hashes
        what is there instead of trusting its digest record (--verify-remote)."""
        ...

    def push_many(
        self,
        files: Sequence[Push],
        *,
        directories: Sequence[str] = (),
        progress: ProgressCallback | None = None,
        verify: bool = False,
    ) -> list[PushResult]:
        """push() of each file, and `directories` made, what is at every destination
        read in one exchange where the transport can."""
        ...

    def pull(
        self, remote: str, local: Path, *, progress: ProgressCallback | None = None
    ) -> Path: ...

    def pull_files(self, files: Sequence[tuple[str, Path]]) -> list[Path]: ...

    def run(
        self,
        argv: Sequence[str],
        *,
        deadline_s: float,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        idle_timeout_s: float | None = None,
        device_log: bool = True,
    ) -> RunOutput:
        """Run argv on the device; kill it when deadline_s (seconds from now) passes.

        A timeout is not an exception here: the RunOutput says timed_out and carries
        whatever output arrived, so the caller can attach it to its error.
        """
        ...

    def listing(self, names: Sequence[str] = ()) -> Listing:
        """Every file in the work dir (with `names`, those whose name matches one of
        these find patterns), with its size and mtime, and the device's clock."""
        ...

    def makedirs(self, remote: str) -> None: ...

    def remove(self, *remotes: str, recursive: bool = False) -> None:
        """Remove these paths (relative ones are below the work dir) and their digest
        records; a missing path is no error."""
        ...

    def close(self) -> None:
        """Release connections. Safe to call twice."""
        ...


@dataclass(frozen=True)
class Command:
    """One run() request, checked: argv is not empty and env's names are a shell's."""

    argv: tuple[str, ...]
    deadline_s: float
    cwd: str | None
    env: Mapping[str, str]
    idle_timeout_s: float | None
    # Read the device's own log for it (Android's logcat), where the transport has one.
    device_log: bool = True

    def clock(self) -> RunClock:
        """Start the deadline and idle timeout now."""
        return RunClock(self.deadline_s, self.idle_timeout_s)

    def output(
        self,
        exit_code: int,
        stdout: str,
        stderr: str,
        *,
        elapsed_s: float,
        timed_out: bool,
        idle: bool = False,
        device_log: str = "",
    ) -> RunOutput:
        return RunOutput(
            argv=self.argv,
            exit_code=exit_code,
            stdout=stdout,
            stderr=stderr,
            elapsed_s=elapsed_s,
            timed_out=timed_out,
            device_log=device_log,
            idle=timed_out and idle,
        )


_D = TypeVar("_D", bound="DeviceBase")

# How many paths one removal sends in a round trip.
_REMOVE_BATCH = 64


class DeviceBase(abc.ABC):
    """What all four devices do the same way. A transport implements the identity,
    the file helpers and the hooks below (_prepare_push, _upload, _download, _run,
    _remove, _helper); push, pull, run, listing, remove and close are here."""

    transport: str = ""

    def __init__(self, name: str, *, lock_timeout_s: float = 600.0) -> None:
        self.name = name
        self.lock_timeout_s = lock_timeout_s
        # One transfer at a time per device object: a push's look-then-write must
        # not interleave with another's.
        self._transfer_lock = threading.RLock()

    # -- identity ---------------------------------------------------------------

    @abc.abstractmethod
    def info(self) -> DeviceInfo: ...

    @property
    @abc.abstractmethod
    def workdir(self) -> str:
        """The base directory etdeploy owns on the device (jobs live below it)."""

    @abc.abstractmethod
    def lock_key(self) -> str:
        """A string naming this physical device uniquely on this host (server+serial)."""

    @property
    def stat_flavour(self) -> StatFlavour:
        """How the device's `stat` takes a format: -c (GNU, toybox) or -f (BSD, macOS)."""
        return "gnu"

    @abc.abstractmethod
    def _helper(self, script: str, what: str, *, deadline_s: float = 120.0) -> str:
        """Run a short POSIX sh script where the work dir is; its stdout, or a
        DeviceError naming `what`."""

    def listing(self, names: Sequence[str] = ()) -> Listing:
        """Every file in the work dir (with `names`, those matching one of these find
        patterns), with its size and mtime (etdeploy clean, the sweep)."""
        workdir = self.workdir
        script = listing_script(workdir, self.stat_flavour, names)
        return parse_listing(self._helper(script, f"listing {workdir}"), workdir)

    def resolve(self, remote: str) -> str:
        """The path a remote name means: relative names are below the work dir."""
        return remote if remote.startswith("/") else f"{self.workdir.rstrip('/')}/{remote}"

    # -- files ------------------------------------------------------------------

    @abc.abstractmethod
    def sha256(self, remote: str) -> str | None:
        """The remote file's sha256 hex digest, or None when it does not exist."""

    @abc.abstractmethod
    def makedirs(self, remote: str) -> None: ...

    def remove(self, *remotes: str, recursive: bool = False) -> None:
        """Remove these paths and their digest records, a batch per round trip. A
        relative path must stay below the work dir (no `..`)."""
        paths = []
        for remote in remotes:
            if not remote.startswith("/"):
                parts = [p for p in remote.split("/") if p]
                if not parts or any(p in (".", "..") for p in parts):
                    raise UsageError(
                        f"not a path below the work dir: {remote!r}", "name a file or directory"
                    )
            paths.append(self.resolve(remote))
        for start in range(0, len(paths), _REMOVE_BATCH):
            self._remove(paths[start : start + _REMOVE_BATCH], recursive=recursive)

    @abc.abstractmethod
    def _remove(self, paths: Sequence[str], *, recursive: bool) -> None:
        """Remove these resolved paths (and their digest records) in one round trip."""

    def push(
        self,
        local: Path,
        remote: str,
        *,
        progress: ProgressCallback | None = None,
        mode: int = 0o644,
        verify: bool = False,
    ) -> PushResult:
        """Skip a file the device already has (same size, then the same sha256 by its
        trusted record or by hashing it there), else write it under a temporary name
        and rename it into place."""
        (result,) = self.push_many([Push(Path(local), remote, mode)], progress=progress,
                                   verify=verify)  # fmt: skip
        return result

    def push_many(
        self,
        files: Sequence[Push],
        *,
        directories: Sequence[str] = (),
        progress: ProgressCallback | None = None,
        verify: bool = False,
    ) -> list[PushResult]:
        """push() of each file, and `directories` made: what is at every destination
        is read in one exchange where the transport can (_prepare_pushes), while the
        local digests are computed; then each file that differs is sent."""
        for file in files:
            if not file.local.is_file():
                raise UsageError(f"no such file to push: {file.local}", "build or stage it first")
        with self._transfer_lock:
            # The local digests are computed while the device looks at its end.
            digests = [BackgroundDigest(file.local) for file in files]
            targets = [self.resolve(file.remote) for file in files]
            found = self._prepare_pushes(targets, [self.resolve(d) for d in directories])
            results: list[PushResult] = []
            for file, target, there, digest in zip(files, targets, found, digests, strict=True):
                size = file.local.stat().st_size
                report = TransferProgress(progress, target, size)
                if there is not None and self._holds(target, there, size, digest, verify):
                    self._keep(target, there, digest.result(), file.mode)
                    report.update(size)
                    results.append(PushResult(target, 0, True))
                    continue
                sent = self._upload(Upload(file.local, target, size, file.mode, report, digest))
                results.append(PushResult(target, sent, False))
        return results

    def _holds(
        self, target: str, found: RemoteFile, size: int, digest: BackgroundDigest, verify: bool
    ) -> bool:
        """Whether the file found at target holds the local bytes: by its trusted
        record, else (or with `verify`) by hashing it there."""
        # Sizes first: a differing size needs no hashing on either side.
        if found.size not in (None, size):
            return False
        there = found.sha256 if found.sha256 is not None and not verify else None
        return (there or self._verify(target, found)) == digest.result()

    def pull(self, remote: str, local: Path, *, progress: ProgressCallback | None = None) -> Path:
        """Bring a file back under a temporary local name, then rename it."""
        source = self.resolve(remote)
        local = Path(local)
        with self._transfer_lock, local_partial(local) as partial:
            self._download(Download(source, local, partial, progress))
        return local

    def pull_files(self, files: Sequence[tuple[str, Path]]) -> list[Path]:
        """Several (remote, local) files back, all or none: each is written under a
        temporary local name, and only when every one arrived are they renamed."""
        pairs = [(self.resolve(remote), Path(local)) for remote, local in files]
        with self._transfer_lock, contextlib.ExitStack() as partials:
            downloads = [
                Download(source, local, partials.enter_context(local_partial(local)), None)
                for source, local in pairs
            ]
            self._download_files(downloads)
        return [local for _, local in pairs]

    def _download_files(self, downloads: Sequence[Download]) -> None:
        """Each of `downloads`, one by one; a transport that can bring several back in
        one exchange (adb's sync session) does so instead."""
        for download in downloads:
            self._download(download)

    @abc.abstractmethod
    def _prepare_push(self, target: str) -> RemoteFile | None:
        """Make target's directory, drop partials earlier cut pushes of it left, and
        say what is there now (None: nothing)."""

    def _prepare_pushes(
        self, targets: Sequence[str], directories: Sequence[str]
    ) -> list[RemoteFile | None]:
        """Make `directories`, then _prepare_push each target; a transport that can
        do it all in one exchange does so instead."""
        for directory in directories:
            self.makedirs(directory)
        return [self._prepare_push(target) for target in targets]

    def _probed(
        self, targets: Sequence[str], directories: Sequence[str], *, with_mode: bool, hint: str
    ) -> list[RemoteFile | None]:
        """_prepare_pushes by records.probes_script through _helper: one round trip for
        as many files as a script may name (the directories made in the first);
        `hint` says what the device needs when its answer cannot be read."""
        found: list[RemoteFile | None] = []
        for i, batch in enumerate(probe_batches(self.workdir, targets)):
            script = probes_script(self.workdir, batch, self.stat_flavour, with_mode=with_mode,
                                   directories=() if i else directories)  # fmt: skip
            about = batch[0] if len(batch) == 1 else f"{len(batch)} files"
            output = self._helper(script, f"preparing {about}")
            try:
                probes = read_probes(output, batch, with_mode=with_mode)
            except ValueError as exc:
                raise DeviceError(
                    f"cannot read what {self.name} says about {about}", hint,
                    device=self.name, command=script, log=output[-4000:],
                ) from exc  # fmt: skip
            found += [None if p is None else RemoteFile(p.size, p.mode, p.recorded) for p in probes]
        return found

    def _verify(self, target: str, found: RemoteFile) -> str | None:
        """The sha256 of the file at target, read on the device (no record trusted)."""
        return self.sha256(target)

    def _keep(self, target: str, found: RemoteFile, digest: str, mode: int) -> None:  # noqa: B027
        """A push was skipped: bring what else the push asks for up to date (the mode,
        the digest record when it was missing or stale). Nothing by default."""

    @abc.abstractmethod
    def _upload(self, upload: Upload) -> int:
        """Write the file under upload.partial, then rename it to upload.target;
        the bytes sent. A failure leaves nothing under the real name."""

    @abc.abstractmethod
    def _download(self, download: Download) -> None:
        """Write the remote file to download.partial (pull renames it); a missing
        file is a DeviceError that says "no such file"."""

    # -- processes ---------------------------------------------------------------

    def run(
        self,
        argv: Sequence[str],
        *,
        deadline_s: float,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        idle_timeout_s: float | None = None,
        device_log: bool = True,
    ) -> RunOutput:
        """Device.run: argv must not be empty, env's names must be a shell's."""
        if not argv:
            raise UsageError("nothing to run: empty argv", "pass the command and its arguments")
        check_env_names(env or {})
        return self._run(
            Command(tuple(argv), deadline_s, cwd, dict(env or {}), idle_timeout_s, device_log)
        )

    @abc.abstractmethod
    def _run(self, command: Command) -> RunOutput:
        """Run a checked command: its clock starts when the transport starts it."""

    # -- lifecycle ---------------------------------------------------------------

    def close(self) -> None:  # noqa: B027 - transports with no connection need nothing
        """Release connections. Safe to call twice."""

    def __enter__(self: _D) -> _D:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def job_dir(device: Device, job_id: str) -> str:
    """The remote directory for one job, below the device's work dir."""
    return f"{device.workdir.rstrip('/')}/{job_id}"
