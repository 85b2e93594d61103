"""One long-lived `sh` on the host for etdeploy's short helper scripts.

Every exec channel is a new session: sshd forks, and the user's login shell
starts and runs its rc files first (Debian's bash sources ~/.bashrc for a command
sshd runs; one with `pyenv init` in it took 0.15 s here). A push probes the host
once per file, so a run of twenty files paid that twenty times. The helper is
one session whose shell reads scripts from stdin: after the first, each costs a
round trip.

Each script runs in a subshell with stdin from /dev/null (it cannot exit the
helper or eat the scripts after it), and is followed by a marker line on stdout
carrying its status and one on stderr. A script past its deadline, or a helper
that died, closes the channel; the next script opens a new one. The runner's own
commands keep their sessions (wire.HostLink.execute): they need the pid header,
the group kill and streaming output.
"""

from __future__ import annotations

import contextlib
import re
import threading
import time
import uuid

import paramiko

from etdeploy.devices.process import BoundedOutput
from etdeploy.devices.ssh.command_results import HelperResult
from etdeploy.devices.ssh.connection import SshConnection


class HelperShell:
    """A shell on the host that runs one helper script at a time."""

    def __init__(self, connection: SshConnection) -> None:
        self.connection = connection
        self._channel: paramiko.Channel | None = None
        self._transport: paramiko.Transport | None = None
        self._lock = threading.Lock()
        #: How many helper sessions were opened (a new one after a failure adds one).
        self.sessions = 0

    def _open(self) -> paramiko.Channel:
        transport = self.connection.client().get_transport()
        channel = self._channel
        if channel is not None and transport is self._transport and not channel.closed:
            return channel
        self.close()
        try:
            assert transport is not None
            channel = transport.open_session(timeout=self.connection.settings.connect_timeout_s)
            channel.exec_command("/bin/sh")
        except (paramiko.SSHException, EOFError, OSError, AssertionError) as exc:
            raise self.connection.lost(exc, "starting a helper shell") from exc
        self._channel, self._transport = channel, transport
        self.sessions += 1
        return channel

    def run(self, script: str, *, deadline_s: float) -> HelperResult:
        """Run a POSIX sh script; a lost connection raises TransportError."""
        with self._lock:
            channel = self._open()
            marker = f"ETDEPLOY-DONE-{uuid.uuid4().hex}"
            line = (
                f"( {script}\n) </dev/null; "
                f"printf '\\n{marker} %s\\n' \"$?\"; printf '\\n{marker}\\n' >&2\n"
            )
            deadline = time.monotonic() + deadline_s
            try:
                channel.sendall(line.encode())
                out, status = self._read_until(channel.recv, marker, deadline, with_status=True)
                if status is None:
                    self.close()
                    return HelperResult(None, out, b"")
                err, _ = self._read_until(channel.recv_stderr, marker, deadline)
            except (paramiko.SSHException, EOFError, OSError) as exc:
                self.close()
                raise self.connection.lost(exc, "a helper command") from exc
            return HelperResult(status, out, err)

    def _read_until(
        self,
        read: object,
        marker: str,
        deadline: float,
        *,
        with_status: bool = False,
    ) -> tuple[bytes, int | None]:
        """The stream up to the marker line (its status with with_status); (what came,
        None) when the deadline passes first. EOF is an EOFError."""
        assert self._channel is not None
        tail = re.compile(
            rb"\n" + re.escape(marker.encode()) + (rb" (\d+)\n" if with_status else rb"\n")
        )
        kept = BoundedOutput()
        buffer = bytearray()
        while True:
            found = tail.search(buffer)
            if found is not None:
                kept.append(bytes(buffer[: found.start()]))
                status = int(found.group(1)) if with_status else 0
                return kept.data(), status
            left = deadline - time.monotonic()
            if left <= 0:
                kept.append(bytes(buffer))
                return kept.data(), None
            self._channel.settimeout(min(left, 1.0))
            try:
                chunk = read(65536)  # type: ignore[operator]
            except TimeoutError:
                continue
            if not chunk:
                raise EOFError("the helper shell ended")
            buffer += chunk
            # Keep what cannot hold the marker out of the search window.
            if len(buffer) > (1 << 20):
                cut = len(buffer) - 4096
                kept.append(bytes(buffer[:cut]))
                del buffer[:cut]

    def close(self) -> None:
        channel, self._channel, self._transport = self._channel, None, None
        if channel is not None:
            with contextlib.suppress(Exception):
                channel.close()
