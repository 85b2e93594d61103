"""This machine as a device: the work dir is a local directory, processes are
local subprocesses. The reference implementation of the Device protocol."""

from __future__ import annotations

import contextlib
import fnmatch
import os
import platform
import shutil
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from etdeploy.devices.base import Command, DeviceBase, DeviceInfo, RunOutput
from etdeploy.devices.digest_records import Listing, StatFlavour, StoredFile
from etdeploy.devices.process import (
    BoundedOutput,
    ExitWaiter,
    OutputPump,
    killed_if_interrupted,
    wait_until_ended,
)
from etdeploy.devices.transfer import (
    Download,
    RemoteFile,
    Upload,
    copy_stream,
    drop_local_partials,
    local_partial,
)
from etdeploy.digests import file_sha256, known_sha256, sha256_file
from etdeploy.errors import DeviceError, RunnerError
from etdeploy.paths import cache_dir

_ABI = {"x86_64": "x86_64", "amd64": "x86_64", "aarch64": "arm64-v8a", "arm64": "arm64-v8a"}
COPY_CHUNK = 8 << 20
# How often a running command is checked against its deadline and idle timeout.
_POLL_S = 0.05


class LocalDevice(DeviceBase):
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

    # -- files ------------------------------------------------------------------

    def sha256(self, remote: str) -> str | None:
        path = Path(self.resolve(remote))
        return sha256_file(path) if path.is_file() else None

    def _prepare_push(self, target: str) -> RemoteFile | None:
        path = Path(target)
        self.makedirs(str(path.parent))
        drop_local_partials(path)
        if not path.is_file():
            return None
        st = path.stat()
        # The work dir is on this machine: its files are recognised by their stat
        # record like any local file (etdeploy.digests).
        return RemoteFile(
            size=st.st_size, mode=stat.S_IMODE(st.st_mode), sha256=known_sha256(path, st)
        )

    def _verify(self, target: str, found: RemoteFile) -> str | None:
        return file_sha256(target, trust_record=False)

    @property
    def stat_flavour(self) -> StatFlavour:
        return "bsd" if sys.platform == "darwin" else "gnu"

    def listing(self, names: Sequence[str] = ()) -> Listing:
        """The shared listing, read here without a shell: every run's sweep lists the
        work dir, and a sh, find and stat per run cost the warm run milliseconds."""
        base = Path(self.workdir)
        files: list[StoredFile] = []
        for folder, _, entries in os.walk(base):
            for entry in entries:
                if names and not any(fnmatch.fnmatchcase(entry, n) for n in names):
                    continue
                path = Path(folder) / entry
                try:
                    st = path.lstat()
                except OSError:
                    continue  # removed while listed
                if stat.S_ISREG(st.st_mode):
                    files.append(
                        StoredFile(str(path.relative_to(base)), st.st_size, int(st.st_mtime))
                    )
        return Listing(str(base).rstrip("/"), int(time.time()), tuple(files))

    def _helper(self, script: str, what: str, *, deadline_s: float = 120.0) -> str:
        try:
            done = subprocess.run(
                ["/bin/sh", "-c", script],
                capture_output=True,
                text=True,
                errors="replace",
                timeout=deadline_s,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise DeviceError(f"{what} failed: {exc}", None, device=self.name) from exc
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
            raise DeviceError(
                f"{what} failed: {last}", "see the log", device=self.name, log=done.stderr
            )
        return done.stdout

    def _keep(self, target: str, found: RemoteFile, digest: str, mode: int) -> None:
        if found.mode != mode & 0o7777:
            os.chmod(target, mode)

    def _upload(self, upload: Upload) -> int:
        try:
            with local_partial(Path(upload.target)) as partial:
                with open(upload.local, "rb") as src, open(partial, "wb") as dst:
                    sent = copy_stream(src, dst, upload.progress, COPY_CHUNK)
                os.chmod(partial, upload.mode)
        except OSError as exc:
            raise DeviceError(
                f"cannot write {upload.target}: {exc.strerror}",
                f"check free space: `etdeploy clean --device {self.name}` removes what earlier "
                "runs left in its work dir, `etdeploy clean` this machine's cache",
                device=self.name,
            ) from exc
        return sent

    def _download(self, download: Download) -> None:
        source = Path(download.source)
        if not source.is_file():
            raise DeviceError(
                f"no such file on the device: {download.source}",
                "did the runner write it?",
                device=self.name,
            )
        progress = download.progress(source.stat().st_size)
        with open(source, "rb") as src, open(download.partial, "wb") as dst:
            copy_stream(src, dst, progress, COPY_CHUNK)

    def exists(self, remote: str) -> bool:
        return Path(self.resolve(remote)).exists()

    def makedirs(self, remote: str) -> None:
        path = Path(self.resolve(remote))
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise DeviceError(
                f"cannot create {path}: {exc.strerror}",
                "check the work dir is writable (its parent, a file in the way, free space)",
                device=self.name,
            ) from exc

    def _remove(self, paths: Sequence[str], *, recursive: bool) -> None:
        for remote in paths:
            path = Path(remote)
            if path.is_dir() and not path.is_symlink() and recursive:
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)

    # -- processes ---------------------------------------------------------------

    def _run(self, command: Command) -> RunOutput:
        argv = command.argv
        clock = command.clock()
        try:
            # A new session so a timeout kills the runner and anything it spawned.
            process = subprocess.Popen(
                list(argv),
                cwd=command.cwd,
                env={**os.environ, **command.env},
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
        assert process.stdout is not None and process.stderr is not None
        stdout, stderr = BoundedOutput(), BoundedOutput()
        pumps = [
            OutputPump(process.stdout.readline, stdout.append, clock, name="local-stdout"),
            OutputPump(process.stderr.readline, stderr.append, clock, name="local-stderr"),
        ]
        for pump in pumps:
            pump.start()

        def kill() -> None:
            # The runner's whole session goes, whatever it spawned.
            if process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait()

        with killed_if_interrupted(kill), ExitWaiter(process) as ended:
            timed_out = wait_until_ended(ended, clock, poll_s=_POLL_S)
        kill()
        for pump in pumps:
            pump.join(timeout=5)
        return command.output(
            process.returncode,
            stdout.text(),
            stderr.text(),
            elapsed_s=clock.elapsed_s,
            timed_out=timed_out,
            idle=clock.idle,
        )
