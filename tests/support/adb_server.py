"""The real adb server for tests, on a port of its own, with loopback phones.

`adb_testbed(tmp)` starts the adb binary adbutils ships as a server on a free
port (never 5037, never a user's server), with HOME and TMPDIR in `tmp` so it
makes its own adbkey and writes its own log, and with USB, mDNS and emulator
scanning off (ADB_USB=0, ADB_MDNS=0, ADB_EMU=0) so it sees only the loopback
devices it is told to `adb connect` and sends nothing past 127.0.0.1. On exit it
disconnects them, sends kill-server, and waits until the server process is gone
(SIGKILL after a grace period). The server's stdout and stderr go to a file, so
it never holds a test runner's output open. An atexit hook kills any server
this module started that is somehow still running when Python exits.
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import adbutils

from tests.support.loopback_adb import DEFAULT_FEATURES, LoopbackAdbDevice
from tests.support.processes import live_processes

_started_ports: set[int] = set()


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def adb_server_pids(port: int) -> list[int]:
    """Pids of adb server processes listening on `port` (found by command line)."""
    pids: list[int] = []
    for pid, words in live_processes():
        if not words or not os.path.basename(words[0]).startswith("adb"):
            continue
        if "fork-server" not in words and "server" not in words:
            continue
        if f"tcp:{port}" in words or any(
            a == "-P" and b == str(port) for a, b in itertools.pairwise(words)
        ):
            pids.append(pid)
    return pids


def _kill_leftovers() -> None:
    for port in list(_started_ports):
        for pid in adb_server_pids(port):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)


atexit.register(_kill_leftovers)


@dataclass
class AdbServer:
    """A running adb server owned by a test: its port, its HOME, its log."""

    port: int
    home: Path
    binary: str = field(default_factory=adbutils.adb_path)

    @property
    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("ANDROID_", "ADB_"))}
        env.update(
            {
                "HOME": str(self.home),
                "TMPDIR": str(self.home),
                "ANDROID_ADB_SERVER_PORT": str(self.port),
                "ADB_MDNS": "0",
                "ADB_USB": "0",
                "ADB_EMU": "0",
            }
        )
        return env

    def adb(self, *args: str, timeout: float = 30, check: bool = True) -> str:
        """Run `adb -P PORT ARGS...`; its output goes through a file, never a pipe
        (a server it might fork must not hold our pipe open)."""
        out_path = self.home / "adb-command.out"
        with open(out_path, "w+b") as out:
            result = subprocess.run(
                [self.binary, "-P", str(self.port), *args],
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                timeout=timeout,
                check=False,
            )
            out.seek(0)
            text = out.read().decode(errors="replace")
        if check and result.returncode != 0:
            raise RuntimeError(f"adb {' '.join(args)} exited {result.returncode}: {text.strip()}")
        return text

    def start(self) -> None:
        _started_ports.add(self.port)
        self.adb("start-server", timeout=60)

    def answering(self) -> bool:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.settimeout(0.5)
            return sock.connect_ex(("127.0.0.1", self.port)) == 0

    def state(self, serial: str) -> str:
        """The state `adb devices` shows for serial, or "absent"."""
        for line in self.adb("devices").splitlines()[1:]:
            parts = line.split()
            if len(parts) >= 2 and parts[0] == serial:
                return parts[1]
        return "absent"

    def wait_for_state(self, serial: str, state: str = "device", timeout: float = 20) -> None:
        deadline = time.monotonic() + timeout
        seen = "absent"
        while time.monotonic() < deadline:
            seen = self.state(serial)
            if seen == state:
                return
            time.sleep(0.1)
        raise TimeoutError(f"{serial} stayed {seen!r}, wanted {state!r} within {timeout} s")

    def connect(self, device: LoopbackAdbDevice, timeout: float = 20) -> str:
        out = self.adb("connect", device.address)
        if "connected to" not in out:
            raise RuntimeError(f"adb connect {device.address}: {out.strip()}")
        self.wait_for_state(device.address, "device", timeout)
        return device.address

    def reconnect(self, device: LoopbackAdbDevice, timeout: float = 20) -> None:
        """Wait for the device to come back after a drop (the server retries on its
        own; a fresh `adb connect` covers a server that gave up)."""
        try:
            self.wait_for_state(device.address, "device", timeout=5)
        except TimeoutError:
            self.adb("disconnect", device.address, check=False)
            self.connect(device, timeout)

    def stop(self, timeout: float = 10) -> None:
        self.adb("kill-server", check=False, timeout=15)
        deadline = time.monotonic() + timeout
        while adb_server_pids(self.port) and time.monotonic() < deadline:
            time.sleep(0.05)
        for pid in adb_server_pids(self.port):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        _started_ports.discard(self.port)


@dataclass
class AdbTestbed:
    server: AdbServer
    phones: dict[str, LoopbackAdbDevice]

    def serial(self, phone: str) -> str:
        return self.phones[phone].address


@contextlib.contextmanager
def adb_server(home: Path) -> Iterator[AdbServer]:
    home.mkdir(parents=True, exist_ok=True)
    server = AdbServer(free_port(), home)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@contextlib.contextmanager
def adb_testbed(
    tmp: Path,
    phones: Mapping[str, Mapping[str, object]] | Sequence[str] = ("phone",),
) -> Iterator[AdbTestbed]:
    """A server and loopback phones, connected. `phones` names them, optionally with
    LoopbackAdbDevice keyword arguments (properties=..., features=...)."""
    specs = {name: {} for name in phones} if not isinstance(phones, Mapping) else dict(phones)
    started: dict[str, LoopbackAdbDevice] = {}
    with contextlib.ExitStack() as stack:
        for name, kwargs in specs.items():
            kwargs = {"features": DEFAULT_FEATURES, **kwargs}
            device = LoopbackAdbDevice(tmp / f"phone-{name}", **kwargs)  # type: ignore[arg-type]
            device.start()
            stack.callback(device.stop)
            started[name] = device
        server = stack.enter_context(adb_server(tmp / "adb-home"))
        for device in started.values():
            server.connect(device)
            stack.callback(server.adb, "disconnect", device.address, check=False)
        yield AdbTestbed(server, started)
