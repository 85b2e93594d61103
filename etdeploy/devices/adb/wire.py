"""One phone's services through the adb server: shell v1/v2 and the sync protocol.

- Commands: shell v2 (separate stdout and stderr, the real exit status) when the
  phone advertises shell_v2, else v1 with an exit marker echoed after the
  command (stderr then arrives merged into stdout).
- Files: `sync:` with STA2 (64-bit sizes; the v1 STAT reply is 32-bit) when the
  phone has stat_v2, else `stat -c %s` through the shell; SND2/RCV2 when it has
  sendrecv_v2, else SEND/RECV.
"""

from __future__ import annotations

import contextlib
import re
import select
import shlex
import socket
import stat
import struct
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from etdeploy.devices.adb.connection import AdbSettings, Server, infra_error
from etdeploy.devices.adb.server import AdbError, ServerSocket, read_exact
from etdeploy.devices.process import BoundedOutput, RunClock
from etdeploy.devices.transfer import TransferProgress, Writable
from etdeploy.errors import DeviceError, EtdeployError, TransportError, UsageError

# Sync protocol (AOSP packages/modules/adb file_sync_protocol.h and docs/dev/sync.md,
# read 2026-12-02): 8-byte requests, DATA chunks of at most 64 KiB.
SYNC_DATA_MAX = 64 * 1024
SYNC_PATH_MAX = 1024
_SYNC_HEADER = struct.Struct("<4sI")
# DATA chunks sent per socket write (1 MiB of file data).
_CHUNKS_PER_SEND = 16
_STAT_V1 = struct.Struct("<4sIII")
_STAT_V2 = struct.Struct("<4sIQQIIIIQqqq")
# Shell protocol packets (shell_protocol.h): 1 byte id, 4 bytes little-endian length.
_SHELL_PACKET = struct.Struct("<BI")
_SHELL_STDOUT, _SHELL_STDERR, _SHELL_EXIT = 1, 2, 3

# How long a killed command may take to report its end before we stop waiting.
_KILL_WAIT_S = 3.0
_POLL_S = 0.2


@dataclass(frozen=True)
class RemoteStat:
    mode: int
    size: int
    mtime: int

    @property
    def is_file(self) -> bool:
        return stat.S_ISREG(self.mode)

    @property
    def is_dir(self) -> bool:
        return stat.S_ISDIR(self.mode)


@dataclass
class ShellResult:
    exit_code: int
    stdout: bytes
    stderr: bytes
    timed_out: bool = False
    # The stream ended without an exit status: the device or the server went away.
    lost: bool = False
    elapsed_s: float = 0.0
    # With timed_out: stopped for its silence (idle_timeout_s), not at its deadline.
    idle: bool = False


def parse_getprop(text: str) -> dict[str, str]:
    """`getprop`'s "[key]: [value]" lines as a mapping."""
    props: dict[str, str] = {}
    for line in text.splitlines():
        match = re.match(r"^\[(.+?)\]: \[(.*)\]$", line.strip())
        if match:
            props[match.group(1)] = match.group(2)
    return props


