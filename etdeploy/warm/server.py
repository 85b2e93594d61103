"""The warm server (see the package docstring): `python -m etdeploy.warm.server SOCKET`.

One process per socket (an flock on SOCKET.lock; a second one started at the same
time leaves). It imports what a run needs, records the modification time of every
etdeploy source file it imported, then waits for commands. Each command is checked
(the same identity as the server's, no source file changed since), then run in a
forked child: the child takes the command's three streams, working directory, umask
and environment, makes its consoles again for those streams, and runs
`etdeploy.cli.main` as the command would have; its end (status, or the signal it died
of) goes back to the command. A command that goes away before its child ended (it
was killed) has the child sent SIGTERM, which etdeploy handles as an interruption:
what it made on the device is removed, as when the command itself gets SIGTERM.

Single-threaded, so that forking is safe: the socket, each command's connection and
a wake-up pipe for SIGCHLD are watched with select.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import os
import select
import signal
import socket
import sys
import time
from pathlib import Path
from typing import Any

from etdeploy.ipc import LineReader, send
from etdeploy.warm.client import IDLE_ENV, IDLE_S, identity

# What a run imports on its way (its own command module first): imported once here.
PRELOAD = (
    "etdeploy.cli", "etdeploy.cli.run", "etdeploy.pipeline.run", "etdeploy.pipeline.execute",
    "etdeploy.pipeline.verify", "etdeploy.pipeline.task", "etdeploy.pipeline.memory",
    "etdeploy.bundle.load", "etdeploy.devices.local", "etdeploy.devices.adb",
    "etdeploy.devices.ssh.device", "etdeploy.devices.ssh.keeper_client",
    "etdeploy.devices.ssh.connection", "etdeploy.report.console", "etdeploy.runner_build.choice",
    "etdeploy.runner_build.build", "etdeploy.accuracy", "etdeploy.dataset", "etdeploy.npz",
)  # fmt: skip


class Server:
    """The socket, the children running commands and the commands waiting for them."""

    def __init__(self, path: Path, idle_s: float) -> None:
        self.path = path
        self.idle_s = idle_s
        self.key = identity()
        self.sources = _source_times()
        self.children: dict[int, socket.socket] = {}
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_w, False)
        os.set_blocking(self.wake_r, False)

    def serve(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()  # left by a server that died (the lock says none runs)
        self.listener.bind(str(self.path))
        self.listener.listen(16)
        signal.set_wakeup_fd(self.wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        last = time.monotonic()
        try:
            while True:
                watched: list[Any] = [self.listener, self.wake_r, *self.children.values()]
                ready, _, _ = select.select(watched, [], [], 1.0)
                for item in ready:
                    if item is self.listener:
                        self._accept()
                    elif item is self.wake_r:
                        with contextlib.suppress(BlockingIOError):
                            os.read(self.wake_r, 512)
                    elif isinstance(item, socket.socket):
                        self._command_gone(item)
                self._reap()
                if self.children:
                    last = time.monotonic()
                elif time.monotonic() - last > self.idle_s or self._stale() is not None:
                    return
        finally:
            with contextlib.suppress(OSError):
                self.path.unlink()

    def _accept(self) -> None:
        connection, _ = self.listener.accept()
        try:
            # The header's first bytes come with the three descriptors.
            first, fds, _, _ = socket.recv_fds(connection, 65536, 3)
            request = LineReader(connection, first).read()
            refusal = self._refusal(request, fds)
            if refusal is not None:
                send(connection, {"refused": refusal})
                connection.close()
                for fd in fds:
                    os.close(fd)
                return
            assert request is not None
            pid = os.fork()
            if pid == 0:  # the child: never returns
                self._run_child(connection, request, fds)
            for fd in fds:
                os.close(fd)
            self.children[pid] = connection
            send(connection, {"pid": pid})
        except (OSError, ValueError):  # gone, or not a command's message
            connection.close()

    def _refusal(self, request: dict[str, Any] | None, fds: list[int]) -> str | None:
        if request is None or len(fds) != 3:
            return "not a command"
        if request.get("key") != self.key:
            return "another environment"
        return self._stale()

    def _stale(self) -> str | None:
        """Why this server must not run another command: a source file changed, a
        thread is running (forking would copy it half-way)."""
        if _source_times() != self.sources:
            return "etdeploy's sources changed"
        import threading

        if threading.active_count() != 1:
            return "a thread is running"
        return None

    def _run_child(
        self, connection: socket.socket, request: dict[str, Any], fds: list[int]
    ) -> None:
        code: str | int | None = 3
        try:
            self.listener.close()
            for other in self.children.values():
                other.close()
            connection.close()
            os.close(self.wake_r)
            os.close(self.wake_w)
            signal.set_wakeup_fd(-1)
            become_command(request, fds)
            from etdeploy.cli import main

            try:
                main()
                code = 0
            except SystemExit as exc:
                code = exc.code
        finally:
            from etdeploy.cli._exit import end_process

            end_process(code)
            os._exit(3)  # end_process exits; this only if it could not

    def _reap(self) -> None:
        for pid in list(self.children):
            try:
                done, status = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                done, status = pid, 0
            if done == 0:
                continue
            connection = self.children.pop(pid)
            if os.WIFSIGNALED(status):
                message: dict[str, object] = {"signal": os.WTERMSIG(status)}
            else:
                message = {"exit": os.waitstatus_to_exitcode(status)}
            with contextlib.suppress(OSError):
                send(connection, message)
            connection.close()

    def _command_gone(self, connection: socket.socket) -> None:
        """A command's connection is readable: it closed (its process ended before the
        child did). The child is interrupted as the command would have been."""
        with contextlib.suppress(OSError):
            if connection.recv(1, socket.MSG_PEEK):
                return
        for pid, held in list(self.children.items()):
            if held is connection:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGTERM)


def become_command(request: dict[str, Any], fds: list[int]) -> None:
    """The process takes on the command: its streams (descriptors 0, 1, 2 and Python's
    text streams over them, with its encodings and buffering), working directory,
    umask, environment, arguments and default signal handling, and etdeploy's
    consoles are made again for those streams (rich reads a stream's terminal and
    colour settings when a console is made)."""
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(request["cwd"])
    os.umask(int(request["umask"]))
    os.environ.clear()
    os.environ.update(request["env"])
    sys.argv = ["etdeploy", *request["argv"]]
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGCHLD):
        signal.signal(signum, signal.SIG_DFL)
    streams = request.get("streams") or {}
    sys.stdin = io.TextIOWrapper(io.BufferedReader(io.FileIO(0, "r", closefd=False)))
    sys.stdout = _text_stream(1, streams.get("stdout") or {})
    sys.stderr = _text_stream(2, streams.get("stderr") or {})
    for name in ("stdin", "stdout", "stderr"):  # what sys.__stdout__ & co. name too
        setattr(sys, f"__{name}__", getattr(sys, name))
    from etdeploy.cli import _app

    _app.console.__init__()  # type: ignore[misc]
    _app.err_console.__init__(stderr=True)  # type: ignore[misc]


def _text_stream(fd: int, state: dict[str, Any]) -> io.TextIOWrapper:
    return io.TextIOWrapper(
        io.BufferedWriter(io.FileIO(fd, "w", closefd=False)),
        encoding=str(state.get("encoding") or "utf-8"),
        errors=str(state.get("errors") or "strict"),
        line_buffering=bool(state.get("line_buffering")),
        write_through=bool(state.get("write_through")),
    )


def _source_times() -> dict[str, int]:
    """Each imported etdeploy module's source file and its mtime (ns)."""
    times: dict[str, int] = {}
    for name, module in list(sys.modules.items()):
        path = getattr(module, "__file__", None)
        if not name.startswith("etdeploy") or not path:
            continue
        try:
            times[path] = os.stat(path).st_mtime_ns
        except OSError:
            times[path] = -1
    return times


def main(argv: list[str]) -> int:
    path = Path(argv[0])
    import fcntl

    lock = os.open(f"{path}.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return 0  # another server took this socket
    os.ftruncate(lock, 0)
    os.write(lock, f"{os.getpid()}\n".encode())  # who serves it (`etdeploy doctor`, tests)
    for name in PRELOAD:
        with contextlib.suppress(ImportError):
            importlib.import_module(name)
    from etdeploy.cli import load_commands

    load_commands(("run",))
    idle = float(os.environ.get(IDLE_ENV) or IDLE_S)
    Server(path, idle).serve()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
