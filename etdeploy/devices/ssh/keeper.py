"""The keeper: one host's SSH connection kept for the commands that follow, as
OpenSSH's ControlPersist keeps a master connection (Ansible's ssh connection runs
with ControlPersist=60s for the same reason: docs.ansible.com, ssh connection
plugin, read 2026-12-05). Multiplexing alone would not do here: every session a
command opens still runs the user's login shell and rc files (0.1-0.25 s with
`pyenv init` in ~/.bashrc), so the keeper holds the sessions too: the helper shell
(helper.py), the SFTP session and a command session started ahead (wire.py), the
next one started as soon as a command ends.

`python -m etdeploy.devices.ssh.keeper SPEC` is started by the first command that
needs the host (keeper_client.py), under the lock its starters share. It forks
away from its starter, connects with wire.HostLink, and writes one line on stdout:
{"ready": ...} with the target ssh_config resolved to, or {"error": ...} with the
error a direct connect raises (an unknown host key, a refused login). Then it
serves its clients on a Unix socket in a private directory (keeper_ipc.py), each
client connection on a thread of its own, until either nobody has used it for
persist_s seconds or its SSH connection died (the next command starts a new one).

A client that goes away (its socket closes: killed, interrupted) or asks to
cancel has its command's process group killed on the host, as an interrupted
command is killed in-process (wire.HostLink.execute), and its transfer stopped.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, cast

from etdeploy.background import Untrusted, check_peer, fork_child
from etdeploy.devices.lock import held_lock
from etdeploy.devices.ssh.command_results import Cancelled
from etdeploy.devices.ssh.host_settings import SshSettings
from etdeploy.devices.ssh.keeper_ipc import (
    PROTOCOL,
    KeeperPaths,
    completed_to_wire,
    error_to_wire,
    helper_to_wire,
    of_kind,
    target_to_wire,
    wire_field,
    wire_number,
)
from etdeploy.devices.transfer import BackgroundDigest, Download, TransferProgress, Upload
from etdeploy.errors import EtdeployError, TransportError, UsageError
from etdeploy.ipc import LineReader, send
from etdeploy.jsonvalue import JsonObject, JsonValue

if TYPE_CHECKING:
    from etdeploy.devices.ssh.wire import HostLink

# How often the keeper looks at its connection and its idle time.
_WATCH_S = 0.1
# After the connection died: how long requests in flight get to send their answers
# (each fails fast on the dead connection).
_DRAIN_S = 2.0
# What a hello is answered with when the connection has stopped answering: nothing.
_GONE: JsonObject = {}
_UNTRACKED = ("hello", "stats", "shutdown")
# A connection that answered this recently is not asked again when a client arrives.
_PROVEN_S = 1.0


class Keeper:
    """Serves one host's link to the clients that connect to `listener`."""

    def __init__(
        self, link: HostLink, listener: socket.socket, persist_s: float, paths: KeeperPaths
    ) -> None:
        self.link = link
        self.listener = listener
        self.persist_s = persist_s
        self.paths = paths
        self.stop_requested = threading.Event()
        self._inode = os.stat(paths.socket).st_ino
        self._lock = threading.Lock()
        self._clients = 0
        self._last_left = time.monotonic()
        self._closing = False
        # The cancel events of the requests running now (set: their client is gone).
        self._running: set[threading.Event] = set()
        self._proven = time.monotonic()
        self._probe_lock = threading.Lock()
        self._gave_up = ""

    def warm(self) -> None:
        """Start what the first command uses, while its process is still starting."""
        self.link.start_command_session()
        self.link.prefetch_sftp()

        def open_helper() -> None:
            with contextlib.suppress(EtdeployError):
                self.link.helper_run(":", deadline_s=30)

        threading.Thread(target=open_helper, name="keeper-helper", daemon=True).start()

    def running(self, cancel: threading.Event) -> None:
        with self._lock:
            self._running.add(cancel)

    def finished(self, cancel: threading.Event, *, proven: bool) -> None:
        with self._lock:
            self._running.discard(cancel)
            if proven:
                self._proven = time.monotonic()

    def healthy(self) -> bool:
        """Whether the connection still answers, asked (bounded) when nobody is using
        it and it has not shown it lately, or a request outlived its client; one that
        does not answer makes the keeper leave.

        A link that hangs without closing (a stalled route, a suspended host) is not
        seen by paramiko: its keepalives want no reply (Transport.set_keepalive,
        paramiko 5.1, read 2026-12-05). A command connecting for itself would not
        care; one using a keeper would hang on it. So a client arriving at an idle
        keeper has the connection asked for an answer first, as OpenSSH's
        ServerAliveInterval asks with keepalive@openssh.com, which a server answers
        even when it refuses it (ssh_config(5), read 2026-12-05)."""
        if self.stop_requested.is_set():
            return False
        with self._probe_lock:
            with self._lock:
                live = any(not cancel.is_set() for cancel in self._running)
                # A request still running after its client left is one the link may
                # be holding up: asked after, whatever else is going on.
                abandoned = any(cancel.is_set() for cancel in self._running)
                recent = time.monotonic() - self._proven < _PROVEN_S
            if (live or recent) and not abandoned:
                return True
            if self._answers(self.link.connection.settings.connect_timeout_s):
                with self._lock:
                    self._proven = time.monotonic()
                return True
        self._gave_up = "the connection stopped answering"
        self.stop_requested.set()
        return False

    def _answers(self, timeout_s: float) -> bool:
        transport = self.link.connection.current_transport()
        if transport is None or not transport.is_active():
            return False
        answered = threading.Event()

        def ask() -> None:
            with contextlib.suppress(Exception):
                transport.global_request("keepalive@openssh.com", wait=True)
                answered.set()

        threading.Thread(target=ask, name="keeper-probe", daemon=True).start()
        return answered.wait(timeout_s)

    def serve(self) -> str:
        """Serve until idle, asked to stop, or the connection is gone; why it ended."""
        threading.Thread(target=self._accept, name="keeper-accept", daemon=True).start()
        reason = self._watch()
        self._close(reason)
        return reason

    def _accept(self) -> None:
        while True:
            try:
                sock, _ = self.listener.accept()
            except OSError:  # the listener was closed: the keeper is leaving
                return
            try:
                check_peer(sock, "a client of the keeper")
            except (Untrusted, OSError) as exc:
                # Another user's process (the directory is private: it should not
                # have got here) is answered with nothing.
                print(f"refused: {exc}", file=sys.stderr, flush=True)
                sock.close()
                continue
            with self._lock:
                if self._closing:
                    sock.close()
                    continue
                self._clients += 1
            threading.Thread(
                target=self._serve_client, args=(sock,), name="keeper-client", daemon=True
            ).start()

    def _serve_client(self, sock: socket.socket) -> None:
        try:
            ClientSession(self, sock).run()
        except Exception:  # a bug here must not take the other clients' keeper down
            traceback.print_exc()
        finally:
            with contextlib.suppress(OSError):
                sock.close()
            with self._lock:
                self._clients -= 1
                self._last_left = time.monotonic()

    def _watch(self) -> str:
        connection = self.link.connection
        while not self.stop_requested.wait(_WATCH_S):
            # A reconnect (connects > 1) means the first connection died: a keeper
            # serves one connection, and the next command starts a keeper anew.
            if not connection.alive() or connection.connects > 1:
                return "the connection ended"
            with self._lock:
                idle = time.monotonic() - self._last_left
                if self._clients == 0 and idle >= self.persist_s:
                    # Under the lock: no client is accepted from here on.
                    self._closing = True
                    return "idle"
        return self._gave_up or "asked to stop"

    def _close(self, reason: str) -> None:
        with self._lock:
            self._closing = True
        with contextlib.suppress(OSError):
            self.listener.close()
        # Under the starters' lock: a keeper started since owns the socket's name now.
        with held_lock(self.paths.lock, 2.0) as held:
            if held:
                with contextlib.suppress(OSError):
                    if os.stat(self.paths.socket).st_ino == self._inode:
                        self.paths.socket.unlink()
                with contextlib.suppress(OSError, ValueError):
                    if int(self.paths.pid.read_text()) == os.getpid():
                        self.paths.pid.unlink()
        deadline = time.monotonic() + _DRAIN_S
        while reason != "idle" and time.monotonic() < deadline:
            with self._lock:
                if self._clients == 0:
                    break
            time.sleep(0.02)
        self.link.close()
        # A log with nothing in it (no traceback) is not kept.
        with contextlib.suppress(OSError):
            if self.paths.log.stat().st_size == 0:
                self.paths.log.unlink()


