"""This machine as a device: the work dir is a local directory, processes are
local subprocesses. The reference implementation of the Device protocol."""

from __future__ import annotations

import contextlib
import os
import platform
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO

from etdeploy.devices.base import (
    BoundedOutput,
    Device,
    DeviceInfo,
    ProgressCallback,
    PushResult,
    RunOutput,
    sha256_file,
    temporary_name,
    temporary_path,
)
from etdeploy.errors import DeviceError, RunnerError
from etdeploy.paths import cache_dir

_ABI = {"x86_64": "x86_64", "amd64": "x86_64", "aarch64": "arm64-v8a", "arm64": "arm64-v8a"}
COPY_CHUNK = 8 << 20
# How often a running command is checked against its deadline and idle timeout.
_POLL_S = 0.05


class LocalDevice(Device):
    transport = "local"

    def __init__(
        self, name: str = "local", *, workdir: Path | None = None, lock_timeout_s: float = 600.0
    ) -> None:
        super().__init__(name, lock_timeout_s=lock_timeout_s)
        self._workdir = workdir or cache_dir("local-device")

    def info(self) -> DeviceInfo:
        machine = platform.machine().lower()
        return DeviceInfo(
            name=self.name,
            transport="local",
            serial=platform.node(),
            os=platform.system().lower(),
            abi=_ABI.get(machine, machine),
            model=platform.processor() or machine,
            os_version=platform.release(),
        )

    @property
    def workdir(self) -> str:
        return str(self._workdir)

    def lock_key(self) -> str:
        return f"local:{platform.node()}"

    def sha256(self, remote: str) -> str | None:
        path = Path(remote)
        return sha256_file(path) if path.is_file() else None

    def push(
        self,
        local: Path,
        remote: str,
        *,
        progress: ProgressCallback | None = None,
        mode: int = 0o644,
    ) -> PushResult:
        if self.sha256(remote) == sha256_file(local):
            os.chmod(remote, mode)
            return PushResult(remote, 0, True)
        target = Path(remote)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(temporary_name(remote))
        total = local.stat().st_size
        done = 0
        try:
            with open(local, "rb") as src, open(tmp, "wb") as dst:
                while chunk := src.read(COPY_CHUNK):
                    dst.write(chunk)
                    done += len(chunk)
                    if progress:
                        progress(remote, done, total)
            os.chmod(tmp, mode)
            os.replace(tmp, target)
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            raise DeviceError(
                f"cannot write {remote}: {exc.strerror}", "check free space", device=self.name
            ) from exc
        return PushResult(remote, done, False)

    def pull(self, remote: str, local: Path, *, progress: ProgressCallback | None = None) -> Path:
        source = Path(remote)
        if not source.is_file():
            raise DeviceError(
                f"no such file on the device: {remote}",
                "did the runner write it?",
                device=self.name,
            )
        tmp = temporary_path(local)
        shutil.copyfile(source, tmp)
        os.replace(tmp, local)
        if progress:
            size = local.stat().st_size
            progress(remote, size, size)
        return local

    def exists(self, remote: str) -> bool:
        return Path(remote).exists()

    def makedirs(self, remote: str) -> None:
        Path(remote).mkdir(parents=True, exist_ok=True)

    def remove(self, remote: str, *, recursive: bool = False) -> None:
        path = Path(remote)
        if path.is_dir() and recursive:
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)

    def run(
        self,
        argv: Sequence[str],
        *,
        deadline_s: float,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        idle_timeout_s: float | None = None,
    ) -> RunOutput:
        started = time.monotonic()
        try:
            # A new session so a timeout kills the runner and anything it spawned.
            process = subprocess.Popen(
                list(argv),
                cwd=cwd,
                env={**os.environ, **(env or {})},
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                errors="replace",
                start_new_session=True,
            )
        except OSError as exc:
            raise RunnerError(
                f"cannot start {argv[0]}: {exc.strerror}",
                "is the runner built for this machine?",
                device=self.name,
                command=" ".join(argv),
            ) from exc
        # Both pipes are drained by threads so neither can fill and block the
        # runner; the last time either said something marks it alive.
        chunks = {"stdout": BoundedOutput(), "stderr": BoundedOutput()}
        last_output = [time.monotonic()]

        def drain(name: str, pipe: IO[str]) -> None:
            for line in pipe:
                chunks[name].append(line)
                last_output[0] = time.monotonic()

        readers = [
            threading.Thread(target=drain, args=(name, pipe), daemon=True)
            for name, pipe in (("stdout", process.stdout), ("stderr", process.stderr))
        ]
        for reader in readers:
            reader.start()
        timed_out = False
        try:
            while process.poll() is None:
                now = time.monotonic()
                idle = idle_timeout_s is not None and now - last_output[0] > idle_timeout_s
                if now - started > deadline_s or idle:
                    timed_out = True
                    break
                # Returns the moment the runner exits: no poll interval added to each run.
                with contextlib.suppress(subprocess.TimeoutExpired):
                    process.wait(timeout=_POLL_S)
        finally:
            # A deadline, or our own caller dying (Ctrl-C, a farm's job timeout):
            # either way the runner's whole session goes with it.
            if process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait()
            for reader in readers:
                reader.join(timeout=5)
        stdout, stderr = chunks["stdout"].text(), chunks["stderr"].text()
        return RunOutput(
            argv=tuple(argv),
            exit_code=process.returncode,
            stdout=stdout,
            stderr=stderr,
            elapsed_s=time.monotonic() - started,
            timed_out=timed_out,
        )
