"""JSON messages over a local stream socket, one a line: what a background helper the
user turned on (an SSH host's keeper, etdeploy.devices.ssh.keeper) and the commands
it serves say to each other."""

from __future__ import annotations

import json
import socket
from collections.abc import Mapping

from etdeploy.jsonvalue import JsonObject


def send(sock: socket.socket, message: Mapping[str, object]) -> None:
    """One message."""
    sock.sendall(json.dumps(message, separators=(",", ":")).encode() + b"\n")


class LineReader:
    """Messages off a socket, one a line; None at the end of the stream."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._buffer = bytearray()

    def read(self) -> JsonObject | None:
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