class ClientSession:
    """One client socket: its requests, one at a time, each on a worker thread while
    this one listens for a cancel or the socket's end."""

    def __init__(self, keeper: Keeper, sock: socket.socket) -> None:
        self.keeper = keeper
        self.link = keeper.link
        self.sock = sock
        self._send_lock = threading.Lock()
        self._cancel: threading.Event | None = None
        self._worker: threading.Thread | None = None
        # Whether this client ran a command (its session is then used up).
        self.executed = False

    def run(self) -> None:
        reader = LineReader(self.sock)
        try:
            while (message := reader.read()) is not None:
                if message.get("op") == "cancel":
                    if self._cancel is not None:
                        self._cancel.set()
                    continue
                if self._worker is not None:
                    self._worker.join()  # a client sends its next request after the answer
                cancel = threading.Event()
                self._cancel = cancel
                self._worker = threading.Thread(
                    target=self._handle, args=(message, cancel), name="keeper-op", daemon=True
                )
                self._worker.start()
        except (OSError, ValueError):
            pass  # a client that died or sent garbage: as if it had closed the socket
        finally:
            # The client is gone: what it started must not outlive it.
            if self._cancel is not None:
                self._cancel.set()
            if self._worker is not None:
                self._worker.join()
            if self.executed and self.link.connection.alive():
                self.link.start_command_session()  # the next command's, ahead

    def send(self, message: JsonObject) -> None:
        with self._send_lock, contextlib.suppress(OSError):
            send(self.sock, message)

    def _handle(self, message: JsonObject, cancel: threading.Event) -> None:
        reply: JsonObject
        # What uses the connection (not a hello, which may be what asks after it).
        tracked = message.get("op") not in _UNTRACKED
        if tracked:
            self.keeper.running(cancel)
        proven = False
        try:
            reply = {"ok": self._dispatch(message, cancel)}
            proven = True
        except Cancelled:
            reply = {"cancelled": True}
        except EtdeployError as exc:
            reply = {"error": error_to_wire(exc)}
            proven = not isinstance(exc, TransportError)
        except Exception as exc:
            traceback.print_exc()
            failed = TransportError(
                f"the ssh keeper failed: {type(exc).__name__}: {exc}",
                "run again; persist_s = 0 in the device's table connects without a keeper",
                device=self.link.name,
                retryable=True,
            )
            reply = {"error": error_to_wire(failed)}
        finally:
            if tracked:
                self.keeper.finished(cancel, proven=proven)
        if reply.get("ok") is _GONE:
            # No answer: the client finds no keeper and starts another.
            with contextlib.suppress(OSError):
                self.sock.shutdown(socket.SHUT_RDWR)
            return
        self.send(reply)

    def _dispatch(self, message: JsonObject, cancel: threading.Event) -> JsonValue:
        op = message.get("op")
        link = self.link
        if op == "hello":
            if not self.keeper.healthy():
                return _GONE
            return {"pid": os.getpid(), "protocol": PROTOCOL, "target": target_to_wire(link.target)}
        if op == "stats":
            counts: JsonObject = {**link.counters(), "pid": os.getpid()}
            return counts
        if op == "helper_run":
            done = link.helper_run(
                wire_field(message, "script", str), deadline_s=wire_number(message, "deadline_s")
            )
            return helper_to_wire(done)
        if op == "execute":
            try:
                idle = message.get("idle_timeout_s")
                completed = link.execute(
                    wire_field(message, "script", str),
                    deadline_s=wire_number(message, "deadline_s"),
                    idle_timeout_s=None if idle is None else wire_number(message, "idle_timeout_s"),
                    cancel=cancel,
                )
            finally:
                # The next command's session is started ahead when this command is
                # over (its client left, ClientSession.run): starting it now would
                # make sshd fork a login shell while this command pulls its outputs.
                self.executed = True
            return completed_to_wire(completed)
        if op == "upload":
            return self._upload(message, cancel)
        if op == "download":
            self._download(message, cancel)
            return None
        if op == "exists":
            return link.exists(wire_field(message, "path", str))
        if op == "shutdown":
            self.keeper.stop_requested.set()
            return None
        raise UsageError(f"the ssh keeper has no request {op!r}", "etdeploy and its keeper differ")

    def _reporter(self, cancel: threading.Event) -> Callable[[str, int, int], None]:
        """A progress callback that passes progress on, and stops a cancelled transfer."""

        def report(_path: str, done: int, total: int) -> None:
            if cancel.is_set():
                raise Cancelled("the transfer's caller went away")
            self.send({"progress": done, "total": total})

        return report

    def _upload(self, message: JsonObject, cancel: threading.Event) -> int:
        size, target = wire_field(message, "size", int), wire_field(message, "target", str)
        progress = TransferProgress(self._reporter(cancel), target, size)
        # The digest is the client's business (it records it); the upload needs none.
        upload = Upload(
            Path(wire_field(message, "local", str)),
            target,
            size,
            wire_field(message, "mode", int),
            progress,
            cast(BackgroundDigest, None),
        )
        upload.partial = wire_field(message, "partial", str)
        return self.link.upload(upload)

    def _download(self, message: JsonObject, cancel: threading.Event) -> None:
        partial = Path(wire_field(message, "partial", str))
        download = Download(
            wire_field(message, "source", str),
            Path(wire_field(message, "local", str)),
            partial,
            self._reporter(cancel),
        )
        try:
            self.link.download(download)
        except BaseException:
            # The client removes its partial file too; one written after it did must
            # not be left behind.
            partial.unlink(missing_ok=True)
            raise


