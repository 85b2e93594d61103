"""Reaching the adb server: where it is (AdbSettings), connecting to it (server.py's
client; nothing is started on 5037 behind the user's back), starting one on a local
port when none answers, and turning protocol and socket failures into InfraError
kinds.

A running server is never killed: one too old for this client is a DeviceError
that says so.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from etdeploy.devices.adb.server import AdbConnectionError, AdbError, AdbTimeout, ServerClient
from etdeploy.errors import DeviceError, InfraError, TransportError, UsageError

# adb's default server port and the variables its client reads (adb --help,
# platform-tools 36.0.0, read 2026-12-02).
DEFAULT_ADB_HOST = "127.0.0.1"
DEFAULT_ADB_PORT = 5037
ENV_HOST = "ANDROID_ADB_SERVER_HOST"
ENV_PORT = "ANDROID_ADB_SERVER_PORT"
ENV_SERIAL = "ANDROID_SERIAL"
# The oldest server etdeploy was tested against: protocol 39 is platform-tools 26
# (2017; adbutils 2.12's open_transport notes 39 and 40 as tested, read 2026-12-02).
# Everything server.py asks (host:transport, host-serial, shell,v2, sync) is older.
MIN_SERVER_VERSION = 39
_LOCAL_HOSTS = {"127.0.0.1", "localhost", "::1"}
# What a serial is made of: USB serials (letters and digits), emulator-5554,
# HOST:PORT and [IPv6%zone]:PORT for Wi-Fi, usb:BUS-PORT.PORT, and mDNS service
# names (adb-SERIAL-xxxx._adb-tls-connect._tcp). The server takes a serial inside
# a `host-serial:SERIAL:request` line, so anything else (a ';', a space, a
# newline) only ever gets a confusing "unknown host service" back.
_SERIAL = re.compile(r"[A-Za-z0-9._:\-\[\]@%+/]+")
SERIAL_HINT = (
    "a serial is what `adb devices` lists: the phone's USB serial, emulator-5554, "
    "or HOST:PORT for a phone on Wi-Fi"
)


def check_serial(serial: str, where: str = "serial") -> str:
    """The serial, or a UsageError saying why it cannot be one (nothing is sent)."""
    bad = next((c for c in serial if not _SERIAL.fullmatch(c)), None) if serial else ""
    if bad is not None:
        reason = "it is empty" if bad == "" else f"{bad!r} cannot be part of one"
        raise UsageError(f"{where} {serial!r} is not an adb serial: {reason}", SERIAL_HINT)
    return serial


@dataclass(frozen=True)
class AdbSettings:
    """Where the adb server is and which phone to use.

    host and port left empty take ANDROID_ADB_SERVER_HOST / ANDROID_ADB_SERVER_PORT,
    else 127.0.0.1:5037, as adb itself does; after construction they are always set.
    """

    host: str = ""
    port: int = 0
    serial: str | None = None
    # Connecting to the server and each short request (state, features, stat).
    connect_timeout_s: float = 5.0
    # A push or pull with no progress for this long is a dropped transfer.
    transfer_idle_timeout_s: float = 30.0
    # Start a server (local hosts only) when none answers.
    start_server: bool = True

    def __post_init__(self) -> None:
        if not self.host:
            object.__setattr__(self, "host", os.environ.get(ENV_HOST) or DEFAULT_ADB_HOST)
        if not self.port:
            raw = os.environ.get(ENV_PORT, "")
            try:
                port = int(raw) if raw else DEFAULT_ADB_PORT
            except ValueError:
                raise UsageError(
                    f"{ENV_PORT}={raw!r} is not a port number",
                    f"unset {ENV_PORT} or set it to a number",
                ) from None
            object.__setattr__(self, "port", port)
        if not 0 < self.port < 65536:
            raise UsageError(
                f"adb server port {self.port} is out of range", "use a port from 1 to 65535"
            )
        if self.serial is not None:
            check_serial(self.serial)

    @classmethod
    def from_config(cls, settings: Mapping[str, Any], *, where: str = "device") -> AdbSettings:
        """From a [devices.NAME] table: serial, adb_host, adb_port, connect_timeout_s,
        transfer_idle_timeout_s, start_server (other keys belong to other layers)."""
        known: dict[str, tuple[str, type | tuple[type, ...]]] = {
            "serial": ("serial", str),
            "adb_host": ("host", str),
            "adb_port": ("port", int),
            "connect_timeout_s": ("connect_timeout_s", (int, float)),
            "transfer_idle_timeout_s": ("transfer_idle_timeout_s", (int, float)),
            "start_server": ("start_server", bool),
        }
        values: dict[str, Any] = {}
        for key, (attr, kind) in known.items():
            if key not in settings:
                continue
            value = settings[key]
            if (isinstance(value, bool) and kind is not bool) or not isinstance(value, kind):
                names = " or ".join(
                    t.__name__ for t in (kind if isinstance(kind, tuple) else (kind,))
                )
                raise UsageError(
                    f"{where}.{key}: expected {names}, got {value!r}", f"fix {key} in etdeploy.toml"
                )
            values[attr] = value
        return cls(**values)

    @property
    def server(self) -> str:
        return f"{self.host}:{self.port}"


class Server(ServerClient):
    """The configured server: the protocol client and the settings it was made from."""

    def __init__(self, settings: AdbSettings) -> None:
        super().__init__(settings.host, settings.port, settings.connect_timeout_s)
        self.settings = settings


def start_local_server(settings: AdbSettings) -> None:
    import adbutils  # the adb binary it ships; imported only to start a server

    binary = adbutils.adb_path()
    env = {**os.environ, ENV_PORT: str(settings.port)}
    # Output to a file, not a pipe: the server it forks must not hold our pipe open.
    with tempfile.TemporaryFile() as out:
        try:
            result = subprocess.run(
                [binary, "-P", str(settings.port), "start-server"],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                timeout=60,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise DeviceError(
                f"could not start an adb server on port {settings.port}: {exc}",
                "start one yourself: adb -P PORT start-server",
                command="adb start-server",
            ) from exc
        out.seek(0)
        log = out.read().decode(errors="replace")
    if result.returncode != 0:
        raise DeviceError(
            f"adb start-server on port {settings.port} failed (exit {result.returncode})",
            "see the log; another program may hold the port",
            command="adb start-server",
            log=log,
        )


def connect_server(settings: AdbSettings) -> Server:
    """A client for the configured server, starting a local one if none answers."""
    client = Server(settings)
    try:
        version = client.server_version()
    except AdbConnectionError:
        if not settings.start_server or settings.host not in _LOCAL_HOSTS:
            raise DeviceError(
                f"no adb server answers at {settings.server}",
                f"start it on that host (adb -P {settings.port} start-server) or fix {ENV_HOST}/{ENV_PORT}",
                retryable=True,
            ) from None
        start_local_server(settings)
        try:
            version = client.server_version()
        except (AdbError, OSError, ValueError) as exc:
            raise DeviceError(
                f"started an adb server on port {settings.port} but it does not answer: {exc}",
                "run `adb -P PORT start-server` by hand to see why",
            ) from exc
    except AdbTimeout:
        raise DeviceError(
            f"the adb server at {settings.server} does not answer within {settings.connect_timeout_s:g} s",
            "is the host reachable? raise connect_timeout_s for slow links",
            retryable=True,
        ) from None
    except (AdbError, ValueError, OSError) as exc:
        raise DeviceError(
            f"something answers at {settings.server} but it is not an adb server ({exc})",
            f"point {ENV_PORT} at an adb server's port",
        ) from exc
    if version < MIN_SERVER_VERSION:
        raise DeviceError(
            f"the adb server at {settings.server} speaks protocol 1.0.{version}; "
            f"etdeploy needs 1.0.{MIN_SERVER_VERSION} or newer",
            "update platform-tools and restart that server yourself (etdeploy never kills a running server)",
        )
    return client


def infra_error(
    exc: BaseException, what: str, *, device: str | None = None, command: str | None = None
) -> InfraError:
    """A protocol or socket failure as the InfraError kind a caller can act on."""
    text = str(exc).strip() or type(exc).__name__
    if isinstance(exc, (AdbTimeout, socket.timeout)):
        return TransportError(
            f"adb timed out while {what}",
            "is the device responsive? check `adb devices`",
            device=device,
            command=command,
            retryable=True,
        )
    if isinstance(exc, AdbError) and not isinstance(exc, AdbConnectionError):
        lowered = text.lower()
        if "unauthorized" in lowered:
            return DeviceError(
                f"device is unauthorized while {what}",
                "unlock the phone and accept the USB debugging prompt",
                device=device,
                command=command,
            )
        if "offline" in lowered or "not found" in lowered or "no devices" in lowered:
            return DeviceError(
                f"device is offline or gone while {what} ({text})",
                "check the cable or Wi-Fi and `adb devices`; a retry may succeed",
                device=device,
                command=command,
                retryable=True,
            )
        return DeviceError(
            f"adb refused while {what}: {text}", None, device=device, command=command
        )
    return TransportError(
        f"connection to the adb server dropped while {what} ({text})",
        "check `adb devices`; a retry may succeed",
        device=device,
        command=command,
        retryable=True,
    )
