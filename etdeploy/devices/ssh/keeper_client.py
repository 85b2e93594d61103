"""The keeper's client: the link SshDevice uses when persist_s > 0 (link.SshLink).

Each request goes over a Unix socket to the host's keeper (keeper.py), found by the
settings' digest (keeper_ipc.py) and started when there is none: under a lock its
starters share, so two commands starting at once end with one keeper. A socket
serves one request at a time; requests made at once (the push's threads) each take
a socket of their own from a small pool. Files move by path (the keeper is this
user on this machine): an upload's local file is read by the keeper, a download's
partial file written by it, and progress comes back as messages.

An interruption (Ctrl-C, SIGTERM) during a request sends a cancel and waits, bounded,
for the keeper's answer: a command's group is killed on the host before this
process goes on unwinding, as in-process. A keeper that cannot be had (it would not
start, or died before answering) is replaced by a connection in this process, and
the command goes on; one that vanishes in the middle of a request is a lost
connection, as a dropped SSH connection is. A keeper directory or socket that is
not this user's alone (etdeploy.background) is refused with one warning line (the
"etdeploy" logger), and the command connects itself.

The keeper gets only the allowed environment variables (etdeploy.background), and
SSH_AUTH_SOCK when the device lets the agent be used; path settings are sent
expanded, so that none of them depends on a variable it does not get.

Nothing here imports paramiko: it is ~60-80 ms of every command that needs none.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import select
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict

from etdeploy.background import Untrusted, check_peer, environment
from etdeploy.devices.lock import held_lock
from etdeploy.devices.ssh.command_results import Completed, HelperResult, checked_output
from etdeploy.devices.ssh.host_settings import SshSettings, SshTarget
from etdeploy.devices.ssh.keeper_ipc import (
    PROTOCOL,
    KeeperPaths,
    as_wire,
    completed_from_wire,
    error_from_wire,
    helper_from_wire,
    keeper_dir,
    keeper_key,
    of_kind,
    target_from_wire,
    wire_field,
)
from etdeploy.devices.ssh.link import SshLink, direct_link
from etdeploy.devices.transfer import Download, TransferProgress, Upload
from etdeploy.errors import EtdeployError, TransportError
from etdeploy.ipc import LineReader, send
from etdeploy.jsonvalue import JsonObject, JsonValue

# How long an interrupted request waits for the keeper's answer to its cancel: a
# command's kill takes the wrapper's grace (2 s) and a session; a transfer stops at
# its next chunk. Past it the socket is closed, which the keeper reads as a cancel.
_CANCEL_WAIT_S = {"execute": 20.0}
_CANCEL_WAIT_DEFAULT_S = 5.0
# A keeper answers its hello at once, or after asking its idle connection for an
# answer (bounded by connect_timeout_s, keeper.Keeper.healthy); one that does not
# answer by then is not used.
_HELLO_MARGIN_S = 5.0
# Python's start and the keeper's imports, on top of the connect's own timeouts.
_START_MARGIN_S = 30.0
# How long a keeper that said it failed gets to be gone (it ends with os._exit).
_GONE_WAIT_S = 5.0

_log = logging.getLogger("etdeploy")


class _Channel:
    """One socket to the keeper and what has been read from it."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.reader = LineReader(sock)

    def usable(self) -> bool:
        """A keeper never speaks unasked: a readable idle socket is one it closed."""
        try:
            readable, _, _ = select.select([self.sock], [], [], 0)
        except (OSError, ValueError):
            return False
        return not readable

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()


