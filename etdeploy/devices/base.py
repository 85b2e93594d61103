"""The Device protocol every transport implements.

A Device is a small controller (Mobly's shape): it knows how to put files in its
work dir, run a command there under a deadline, and get files back. It never
prints; progress goes through a callback and failures raise InfraError kinds
(etdeploy.errors) that name the device and the command.

Contract (design.md):
- info(): what the device is (os, abi, model, serial).
- workdir: the job's directory on the device.
- sha256(remote): the remote file's digest, or None when it does not exist.
- push(local, remote): skip when the digest already matches; otherwise write a
  temporary name, then rename, so a dropped transfer never leaves a half file
  under the real name. Returns how many bytes were sent (0 on a skip).
- pull(remote, local): to a temporary local name, then rename.
- run(argv, deadline): exit code, stdout, stderr, elapsed; the process is killed
  when the deadline passes.
- lock(): one job per device across processes.
- close(): release connections.
"""

from __future__ import annotations

import abc
import collections
import contextlib
import hashlib
import os
import shlex
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import filelock

from etdeploy.errors import DeviceError
from etdeploy.paths import cache_dir

# Called with (path being transferred, bytes done, bytes total).
ProgressCallback = Callable[[str, int, int], None]

HASH_CHUNK = 1 << 20


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

    @property
    def command(self) -> str:
        return shlex.join(self.argv)


@dataclass(frozen=True)
class PushResult:
    remote: str
    bytes_sent: int
    skipped: bool


class BoundedOutput:
    """A command's output (text or bytes) kept within `limit` characters: the
    head and the tail, with a marker for what was dropped between. A runner
    stuck printing a line per iteration must not fill this machine's memory
    before its deadline; the tail keeps what a shell wrapper prints last."""

    def __init__(self, limit: int = 16 << 20) -> None:
        self._half = limit // 2
        self._head: list[Any] = []
        self._head_size = 0
        self._tail: collections.deque[Any] = collections.deque()
        self._tail_size = 0
        self._dropped = 0
        self._empty: str | bytes = ""

    def append(self, chunk: str | bytes) -> None:
        if not chunk:
            return
        self._empty = chunk[:0]
        if self._head_size < self._half:
            self._head.append(chunk)
            self._head_size += len(chunk)
            return
        self._tail.append(chunk)
        self._tail_size += len(chunk)
        while self._tail_size > self._half and len(self._tail) > 1:
            dropped = self._tail.popleft()
            self._tail_size -= len(dropped)
            self._dropped += len(dropped)

    def _joined(self) -> Any:
        marker = (
            f"[... {self._dropped} characters of output dropped ...]\n" if self._dropped else ""
        )
        middle = marker.encode() if isinstance(self._empty, bytes) else marker
        return self._empty.join([*self._head, middle, *self._tail])  # type: ignore[arg-type]

    def text(self) -> str:
        joined = self._joined()
        return joined.decode(errors="replace") if isinstance(joined, bytes) else joined

    def data(self) -> bytes:
        joined = self._joined()
        return joined if isinstance(joined, bytes) else joined.encode()


def sha256_file(path: Path) -> str:
    """Hex sha256 of a local file, streamed in constant memory."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(HASH_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def lock_dir() -> Path:
    return cache_dir("locks")


class Device(abc.ABC):
    """Base class of every transport (local, adb, ssh, simulator)."""

    #: The transport's name as used in etdeploy.toml (`transport = "adb"`).
    transport: str = ""
    #: A runner built elsewhere for this device (`runner = "PATH"` in its
    #: [devices] table, set by the registry); None: etdeploy picks or builds one.
    runner_path: Path | None = None

    def __init__(self, name: str, *, lock_timeout_s: float = 600.0) -> None:
        self.name = name
        self.lock_timeout_s = lock_timeout_s

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

    # -- files ------------------------------------------------------------------

    @abc.abstractmethod
    def sha256(self, remote: str) -> str | None:
        """The remote file's sha256 hex digest, or None when it does not exist."""

    @abc.abstractmethod
    def push(
        self,
        local: Path,
        remote: str,
        *,
        progress: ProgressCallback | None = None,
        mode: int = 0o644,
    ) -> PushResult: ...

    @abc.abstractmethod
    def pull(
        self, remote: str, local: Path, *, progress: ProgressCallback | None = None
    ) -> Path: ...

    @abc.abstractmethod
    def exists(self, remote: str) -> bool: ...

    @abc.abstractmethod
    def makedirs(self, remote: str) -> None: ...

    @abc.abstractmethod
    def remove(self, remote: str, *, recursive: bool = False) -> None: ...

    # -- processes ---------------------------------------------------------------

    @abc.abstractmethod
    def run(
        self,
        argv: Sequence[str],
        *,
        deadline_s: float,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        idle_timeout_s: float | None = None,
    ) -> RunOutput:
        """Run argv on the device; kill it when deadline_s (seconds from now) passes.

        A timeout is not an exception here: the RunOutput says timed_out and carries
        whatever output arrived, so the caller can attach it to its error.
        """

    # -- lifecycle ---------------------------------------------------------------

    @contextlib.contextmanager
    def lock(self, timeout_s: float | None = None) -> Iterator[None]:
        """Hold this device for one job, across processes on this host."""
        timeout = self.lock_timeout_s if timeout_s is None else timeout_s
        key = hashlib.sha256(self.lock_key().encode()).hexdigest()[:24]
        path = lock_dir() / f"device-{key}.lock"
        file_lock = filelock.FileLock(str(path))
        started = time.monotonic()
        try:
            file_lock.acquire(timeout=timeout)
        except filelock.Timeout as exc:
            raise DeviceError(
                f"device is busy: another etdeploy job held it for {timeout:.0f} s",
                "wait for the other job, or raise --lock-timeout",
                device=self.name,
            ) from exc
        self.lock_waited_s = time.monotonic() - started
        try:
            yield
        finally:
            file_lock.release()

    def close(self) -> None:  # noqa: B027 - transports with no connection need nothing
        """Release connections. Safe to call twice."""

    def __enter__(self) -> Device:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def job_dir(device: Device, job_id: str) -> str:
    """The remote directory for one job, below the device's work dir."""
    return f"{device.workdir.rstrip('/')}/{job_id}"


# What every partial file's name carries, so a later transfer can find and drop
# the leftovers of a cut one.
PARTIAL_MARKER = ".etdeploy-partial-"


def partial_prefix(path: str) -> str:
    """The start of every temporary name for `path` (any process)."""
    head, _, tail = path.rpartition("/")
    prefix = f".{tail}{PARTIAL_MARKER}"
    return f"{head}/{prefix}" if head else prefix


def temporary_name(remote: str) -> str:
    """The name a file is written under before its rename into place."""
    return f"{partial_prefix(remote)}{os.getpid()}"


def temporary_path(local: Path) -> Path:
    """temporary_name for a local file: the same directory, so the rename is atomic."""
    return Path(temporary_name(str(local)))
