"""AdbDevice: an Android phone behind an adb server.

- push() skips a file whose size and sha256 match, else sends it under a
  temporary name and renames it into place with `mv` after checking its size.
  The phone-side sha256 is toybox's `sha256sum`, except for files etdeploy pushed
  or verified itself: their digest is recorded in the work dir
  (devices/digest_records.py) and trusted while the file keeps its recorded stat, so an
  unchanged file is not re-read on the phone at every run.
- run(): each command's shell writes its pid to a file first; adbd makes that
  shell a process-group leader, so a deadline or an idle timeout kills the whole
  group from a second shell.
- Logs: after each run, `logcat -d -s ExecuTorch` from the run's start (the
  device's clock), which is where ExecuTorch's runner logs on Android; not for a
  command run with device_log=False (etdeploy's runner writes to stdout and stderr:
  android_harness/build_android.sh builds it with the posix PAL), which saves the
  two round trips of reading the clock and the log.
"""

from __future__ import annotations

import contextlib
import re
import shlex
import time
import uuid
from collections.abc import Mapping, Sequence

from etdeploy.devices.adb.connection import AdbSettings, connect_server, infra_error
from etdeploy.devices.adb.phones import (
    describe_attached,
    device_info,
    list_attached,
    resolve_serial,
)
from etdeploy.devices.adb.server import AdbError
from etdeploy.devices.adb.wire import PhoneLink, RemoteStat
from etdeploy.devices.base import Command, DeviceBase, DeviceInfo, RunOutput
from etdeploy.devices.digest_records import record_command
from etdeploy.devices.process import CWD_FAILED, env_exports, killed_if_interrupted
from etdeploy.devices.transfer import (
    NO_SUCH_FILE,
    Download,
    RemoteFile,
    Upload,
    owner_tag,
    parse_sha256_line,
    sha256_command,
)
from etdeploy.devices.workdir import PIDS_DIR, remove_command
from etdeploy.errors import DeviceError, EtdeployError

WORKDIR = "/data/local/tmp/etdeploy"
LOGCAT_TAG = "ExecuTorch"