def _report(message: JsonObject) -> None:
    """The one line the starter waits for; stdout is /dev/null after it."""
    os.write(1, json.dumps(message).encode() + b"\n")
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.close(devnull)


def _listen(paths: KeeperPaths) -> socket.socket:
    """The keeper's socket (its starter holds the lock: a socket file there is stale)."""
    paths.socket.unlink(missing_ok=True)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    # Made 0600 from the start (the directory is private too): no moment when
    # another user could connect.
    old_umask = os.umask(0o177)
    try:
        listener.bind(str(paths.socket))
    finally:
        os.umask(old_umask)
    listener.listen(64)
    return listener


def main(argv: list[str] | None = None) -> int:
    spec = json.loads((sys.argv[1:] if argv is None else argv)[0])
    # The keeper is a forked child, away from its starter: the starter reaps this
    # first process at once and reads the ready line from the child (the pipe is
    # shared), so no zombie is left to it; the child ends only with os._exit.
    fork_child(lambda: _keep(spec))
    return 0


def _keep(spec: JsonObject) -> int:
    settings = SshSettings(**of_kind(spec.get("settings"), dict, "settings"))
    paths = KeeperPaths.of(Path(wire_field(spec, "dir", str)), str(spec["key"]))
    try:
        keeper = _connected(settings, str(spec["name"]), paths)
    except EtdeployError as exc:
        # Said, then gone at once: the starter waits for this process's end (its
        # stdout closing) before it raises the error.
        os.write(1, json.dumps({"error": error_to_wire(exc)}).encode() + b"\n")
        return 1
    except Exception as exc:  # the starter connects in its own process instead
        traceback.print_exc()
        os.write(1, json.dumps({"failed": f"{type(exc).__name__}: {exc}"}).encode() + b"\n")
        return 1
    keeper.serve()
    # Nothing is left to do; paramiko's threads may sit in a read of the dead socket:
    # end_child ends the process with os._exit.
    return 0


def _connected(settings: SshSettings, name: str, paths: KeeperPaths) -> Keeper:
    """Connect, listen, warm the sessions and say so to the starter."""
    from etdeploy.devices.ssh.connection import SshConnection, resolve_target
    from etdeploy.devices.ssh.wire import HostLink

    target = resolve_target(settings)
    link = HostLink(SshConnection(settings, target, name))
    link.connect()
    listener = _listen(paths)
    paths.pid.write_text(str(os.getpid()))
    keeper = Keeper(link, listener, settings.persist_s, paths)
    keeper.warm()
    _report({"ready": {"pid": os.getpid(), "target": target_to_wire(target)}})
    return keeper


if __name__ == "__main__":
    sys.exit(main())
