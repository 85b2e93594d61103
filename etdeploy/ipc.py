"""JSON messages over a local stream socket, one a line: what etdeploy's background
processes (the warm server, etdeploy.warm; an SSH host's keeper,
etdeploy.devices.ssh.keeper) and the commands they serve say to each other. Standard
library only: the warm server's client imports it before anything else of etdeploy."""

from __future__ import annotations

import json
import socket
from typing import Any


def send(sock: socket.socket, message: dict[str, Any], fds: list[int] | None = None) -> None:
    """One message; with `fds`, those file descriptors travel with it (SCM_RIGHTS)."""
    data = json.dumps(message, separators=(",", ":")).encode() + b"\n"
    if fds:
        socket.send_fds(sock, [data], fds)
    else:
        sock.sendall(data)


class LineReader:
    """Messages off a socket, one a line; None at the end of the stream. `first`: bytes
    already received with it (socket.recv_fds' data, read with the descriptors)."""

    def __init__(self, sock: socket.socket, first: bytes = b"") -> None:
        self.sock = sock
        self._buffer = bytearray(first)

    def read(self) -> dict[str, Any] | None:
        while True:
            newline = self._buffer.find(b"\n")
            if newline >= 0:
                line = bytes(self._buffer[:newline])
                del self._buffer[: newline + 1]
                message = json.loads(line)
                if not isinstance(message, dict):
                    raise ValueError(f"not a message: {line[:80]!r}")
                return message
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                return None
            self._buffer += chunk
