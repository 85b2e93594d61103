"""A small client of the adb server's smart-socket protocol: what etdeploy asks a
server, without adbutils (whose import brings requests: 0.1-0.15 s of every run on
a phone; adbutils stays the source of the adb binary, connection.start_local_server).

The protocol (AOSP packages/modules/adb, OVERVIEW.TXT and SERVICES.TXT, read
2026-12-04): a client opens a TCP connection to the server and sends a request as
four lowercase hex digits of its length and the request itself; the server answers
"OKAY", or "FAIL" and a message (four hex digits of length, then the text). Some
host requests follow their OKAY with a block in the same framing (host:version,
host:devices-l, host:connect:ADDR, host-serial:SERIAL:get-state). After
host:transport:SERIAL is OKAYed the connection belongs to that phone: the next
request names one of its services (shell,v2,raw:..., sync:), and what follows is
that service's stream.
"""

from __future__ import annotations

import contextlib
import socket
from dataclasses import dataclass, field

OKAY, FAIL = b"OKAY", b"FAIL"


class AdbError(Exception):
    """The server refused a request (its FAIL message), or said something that is not
    the protocol."""


class AdbTimeout(AdbError):
    """The server did not answer in time."""


class AdbConnectionError(AdbError):
    """Nothing accepts connections where the server should be."""


def read_exact(sock: socket.socket, n: int) -> bytes:
    """n bytes from sock; EOFError when the stream ends first."""
    parts: list[bytes] = []
    have = 0
    while have < n:
        chunk = sock.recv(min(n - have, 1 << 20))
        if not chunk:
            raise EOFError(f"connection closed after {have} of {n} bytes")
        parts.append(chunk)
        have += len(chunk)
    return b"".join(parts)


class ServerSocket:
    """One connection to the server: requests and their answers."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock

    def request(self, text: str) -> None:
        """Send a request and wait for its OKAY; a FAIL is an AdbError with its message."""
        payload = text.encode()
        try:
            self.sock.sendall(b"%04x%s" % (len(payload), payload))
            status = read_exact(self.sock, 4)
            if status == FAIL:
                raise AdbError(self.read_block())
        except TimeoutError:
            raise AdbTimeout(f"the adb server did not answer {text.split(':', 2)[:2]}") from None
        if status != OKAY:
            raise AdbError(f"unexpected answer {status!r} to {text!r}")

    def read_block(self) -> str:
        """A length-framed string (four hex digits, then that many bytes)."""
        try:
            header = read_exact(self.sock, 4)
            size = int(header, 16)
            return read_exact(self.sock, size).decode(errors="replace")
        except TimeoutError:
            raise AdbTimeout("the adb server did not finish its answer") from None
        except ValueError:
            raise AdbError("the adb server's answer is not length-framed") from None

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()

    def __enter__(self) -> ServerSocket:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass(frozen=True)
class Attached:
    """One line of the server's device list: serial, state and `adb devices -l`'s
    tags (product, model, device, transport_id)."""

    serial: str
    state: str
    tags: dict[str, str] = field(default_factory=dict)


class ServerClient:
    """The requests etdeploy makes of one server (host, port), each on its own
    connection, with `timeout_s` for connecting and for each short answer."""

    def __init__(self, host: str, port: int, timeout_s: float) -> None:
        self.host = host
        self.port = port
        self.timeout_s = timeout_s
        self._version: int | None = None

    def connection(self, timeout_s: float | None = None) -> ServerSocket:
        try:
            sock = socket.create_connection((self.host, self.port), timeout=self.timeout_s)
        except TimeoutError:
            raise AdbTimeout(
                f"connecting to the adb server at {self.host}:{self.port} timed out"
            ) from None
        except OSError as exc:
            raise AdbConnectionError(f"cannot connect to the adb server: {exc}") from None
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.settimeout(timeout_s or self.timeout_s)
        return ServerSocket(sock)

    def query(self, request: str, timeout_s: float | None = None) -> str:
        """A request whose OKAY is followed by one block: that block."""
        with self.connection(timeout_s) as c:
            c.request(request)
            return c.read_block()

    def server_version(self) -> int:
        # It does not change while the server runs: asked once per client.
        if self._version is None:
            self._version = int(self.query("host:version"), 16)
        return self._version

    def list(self, extended: bool = True) -> list[Attached]:
        """The server's devices, with `adb devices -l`'s tags when extended."""
        text = self.query("host:devices-l" if extended else "host:devices")
        found = []
        for line in text.splitlines():
            serial, state, *rest = [*line.split(), "", ""]
            if not serial or not state:
                continue
            tags = dict(word.split(":", 1) for word in rest if ":" in word)
            found.append(Attached(serial, state, tags))
        return found

    def connect(self, address: str, timeout: float | None = None) -> str:
        """`adb connect ADDRESS`: the server's answer ("connected to ...", "failed ...")."""
        return self.query(f"host:connect:{address}", timeout)

    def disconnect(self, address: str) -> str:
        return self.query(f"host:disconnect:{address}")

    def serial_query(self, serial: str, what: str) -> str:
        """host-serial:SERIAL:WHAT, answered by the server itself (get-state, features)."""
        return self.query(f"host-serial:{serial}:{what}")

    def open_service(self, serial: str, service: str, timeout_s: float) -> ServerSocket:
        """A connection switched to the phone and to `service` on it."""
        connection = self.connection(timeout_s)
        try:
            connection.request(f"host:transport:{serial}")
            connection.request(service)
        except BaseException:
            connection.close()
            raise
        return connection