class PhoneLink:
    """One phone behind one server: opens services on it, runs commands, moves files.
    `name` is the device's name, for the errors."""

    def __init__(self, client: Server, serial: str, name: str | None = None) -> None:
        self.client = client
        self.serial = serial
        self.name = name or serial
        self._features: frozenset[str] | None = None

    @property
    def settings(self) -> AdbSettings:
        return self.client.settings

    def open(self, service: str, timeout: float) -> ServerSocket:
        """A connection already switched to `service` on the phone."""
        return self.client.open_service(self.serial, service, timeout)

    def host_query(self, what: str) -> str:
        # host-serial:SERIAL:<what>, answered by the server itself.
        return self.client.serial_query(self.serial, what)

    def state(self) -> str:
        try:
            return self.host_query("get-state").strip()
        except AdbError as exc:
            if "not found" in str(exc):
                return "absent"
            raise

    @property
    def features(self) -> frozenset[str]:
        if self._features is None:
            try:
                text = self.host_query("features")
            except (AdbError, OSError) as exc:
                raise infra_error(exc, "reading the device's features", device=self.name) from exc
            self._features = frozenset(f for f in text.strip().split(",") if f)
        return self._features

    # -- shell ------------------------------------------------------------------------

    def shell(
        self,
        command: str,
        *,
        deadline_s: float,
        idle_timeout_s: float | None = None,
        on_timeout: Callable[[], None] | None = None,
    ) -> ShellResult:
        """Run command; stop reading at the deadline (on_timeout() is then called
        while the stream is still open, to kill the process)."""
        v2 = "shell_v2" in self.features
        marker = f"__ETDEPLOY_EXIT_{uuid.uuid4().hex[:12]}__"
        # v1 has no exit status: a subshell runs the command (an `exit` in it ends
        # only the subshell), then the marker carries $?.
        service = f"shell,v2,raw:{command}" if v2 else f"shell:(\n{command}\n); echo {marker}$?"
        clock = RunClock(deadline_s, idle_timeout_s)
        try:
            connection = self.open(service, timeout=self.settings.connect_timeout_s)
        except (AdbError, OSError, EOFError) as exc:
            raise infra_error(exc, "starting a shell", device=self.name, command=command) from exc
        sock = connection.sock
        sock.settimeout(_POLL_S)
        buffer = bytearray()
        stdout = BoundedOutput()
        stderr = BoundedOutput()
        exit_code: int | None = None
        timed_out = lost = False
        kill_sent_at: float | None = None
        try:
            while exit_code is None:
                if kill_sent_at is None and clock.expired():
                    timed_out = True
                    if on_timeout is None:
                        break
                    on_timeout()
                    kill_sent_at = time.monotonic()
                if kill_sent_at is not None and time.monotonic() - kill_sent_at >= _KILL_WAIT_S:
                    break
                try:
                    data = sock.recv(1 << 16)
                except TimeoutError:
                    continue
                except OSError:
                    lost = True
                    break
                if not data:
                    lost = v2  # v1 ends by closing; the marker says whether it finished
                    break
                clock.heard()
                if not v2:
                    stdout.append(data)
                    continue
                buffer += data
                exit_code = _take_v2_packets(buffer, stdout, stderr)
        finally:
            connection.close()
        out_bytes = stdout.data()
        if not v2:
            out_bytes, exit_code = _v1_exit(out_bytes, marker)
            lost = lost or (exit_code is None and not timed_out)
        return ShellResult(
            exit_code=-1 if exit_code is None else exit_code,
            stdout=out_bytes,
            stderr=stderr.data(),
            timed_out=timed_out,
            lost=lost and not timed_out,
            elapsed_s=clock.elapsed_s,
            idle=timed_out and clock.idle,
        )

    def check(self, command: str, what: str, *, deadline_s: float | None = None) -> str:
        """Run a short helper command; its stdout, or a DeviceError."""
        limit = (
            deadline_s
            if deadline_s is not None
            else max(self.settings.transfer_idle_timeout_s, 10.0)
        )
        result = self.shell(command, deadline_s=limit)
        output = (result.stdout + result.stderr).decode(errors="replace").strip()
        if result.lost:
            raise DeviceError(
                f"device went offline while {what}",
                "check `adb devices`; a retry may succeed",
                device=self.name,
                command=command,
                log=output,
                retryable=True,
            )
        if result.timed_out:
            raise TransportError(
                f"device did not finish {what} within {limit:g} s",
                "is the device responsive?",
                device=self.name,
                command=command,
                log=output,
                retryable=True,
            )
        if result.exit_code != 0:
            raise DeviceError(
                f"{what} failed on the device (exit {result.exit_code}): {output.splitlines()[-1] if output else ''}",
                "see the log",
                device=self.name,
                command=command,
                log=output,
            )
        return result.stdout.decode(errors="replace")

    def properties(self) -> dict[str, str]:
        return parse_getprop(self.check("getprop", "reading properties"))

    # -- sync ---------------------------------------------------------------------------

    def _sync(self, what: str, command: str) -> ServerSocket:
        try:
            connection = self.open("sync:", timeout=self.settings.transfer_idle_timeout_s)
        except (AdbError, OSError, EOFError) as exc:
            raise infra_error(exc, what, device=self.name, command=command) from exc
        connection.sock.settimeout(self.settings.transfer_idle_timeout_s)
        return connection

    @staticmethod
    def _request(sock: socket.socket, request: bytes, path: str) -> None:
        encoded = path.encode()
        if len(encoded) > SYNC_PATH_MAX:
            raise UsageError(
                f"device path too long for adb ({len(encoded)} bytes): {path}",
                f"adb's sync protocol takes at most {SYNC_PATH_MAX} bytes",
            )
        sock.sendall(_SYNC_HEADER.pack(request, len(encoded)) + encoded)

    def stat(self, remote: str) -> RemoteStat | None:
        """mode, size (64-bit) and mtime of an absolute remote path, or None when it
        does not exist."""
        v2 = "stat_v2" in self.features
        connection = self._sync(f"reading {remote}", f"stat {remote}")
        try:
            sock = connection.sock
            self._request(sock, b"STA2" if v2 else b"STAT", remote)
            if v2:
                fields = _STAT_V2.unpack(read_exact(sock, _STAT_V2.size))
                error, mode, size, mtime = fields[1], fields[4], fields[8], fields[10]
                if error:
                    return None
            else:
                _id, mode, size, mtime = _STAT_V1.unpack(read_exact(sock, _STAT_V1.size))
                if mode == 0:
                    return None
            sock.sendall(_SYNC_HEADER.pack(b"QUIT", 0))
        except (OSError, EOFError, AdbError) as exc:
            raise infra_error(exc, f"reading {remote}", device=self.name) from exc
        finally:
            connection.close()
        if not v2 and stat.S_ISREG(mode):
            # The v1 reply carries the size in 32 bits; ask the shell for the real one.
            size = int(self.check(f"stat -c %s {shlex.quote(remote)}", f"sizing {remote}").strip())
        return RemoteStat(mode=mode, size=size, mtime=mtime)

    def send(
        self,
        local: Path,
        partial: str,
        remote: str,
        mode: int,
        progress: TransferProgress,
    ) -> None:
        """Send local to the phone as `partial` (on the way to `remote`, for the
        errors); a refusal removes the partial file."""
        command = f"push {local} {remote}"
        v2 = "sendrecv_v2" in self.features
        connection = self._sync(f"pushing {local.name}", command)
        sock = connection.sock
        size = progress.total
        block = bytearray(_CHUNKS_PER_SEND * (8 + SYNC_DATA_MAX))
        try:
            try:
                file_mode = stat.S_IFREG | (mode & 0o7777)
                if v2:
                    self._request(sock, b"SND2", partial)
                    sock.sendall(struct.pack("<4sII", b"SND2", file_mode, 0))
                else:
                    self._request(sock, b"SEND", f"{partial},{file_mode}")
                with open(local, "rb") as source:
                    view = memoryview(block)
                    while True:
                        # Read each chunk straight behind its DATA header: one buffer,
                        # one sendall per MiB, no copies.
                        filled = n = 0
                        for _ in range(_CHUNKS_PER_SEND):
                            got = source.readinto(view[filled + 8 : filled + 8 + SYNC_DATA_MAX])
                            if not got:
                                break
                            _SYNC_HEADER.pack_into(block, filled, b"DATA", got)
                            filled += 8 + got
                            n += got
                        if not n:
                            break
                        sock.sendall(view[:filled])
                        progress.update(progress.done + n)
                        # The phone answers mid-transfer only to fail (full disk, ...).
                        readable, _, _ = select.select([sock], [], [], 0)
                        if readable:
                            self._read_status(sock, local, partial, remote)
                sock.sendall(_SYNC_HEADER.pack(b"DONE", int(local.stat().st_mtime) & 0xFFFFFFFF))
                self._read_status(sock, local, partial, remote)
                with contextlib.suppress(OSError):
                    sock.sendall(_SYNC_HEADER.pack(b"QUIT", 0))
            except TimeoutError as exc:
                # Bytes handed to the connection are not bytes the phone wrote: the
                # sync protocol confirms a file only once it is whole.
                raise TransportError(
                    f"push of {local.name} to {remote} stalled: no progress for "
                    f"{self.settings.transfer_idle_timeout_s:g} s ({progress.done} of {size} "
                    "bytes handed to the connection, none confirmed by the device)",
                    "is the device responsive? the next push starts over",
                    device=self.name,
                    command=command,
                    retryable=True,
                ) from exc
            except (OSError, EOFError) as exc:
                connection.close()
                landed = self.drop_partial(partial)
                received = (
                    f"the device had received {landed} of {size} bytes (removed)"
                    if landed is not None
                    else f"none of its {size} bytes is confirmed on the device"
                )
                raise TransportError(
                    f"connection to the device dropped while pushing {local.name} to {remote}: "
                    f"{received}",
                    "check the cable or Wi-Fi; the next push starts over",
                    device=self.name,
                    command=command,
                    retryable=True,
                ) from exc
        finally:
            connection.close()

    def drop_partial(self, partial: str) -> int | None:
        """After a cut push: how many bytes of it the phone holds, removing them; None
        when the phone does not answer at once (the next push of the file drops them:
        devices/transfer.py, stale partials)."""
        quoted = shlex.quote(partial)
        script = f's=$(stat -c %s {quoted} 2>/dev/null); rm -f {quoted}; echo "${{s:-0}}"'
        try:
            out = self.check(
                script, "removing a cut push", deadline_s=self.settings.connect_timeout_s
            )
            return int(out.strip().splitlines()[-1])
        except (EtdeployError, ValueError, IndexError):
            return None

    def _read_status(self, sock: socket.socket, local: Path, partial: str, remote: str) -> None:
        kind, length = _SYNC_HEADER.unpack(read_exact(sock, _SYNC_HEADER.size))
        if kind == b"OKAY":
            return
        message = (
            read_exact(sock, length).decode(errors="replace") if kind == b"FAIL" else repr(kind)
        )
        with contextlib.suppress(EtdeployError):
            self.check(f"rm -f {shlex.quote(partial)}", "removing a partial file", deadline_s=10)
        if "no space" in message.lower():
            raise DeviceError(
                f"the device ran out of space while pushing {local.name} to {remote}: {message}",
                f"free space on it: `etdeploy clean --device {self.name}` removes what "
                "earlier runs left in etdeploy's work dir (add --dry-run to see it first)",
                device=self.name,
                command=f"push {local} {remote}",
            )
        raise DeviceError(
            f"the device refused {local.name} -> {remote}: {message}",
            "check the path and permissions",
            device=self.name,
            command=f"push {local} {remote}",
        )

    def receive(self, remote: str, local: Path, command: str, progress: TransferProgress) -> None:
        """Write the phone's `remote` to the local file, reporting progress; `command`
        names the pull in errors."""
        self.receive_many([(remote, local, progress)], command)

    def receive_many(
        self, files: Sequence[tuple[str, Path, TransferProgress]], command: str
    ) -> None:
        """Each (remote, local) file in one sync session: one connection for many
        small files (a run's outputs) instead of one each. A missing remote file is
        the device's FAIL reply, a DeviceError naming it."""
        v2 = "sendrecv_v2" in self.features
        connection = self._sync(f"pulling {files[0][0]}", command)
        sock = connection.sock
        remote, progress = files[0][0], files[0][2]
        try:
            for remote, local, progress in files:
                self._request(sock, b"RCV2" if v2 else b"RECV", remote)
                if v2:
                    sock.sendall(struct.pack("<4sI", b"RCV2", 0))
                with open(local, "wb") as out:
                    self._receive_data(sock, remote, out, command, progress)
            with contextlib.suppress(OSError):
                sock.sendall(_SYNC_HEADER.pack(b"QUIT", 0))
        except TimeoutError as exc:
            raise TransportError(
                f"pull of {remote} stalled: no data for {self.settings.transfer_idle_timeout_s:g} s",
                "is the device responsive?",
                device=self.name,
                command=command,
                retryable=True,
            ) from exc
        except (OSError, EOFError) as exc:
            raise TransportError(
                f"connection to the device dropped while pulling {remote} ({progress.done} bytes received)",
                "check the cable or Wi-Fi; a retry may succeed",
                device=self.name,
                command=command,
                retryable=True,
            ) from exc
        finally:
            connection.close()

    def _receive_data(
        self,
        sock: socket.socket,
        remote: str,
        out: Writable,
        command: str,
        progress: TransferProgress,
    ) -> None:
        while True:
            kind, length = _SYNC_HEADER.unpack(read_exact(sock, _SYNC_HEADER.size))
            if kind == b"DONE":
                return
            if kind == b"FAIL":
                message = read_exact(sock, length).decode(errors="replace")
                raise DeviceError(
                    f"the device cannot send {remote}: {message}",
                    "check the path",
                    device=self.name,
                    command=command,
                )
            if kind != b"DATA" or length > SYNC_DATA_MAX:
                raise DeviceError(
                    f"unexpected sync reply {kind!r} while pulling {remote}",
                    "is this a real adbd?",
                    device=self.name,
                    command=command,
                )
            out.write(read_exact(sock, length))
            progress.update(progress.done + length)


def _take_v2_packets(buffer: bytearray, stdout: BoundedOutput, stderr: BoundedOutput) -> int | None:
    """Move the whole shell-v2 packets at the head of `buffer` to stdout and stderr (a
    partial one stays for the next read); the exit code once its packet has come."""
    exit_code = None
    while len(buffer) >= _SHELL_PACKET.size:
        kind, length = _SHELL_PACKET.unpack_from(buffer)
        end = _SHELL_PACKET.size + length
        if len(buffer) < end:
            break
        payload = bytes(buffer[_SHELL_PACKET.size : end])
        del buffer[:end]
        if kind == _SHELL_STDOUT:
            stdout.append(payload)
        elif kind == _SHELL_STDERR:
            stderr.append(payload)
        elif kind == _SHELL_EXIT and payload:
            exit_code = payload[0]
    return exit_code


def _v1_exit(out: bytes, marker: str) -> tuple[bytes, int | None]:
    """A v1 shell's output without the exit marker, and the status the marker carries
    (None: the command never reached it)."""
    found = out.rfind(marker.encode())
    match = re.match(rb"(\d+)", out[found + len(marker) :]) if found >= 0 else None
    if match is None:
        return out, None
    return out[:found], int(match.group(1))