class KeeperLink:
    """SshLink through the host's keeper; a direct link when no keeper can be had."""

    def __init__(self, settings: SshSettings, name: str) -> None:
        self.settings = settings
        self.name = name
        self._pool: list[_Channel] = []
        self._lock = threading.Lock()
        self._target: SshTarget | None = None
        self._direct: SshLink | None = None
        #: The pid of the keeper last spoken to.
        self.keeper_pid: int | None = None

    # -- the keeper ---------------------------------------------------------------------

    def _paths(self) -> KeeperPaths:
        return KeeperPaths.of(keeper_dir(), keeper_key(self.settings, self.name))

    def _channel(self) -> _Channel | None:
        """A socket to the keeper, started if need be; None: the direct link serves."""
        if self._direct is not None:
            return None
        with self._lock:
            while self._pool:
                channel = self._pool.pop()
                if channel.usable():
                    return channel
                channel.close()
        try:
            channel = self._kept_channel()
        except Untrusted as exc:
            _log.warning(
                "%s: ssh keeper not used: %s; this command connects itself "
                "(persist_s = 0 in its device table keeps no keeper)",
                self.name,
                exc,
            )
            channel = None
        if channel is None:
            self._fall_back()
        return channel

    def _kept_channel(self) -> _Channel | None:
        try:
            paths = self._paths()
        except OSError:
            return None
        channel = self._dial(paths)
        if channel is not None:
            return channel
        with held_lock(paths.lock, self._start_timeout_s()) as held:
            if held:
                # Another command may have started it while this one waited.
                channel = self._dial(paths)
                if channel is None and self._start(paths):
                    channel = self._dial(paths)
        return channel

    def _dial(self, paths: KeeperPaths) -> _Channel | None:
        """A socket to a live keeper that said hello, or None; Untrusted when what
        listens there is another user's process."""
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        channel = _Channel(sock)
        try:
            sock.settimeout(self.settings.connect_timeout_s + _HELLO_MARGIN_S)
            sock.connect(str(paths.socket))
        except OSError:
            channel.close()
            return None
        try:
            check_peer(sock, f"the keeper at {paths.socket}")
        except Untrusted:
            channel.close()
            raise
        try:
            send(sock, {"op": "hello"})
            answer = channel.reader.read()
            sock.settimeout(None)
        except (OSError, ValueError):
            channel.close()
            return None
        hello = answer.get("ok") if answer else None
        if not isinstance(hello, dict) or hello.get("protocol") != PROTOCOL:
            channel.close()
            return None
        self._target = target_from_wire(hello["target"])
        self.keeper_pid = wire_field(hello, "pid", int)
        return channel

    def _start_timeout_s(self) -> float:
        s = self.settings
        return s.connect_timeout_s + s.banner_timeout_s + s.auth_timeout_s + _START_MARGIN_S

    def _start(self, paths: KeeperPaths) -> bool:
        """Start the keeper and wait for its word: True when it serves, an error when
        its connect failed (the one a direct connect raises), False when it could not
        be started at all."""
        spec = {
            "settings": _expanded(self.settings),
            "name": self.name,
            "dir": str(paths.socket.parent),
            "key": paths.key,
        }
        command = [sys.executable, "-m", "etdeploy.devices.ssh.keeper", json.dumps(spec)]
        agent = ("SSH_AUTH_SOCK",) if self.settings.allow_agent else ()
        try:
            with open(paths.log, "wb") as log:
                process = subprocess.Popen(
                    command,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=log,
                    start_new_session=True,
                    close_fds=True,
                    env=environment(extra=agent),
                )
        except OSError:
            return False
        assert process.stdout is not None
        try:
            line = _read_line(process.stdout.fileno(), self._start_timeout_s())
            word = _word(line)
            if "ready" not in word:
                # A keeper that failed ends as it says so: its stdout closes when it
                # is gone, and only then is its error this command's.
                _read_to_end(process.stdout.fileno(), _GONE_WAIT_S)
        finally:
            process.stdout.close()
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=5)  # the first process forks and leaves at once
        if "error" in word:
            raise error_from_wire(word["error"])
        return "ready" in word

    def _fall_back(self) -> None:
        """No keeper: the direct link serves this device from now on."""
        with self._lock:
            if self._direct is None:
                self._direct = direct_link(self.settings, self.name)

    def _direct_link(self) -> SshLink:
        assert self._direct is not None
        return self._direct

    # -- requests -----------------------------------------------------------------------

    def _request(
        self,
        channel: _Channel,
        request: Mapping[str, object],
        what: str,
        progress: Callable[[JsonObject], None] | None = None,
    ) -> JsonValue:
        """Send one request; its answer's value, or the error it raised here."""
        answer: JsonObject | None = None
        try:
            send(channel.sock, request)
            while True:
                answer = channel.reader.read()
                if answer is None:
                    raise self._keeper_lost(what, None)
                if "progress" not in answer:
                    break
                if progress is not None:
                    progress(answer)
        except (BrokenPipeError, ConnectionResetError) as exc:
            channel.close()
            # Not sent (EPIPE), or sent and never read: a Unix socket's reader gets
            # ECONNRESET only when its peer closed with data unread (Linux
            # net/unix/af_unix.c, unix_release_sock). A keeper that went away with the
            # request unread did none of it: it goes to a keeper started anew.
            fresh = self._channel() if answer is None else None
            if fresh is None:
                raise self._keeper_lost(what, exc) from exc
            return self._request(fresh, request, what, progress)
        except (OSError, ValueError) as exc:
            channel.close()
            raise self._keeper_lost(what, exc) from exc
        except BaseException:
            if answer is None or "progress" in answer:
                self._cancel(
                    channel, _CANCEL_WAIT_S.get(str(request["op"]), _CANCEL_WAIT_DEFAULT_S)
                )
            channel.close()
            raise
        with self._lock:
            self._pool.append(channel)
        if "ok" in answer:
            return answer["ok"]
        if "error" in answer:
            raise error_from_wire(answer["error"])
        raise self._keeper_lost(what, None)  # cancelled, though nobody here asked

    def _cancel(self, channel: _Channel, wait_s: float) -> None:
        """Ask the keeper to stop the request, and wait (bounded) until it has."""
        deadline = time.monotonic() + wait_s
        try:
            send(channel.sock, {"op": "cancel"})
            while (left := deadline - time.monotonic()) > 0:
                channel.sock.settimeout(left)
                answer = channel.reader.read()
                if answer is None or "progress" not in answer:
                    return
        except (OSError, ValueError):
            return

    def _keeper_lost(self, what: str, exc: BaseException | None) -> TransportError:
        where = self._target.display if self._target else self.settings.host
        why = f": {exc}" if exc else ""
        return TransportError(
            f"connection to {where} lost during {what}: its ssh keeper "
            f"(pid {self.keeper_pid}) went away{why}",
            "a retry starts a new keeper and reconnects",
            device=self.name,
            retryable=True,
        )

    # -- SshLink ------------------------------------------------------------------------

    @property
    def target(self) -> SshTarget:
        if self._target is None:
            channel = self._channel()
            if channel is None:
                return self._direct_link().target
            with self._lock:
                self._pool.append(channel)
        assert self._target is not None
        return self._target

    def connect(self) -> None:
        if self._direct is not None:
            self._direct.connect()
            return
        self.target  # noqa: B018  reaching the keeper is connecting

    def start_command_session(self) -> None:
        # A keeper keeps the next command's session started itself.
        if self._direct is not None:
            self._direct.start_command_session()

    def prefetch_sftp(self) -> None:
        # A keeper keeps its SFTP session open.
        if self._direct is not None:
            self._direct.prefetch_sftp()

    def helper_run(self, script: str, *, deadline_s: float) -> HelperResult:
        channel = self._channel()
        if channel is None:
            return self._direct_link().helper_run(script, deadline_s=deadline_s)
        request = {"op": "helper_run", "script": script, "deadline_s": deadline_s}
        return helper_from_wire(self._request(channel, request, "a helper command"))

    def checked(self, script: str, what: str, *, deadline_s: float = 60) -> str:
        done = self.helper_run(script, deadline_s=deadline_s)
        return checked_output(done, script, what, deadline_s, self.target, self.name)

    def execute(
        self, script: str, *, deadline_s: float, idle_timeout_s: float | None = None
    ) -> Completed:
        channel = self._channel()
        if channel is None:
            return self._direct_link().execute(
                script, deadline_s=deadline_s, idle_timeout_s=idle_timeout_s
            )
        request = {
            "op": "execute",
            "script": script,
            "deadline_s": deadline_s,
            "idle_timeout_s": idle_timeout_s,
        }
        return completed_from_wire(self._request(channel, request, "a command"))

    def upload(self, upload: Upload) -> int:
        channel = self._channel()
        if channel is None:
            return self._direct_link().upload(upload)
        request = {
            "op": "upload",
            # Absolute: the keeper may have been started from another directory.
            "local": os.path.abspath(upload.local),
            "target": upload.target,
            "partial": upload.partial,
            "size": upload.size,
            "mode": upload.mode,
        }
        sent = self._request(
            channel,
            request,
            f"upload of {upload.local.name}",
            lambda message: upload.progress.update(wire_field(message, "progress", int)),
        )
        return of_kind(sent, int, "count of bytes sent")

    def download(self, download: Download) -> None:
        channel = self._channel()
        if channel is None:
            self._direct_link().download(download)
            return
        reports: list[TransferProgress] = []

        def progress(message: JsonObject) -> None:
            if not reports:
                reports.append(download.progress(wire_field(message, "total", int)))
            reports[0].update(wire_field(message, "progress", int))

        request = {
            "op": "download",
            "source": download.source,
            "local": os.path.abspath(download.local),
            "partial": os.path.abspath(download.partial),
        }
        self._request(channel, request, f"download of {download.source}", progress)

    def exists(self, path: str) -> bool:
        channel = self._channel()
        if channel is None:
            return self._direct_link().exists(path)
        return bool(self._request(channel, {"op": "exists", "path": path}, f"stat of {path}"))

    def counters(self) -> dict[str, int]:
        """The keeper's counts (its connections and sessions) and its pid."""
        channel = self._channel()
        if channel is None:
            return self._direct_link().counters()
        counts = as_wire(self._request(channel, {"op": "stats"}, "asking for counts"), "counts")
        return {key: wire_field(counts, key, int) for key in counts}

    def shutdown(self) -> None:
        """Ask the keeper to leave now (tests; `etdeploy` itself lets it idle out)."""
        channel = None if self._direct is not None else self._dial(self._paths())
        if channel is not None:
            with contextlib.suppress(EtdeployError):
                self._request(channel, {"op": "shutdown"}, "a shutdown")
        self.close()

    def close(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, []
        for channel in pool:
            channel.close()
        if self._direct is not None:
            self._direct.close()


def _word(line: bytes) -> JsonObject:
    try:
        word = json.loads(line) if line else {}
    except ValueError:
        return {}
    return word if isinstance(word, dict) else {}


def _expanded(settings: SshSettings) -> JsonObject:
    """The settings with ~ and $VARIABLES of their paths expanded here, where the
    variables are (the keeper gets only the allowed ones)."""
    values: JsonObject = asdict(settings)
    for key in ("key_filename", "known_hosts", "ssh_config"):
        found = values.get(key)
        if isinstance(found, str) and found:
            values[key] = os.path.expanduser(os.path.expandvars(found))
    return values


def _read_to_end(fd: int, timeout_s: float) -> None:
    """Read fd until its writers have all closed it (or timeout_s has passed)."""
    deadline = time.monotonic() + timeout_s
    while (left := deadline - time.monotonic()) > 0:
        readable, _, _ = select.select([fd], [], [], left)
        if not readable or not os.read(fd, 65536):
            return


def _read_line(fd: int, timeout_s: float) -> bytes:
    """One line from fd within timeout_s; what came (maybe nothing) at EOF or timeout."""
    deadline = time.monotonic() + timeout_s
    data = bytearray()
    while b"\n" not in data:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        readable, _, _ = select.select([fd], [], [], left)
        if not readable:
            break
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        data += chunk
    return bytes(data).split(b"\n", 1)[0]