class AdbDevice(DeviceBase):
    """An Android phone behind an adb server."""

    transport = "adb"

    def __init__(
        self,
        name: str | None = None,
        settings: AdbSettings | None = None,
        *,
        aliases: Mapping[str, str] | None = None,
        lock_timeout_s: float = 600.0,
    ) -> None:
        self.settings = settings or AdbSettings()
        serial = self.settings.serial or resolve_serial(name, self.settings, aliases)
        super().__init__(name or serial, lock_timeout_s=lock_timeout_s)
        self.serial = serial
        self._client = connect_server(self.settings)
        self._link = PhoneLink(self._client, serial, self.name)
        try:
            state = self._link.state()
        except (AdbError, OSError, EOFError) as exc:
            raise infra_error(exc, "looking for the device", device=self.name) from exc
        if state == "absent":
            raise DeviceError(
                f"device {serial} is not attached to the adb server at {self.settings.server}",
                f"connect it (adb connect HOST:PORT for Wi-Fi) or fix the serial; "
                f"{describe_attached(list_attached(self.settings))}",
                device=self.name,
                retryable=True,
            )
        self._props: dict[str, str] | None = None
        self._clock_offset_s: float | None = None
        #: Whether run() reads the run's logcat lines (tag ExecuTorch).
        self.capture_logcat = True

    # -- identity -----------------------------------------------------------------

    @property
    def features(self) -> frozenset[str]:
        return self._link.features

    def state(self) -> str:
        """The server's word for the phone: device, offline, unauthorized, absent."""
        try:
            return self._link.state()
        except (AdbError, OSError, EOFError) as exc:
            raise infra_error(exc, "asking the device's state", device=self.name) from exc

    def properties(self) -> dict[str, str]:
        if self._props is None:
            self._props = self._link.properties()
        return dict(self._props)

    def info(self) -> DeviceInfo:
        return device_info(self.serial, self.state(), self.properties(), {}, self.name)

    @property
    def workdir(self) -> str:
        return WORKDIR

    def lock_key(self) -> str:
        return f"adb:{self.settings.host}:{self.settings.port}:{self.serial}"

    # -- files --------------------------------------------------------------------

    def stat(self, remote: str) -> RemoteStat | None:
        """mode, size (64-bit) and mtime of a remote path, or None when it does not exist."""
        return self._link.stat(self.resolve(remote))

    def remote_size(self, remote: str) -> int | None:
        found = self.stat(remote)
        return found.size if found else None

    def exists(self, remote: str) -> bool:
        return self.stat(remote) is not None

    def sha256(self, remote: str) -> str | None:
        remote = self.resolve(remote)
        found = self.stat(remote)
        return None if found is None else self._hash(remote, found.size)

    def _hash(self, remote: str, size: int) -> str | None:
        # Phones hash at roughly 100 MB/s and up; allow for slow ones.
        deadline = max(30.0, size / 20e6)
        command = sha256_command(remote)
        result = self._link.shell(command, deadline_s=deadline)
        output = (result.stdout + result.stderr).decode(errors="replace").strip()
        if result.exit_code == NO_SUCH_FILE:
            return None
        if result.lost or result.timed_out or result.exit_code != 0:
            if result.exit_code == 127:
                raise DeviceError(
                    "the device has no sha256sum",
                    "Android 8 and later ship it in toybox",
                    device=self.name,
                    command=command,
                    log=output,
                )
            raise DeviceError(
                f"hashing {remote} on the device failed",
                "see the log",
                device=self.name,
                command=command,
                log=output,
                retryable=result.lost or result.timed_out,
            )
        digest = parse_sha256_line(output)
        if not re.fullmatch(r"[0-9a-f]{64}", digest):
            raise DeviceError(
                f"unexpected sha256sum output for {remote}",
                "see the log",
                device=self.name,
                command=command,
                log=output,
            )
        return digest

    def _prepare_push(self, target: str) -> RemoteFile | None:
        return self._prepare_pushes([target], [])[0]

    def _prepare_pushes(
        self, targets: Sequence[str], directories: Sequence[str]
    ) -> list[RemoteFile | None]:
        # One shell call: the directories, no stale partials, each file's mode, stat and record.
        hint = "is toybox's stat on the device? Android 8 and later ship it"
        return self._probed(targets, directories, with_mode=True, hint=hint)

    def _verify(self, target: str, found: RemoteFile) -> str | None:
        return self._hash(target, found.size or 0)

    def _keep(self, target: str, found: RemoteFile, digest: str, mode: int) -> None:
        fixes = [] if found.mode == mode & 0o7777 else [f"chmod {mode:o} {shlex.quote(target)}"]
        # A chmod moves the file's ctime: its record is written again after it.
        if fixes or found.sha256 != digest:
            fixes.append(record_command(WORKDIR, target, digest, "gnu") or "true")
            self._link.check("; ".join(fixes), f"updating {target}")

    def _upload(self, upload: Upload) -> int:
        try:
            return self._send_and_move(upload)
        except KeyboardInterrupt:
            # Ctrl-C or SIGTERM (etdeploy.interrupts) while the file was on its way or
            # being moved into place, the phone still there: its partial file goes
            # before the run unwinds (after the move there is none, and rm -f is a no-op).
            self._link.drop_partial(upload.partial)
            raise

    def _send_and_move(self, upload: Upload) -> int:
        self._link.send(upload.local, upload.partial, upload.target, upload.mode, upload.progress)
        # The digest (hashed while sending) is recorded for the file, so the next
        # push of it needs no hashing on the phone.
        quoted_partial, quoted_remote = shlex.quote(upload.partial), shlex.quote(upload.target)
        size = upload.size
        record = record_command(WORKDIR, upload.target, upload.digest.result(), "gnu")
        finish = (
            f's=$(stat -c %s {quoted_partial}) && [ "$s" = {size} ] || '
            f'{{ echo "size $s, expected {size}" >&2; rm -f {quoted_partial}; exit 3; }}; '
            f"chmod {upload.mode:o} {quoted_partial} && mv -f {quoted_partial} {quoted_remote}"
            # A record that cannot be written costs a hash on the next push, not this one.
            + (f" && {{ {record} || true; }}" if record else "")
        )
        self._link.check(finish, f"moving {upload.target.rpartition('/')[2]} into place")
        return size

    def _download(self, download: Download) -> None:
        remote = download.source
        found = self.stat(remote)
        if found is None or not found.is_file:
            raise DeviceError(
                f"no such file on the device: {remote}",
                "did the runner write it?",
                device=self.name,
                command=f"pull {remote}",
            )
        command = f"pull {remote} {download.local}"
        self._link.receive(remote, download.partial, command, download.progress(found.size))

    def _download_files(self, downloads: Sequence[Download]) -> None:
        # One sync session for all: each file costs a request, not a connection.
        if not downloads:
            return
        command = f"pull {' '.join(d.source for d in downloads)}"
        self._link.receive_many([(d.source, d.partial, d.progress(0)) for d in downloads], command)

    def _helper(self, script: str, what: str, *, deadline_s: float = 120.0) -> str:
        return self._link.check(script, what, deadline_s=deadline_s)

    def makedirs(self, remote: str) -> None:
        remote = self.resolve(remote)
        self._link.check(f"mkdir -p {shlex.quote(remote)}", f"creating {remote}")

    def _remove(self, paths: Sequence[str], *, recursive: bool) -> None:
        what = f"removing {paths[0]}" if len(paths) == 1 else f"removing {len(paths)} paths"
        self._link.check(remove_command(WORKDIR, paths, recursive=recursive), what)

    # -- processes --------------------------------------------------------------------

    def _device_time(self) -> float:
        """Now on the device's clock (logcat -T wants device time)."""
        if self._clock_offset_s is None:
            before = time.time()
            text = self._link.check(
                "date +%s.%N", "reading the device clock", deadline_s=10
            ).strip()
            after = time.time()
            try:
                device_now = float(text)
            except ValueError:  # a date without %N
                device_now = float(self._link.check("date +%s", "reading the device clock").strip())
            self._clock_offset_s = device_now - (before + after) / 2
        return time.time() + self._clock_offset_s

    def _wrap(self, command: Command, pidfile: str) -> str:
        exports = env_exports(command.env)
        directory = shlex.quote(self.resolve(command.cwd) if command.cwd else WORKDIR)
        pid_dir = shlex.quote(pidfile.rpartition("/")[0])
        quoted_pid = shlex.quote(pidfile)
        # The pid is this shell's: adbd setsid()s it, so it leads the process group.
        return (
            f"mkdir -p {pid_dir} 2>/dev/null; echo $$ > {quoted_pid} 2>/dev/null; "
            f"if cd {directory}; then {exports}{shlex.join(command.argv)}; else (exit {CWD_FAILED}); fi; "
            f"rc=$?; rm -f {quoted_pid}; exit $rc"
        )

    def _kill(self, pidfile: str) -> None:
        quoted = shlex.quote(pidfile)
        script = (
            f'p=$(cat {quoted} 2>/dev/null); if [ -n "$p" ]; then '
            f'kill -9 -- -"$p" 2>/dev/null || {{ pkill -9 -P "$p" 2>/dev/null; kill -9 "$p" 2>/dev/null; }}; '
            f"fi; rm -f {quoted}"
        )
        with contextlib.suppress(EtdeployError):
            self._link.shell(script, deadline_s=10)

    def _run(self, command: Command) -> RunOutput:
        # Named by its owner: the next run on this phone removes it if this run dies
        # before it can (devices/workdir.py, the sweep).
        pidfile = f"{WORKDIR}/{PIDS_DIR}/{owner_tag()}-{uuid.uuid4().hex[:12]}.pid"
        script = self._wrap(command, pidfile)
        device_log = self.capture_logcat and command.device_log
        log_since = self._device_time() if device_log else 0.0
        with killed_if_interrupted(lambda: self._kill(pidfile)):
            result = self._link.shell(
                script,
                deadline_s=command.deadline_s,
                idle_timeout_s=command.idle_timeout_s,
                on_timeout=lambda: self._kill(pidfile),
            )
        stdout = result.stdout.decode(errors="replace")
        stderr = result.stderr.decode(errors="replace")
        if result.lost:
            raise DeviceError(
                f"device went offline while running {command.argv[0]}",
                "check `adb devices`; a retry may succeed",
                device=self.name,
                command=shlex.join(command.argv),
                log=(stdout + stderr)[-4000:],
                retryable=True,
            )
        return command.output(
            result.exit_code,
            stdout,
            stderr,
            elapsed_s=result.elapsed_s,
            timed_out=result.timed_out,
            idle=result.idle,
            device_log=self._logcat(log_since) if device_log else "",
        )

    def logcat_command(self, since_device_time: float) -> str:
        # A -T argument with a '.' is a time (epoch seconds), digits alone a count.
        return f"logcat -d -v threadtime -T {since_device_time:.3f} -s {LOGCAT_TAG}"

    def _logcat(self, since: float) -> str:
        try:
            result = self._link.shell(self.logcat_command(since - 0.05), deadline_s=15)
        except EtdeployError:
            return ""
        if result.exit_code != 0:
            return ""
        lines = [
            line
            for line in result.stdout.decode(errors="replace").splitlines()
            if line and not line.startswith("--------- beginning of")
        ]
        return "\n".join(lines) + ("\n" if lines else "")

    def close(self) -> None:
        # Every request opens its own server connection; nothing stays open.
        self._props = None
