"""Android phones over ADB: files by the sync protocol, commands by shell v2.

Everything goes through an adb server (adb's own smart-socket protocol, spoken
by adbutils), never through the `adb` command line:

- The server: ANDROID_ADB_SERVER_HOST/PORT unless settings say otherwise, as adb
  does. When nothing answers on a local host, `adb -P PORT start-server` starts
  one with the adb binary adbutils ships. A running server is never killed: one
  too old for this client is a DeviceError that says so. (adbutils' own
  connection would run a bare `adb start-server` on 5037 whenever a connect
  fails; the connection class here does not.)
- Files: `sync:` with STA2 (64-bit sizes; the v1 STAT reply is 32-bit) when the
  phone has stat_v2, else `stat -c %s` through the shell. push() skips a file
  whose size and sha256 match, else sends it under a temporary name and renames
  it into place with `mv` after checking its size, so a dropped transfer never
  leaves half a file under the real name; partial files from an earlier failed
  attempt are removed before the next one. The phone-side sha256 is toybox's
  `sha256sum`, except for files etdeploy pushed itself: their digest is recorded
  beside them (.NAME.etdeploy-sha256, "sha size mtime") and trusted while the
  file keeps that size and mtime, so an unchanged file is not re-read on the
  phone at every run.
- Commands: shell v2 (separate stdout and stderr, the real exit status) when the
  phone advertises shell_v2, else v1 with an exit marker echoed after the
  command (stderr then arrives merged into stdout). Each command's shell writes
  its pid to a file first; adbd makes that shell a process-group leader, so a
  deadline or an idle timeout kills the whole group from a second shell.
- Logs: after each run, `logcat -d -s ExecuTorch` from the run's start (the
  device's clock), which is where ExecuTorch's runner logs on Android.
"""

from __future__ import annotations

import contextlib
import os
import re
import select
import shlex
import socket
import stat
import struct
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import adbutils
from adbutils.errors import AdbConnectionError, AdbError, AdbTimeout

from etdeploy.devices.base import (
    BoundedOutput,
    Device,
    DeviceInfo,
    ProgressCallback,
    PushResult,
    RunOutput,
    partial_prefix,
    sha256_file,
    temporary_name,
    temporary_path,
)
from etdeploy.errors import DeviceError, EtdeployError, InfraError, TransportError, UsageError

# adb's default server port and the variables its client reads (adb --help,
# platform-tools 36.0.0, read 2026-12-02).
DEFAULT_ADB_HOST = "127.0.0.1"
DEFAULT_ADB_PORT = 5037
ENV_HOST = "ANDROID_ADB_SERVER_HOST"
ENV_PORT = "ANDROID_ADB_SERVER_PORT"
ENV_SERIAL = "ANDROID_SERIAL"
# adbutils 2.12 speaks to servers from protocol version 39 on (its open_transport
# notes servers 39 and 40 as tested; 41 is platform-tools 29 and later), read 2026-12-02.
MIN_SERVER_VERSION = 39

WORKDIR = "/data/local/tmp/etdeploy"
LOGCAT_TAG = "ExecuTorch"

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

# Exit status of the sha256 helper when the file does not exist.
_NO_SUCH_FILE = 44
# Exit status of the run wrapper when it cannot enter the working directory.
_CWD_FAILED = 125
# How long a killed command may take to report its end before we stop waiting.
_KILL_WAIT_S = 3.0
_POLL_S = 0.2
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_LOCAL_HOSTS = {"127.0.0.1", "localhost", "::1"}


# -- settings -------------------------------------------------------------------------


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


@dataclass(frozen=True)
class _RemoteFile:
    size: int
    mtime: int
    mode: int
    # The digest etdeploy recorded when it pushed the file, if size and mtime still match.
    recorded_sha256: str | None


@dataclass
class _ShellResult:
    exit_code: int
    stdout: bytes
    stderr: bytes
    timed_out: bool = False
    # The stream ended without an exit status: the device or the server went away.
    lost: bool = False
    elapsed_s: float = 0.0


# -- the server connection -----------------------------------------------------------


class _Connection(adbutils.AdbConnection):
    """adbutils' connection without its fallback of starting a server on 5037."""

    def __init__(self, host: str, port: int, connect_timeout_s: float) -> None:
        self._target = (host, port)
        self._connect_timeout_s = connect_timeout_s
        super().__init__(host, port)

    def _safe_connect(self) -> socket.socket:
        return self._create_socket()

    def close(self) -> None:
        # adbutils' close() half-closes and sleeps 10 ms; a plain close is enough
        # for the server to end the stream, and runs on every request.
        with contextlib.suppress(AdbError, OSError):
            self.conn.close()

    def _create_socket(self) -> socket.socket:
        try:
            sock = socket.create_connection(self._target, timeout=self._connect_timeout_s)
        except TimeoutError:
            raise AdbTimeout(
                f"connecting to the adb server at {self._target[0]}:{self._target[1]} timed out"
            ) from None
        except OSError as exc:
            raise AdbConnectionError(f"cannot connect to the adb server: {exc}") from None
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock


class _Client(adbutils.AdbClient):
    """An AdbClient for one explicit server, with tight timeouts."""

    def __init__(self, settings: AdbSettings) -> None:
        super().__init__(settings.host, settings.port, socket_timeout=settings.connect_timeout_s)
        self.settings = settings
        self._version: int | None = None

    def make_connection(self, timeout: float | None = None) -> adbutils.AdbConnection:
        connection = _Connection(
            self.settings.host, self.settings.port, self.settings.connect_timeout_s
        )
        connection.conn.settimeout(timeout or self.settings.connect_timeout_s)
        return connection

    def server_version(self) -> int:
        # adbutils asks for the version before every transport; it does not change
        # while the server runs.
        if self._version is None:
            with self.make_connection() as c:
                c.send_command("host:version")
                c.check_okay()
                self._version = int(c.read_string_block(), 16)
        return self._version


def _start_server(settings: AdbSettings) -> None:
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


def connect_server(settings: AdbSettings) -> _Client:
    """A client for the configured server, starting a local one if none answers."""
    client = _Client(settings)
    try:
        version = client.server_version()
    except AdbConnectionError:
        if not settings.start_server or settings.host not in _LOCAL_HOSTS:
            raise DeviceError(
                f"no adb server answers at {settings.server}",
                f"start it on that host (adb -P {settings.port} start-server) or fix {ENV_HOST}/{ENV_PORT}",
                retryable=True,
            ) from None
        _start_server(settings)
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


def _infra_error(
    exc: BaseException, what: str, *, device: str | None = None, command: str | None = None
) -> InfraError:
    """An adbutils or socket failure as the InfraError kind a caller can act on."""
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


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    parts: list[bytes] = []
    have = 0
    while have < n:
        chunk = sock.recv(min(n - have, 1 << 20))
        if not chunk:
            raise EOFError(f"connection closed after {have} of {n} bytes")
        parts.append(chunk)
        have += len(chunk)
    return b"".join(parts)


class _Transport:
    """One phone behind one server: opens services on it and runs short commands."""

    def __init__(self, client: _Client, serial: str, name: str | None = None) -> None:
        self.client = client
        self.serial = serial
        self.name = name or serial
        self._device = adbutils.AdbDevice(client, serial=serial)
        self._features: frozenset[str] | None = None

    @property
    def settings(self) -> AdbSettings:
        return self.client.settings

    def open(self, service: str, timeout: float) -> adbutils.AdbConnection:
        """A connection already switched to `service` on the phone."""
        connection = self._device.open_transport(timeout=timeout)
        try:
            connection.send_command(service)
            connection.check_okay()
        except BaseException:
            connection.close()
            raise
        return connection

    def host_query(self, what: str) -> str:
        # host-serial:SERIAL:<what>, answered by the server itself.
        with self._device.open_transport(what, timeout=self.settings.connect_timeout_s) as c:
            return c.read_string_block()

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
                raise _infra_error(exc, "reading the device's features", device=self.name) from exc
            self._features = frozenset(f for f in text.strip().split(",") if f)
        return self._features

    def shell(
        self,
        command: str,
        *,
        deadline_s: float,
        idle_timeout_s: float | None = None,
        on_timeout: Callable[[], None] | None = None,
    ) -> _ShellResult:
        """Run command; stop reading at the deadline (on_timeout() is then called
        while the stream is still open, to kill the process)."""
        v2 = "shell_v2" in self.features
        marker = f"__ETDEPLOY_EXIT_{uuid.uuid4().hex[:12]}__"
        # v1 has no exit status: a subshell runs the command (an `exit` in it ends
        # only the subshell), then the marker carries $?.
        service = f"shell,v2,raw:{command}" if v2 else f"shell:(\n{command}\n); echo {marker}$?"
        started = time.monotonic()
        deadline = started + deadline_s
        try:
            connection = self.open(service, timeout=self.settings.connect_timeout_s)
        except (AdbError, OSError, EOFError) as exc:
            raise _infra_error(exc, "starting a shell", device=self.name, command=command) from exc
        sock = connection.conn
        sock.settimeout(_POLL_S)
        buffer = bytearray()
        stdout = BoundedOutput()
        stderr = BoundedOutput()
        exit_code: int | None = None
        timed_out = lost = False
        last_data = started
        kill_sent_at: float | None = None
        try:
            while exit_code is None:
                now = time.monotonic()
                if kill_sent_at is None and (
                    now >= deadline
                    or (idle_timeout_s is not None and now - last_data >= idle_timeout_s)
                ):
                    timed_out = True
                    if on_timeout is None:
                        break
                    on_timeout()
                    kill_sent_at = time.monotonic()
                if kill_sent_at is not None and now - kill_sent_at >= _KILL_WAIT_S:
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
                last_data = time.monotonic()
                if not v2:
                    stdout.append(data)
                    continue
                buffer += data
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
        finally:
            connection.close()
        out_bytes = stdout.data()
        if not v2:
            found = out_bytes.rfind(marker.encode())
            match = re.match(rb"(\d+)", out_bytes[found + len(marker) :]) if found >= 0 else None
            if match:
                exit_code = int(match.group(1))
                out_bytes = out_bytes[:found]
            elif not timed_out:
                lost = True
        return _ShellResult(
            exit_code=-1 if exit_code is None else exit_code,
            stdout=out_bytes,
            stderr=stderr.data(),
            timed_out=timed_out,
            lost=lost and not timed_out,
            elapsed_s=time.monotonic() - started,
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
        text = self.check("getprop", "reading properties")
        props: dict[str, str] = {}
        for line in text.splitlines():
            match = re.match(r"^\[(.+?)\]: \[(.*)\]$", line.strip())
            if match:
                props[match.group(1)] = match.group(2)
        return props


# -- finding phones -------------------------------------------------------------------


def _device_info(
    serial: str,
    state: str,
    props: Mapping[str, str],
    tags: Mapping[str, str],
    name: str | None = None,
) -> DeviceInfo:
    def pick(*keys: str) -> str:
        for key in keys:
            value = props.get(key) or tags.get(key, "")
            if value:
                return value
        return ""

    # `adb devices -l` writes spaces in model names as underscores.
    model = pick("ro.product.model") or tags.get("model", "").replace("_", " ")
    return DeviceInfo(
        name=name or serial,
        transport="adb",
        serial=serial,
        os="android",
        abi=pick("ro.product.cpu.abi"),
        model=model,
        os_version=pick("ro.build.version.release"),
        soc=pick("ro.soc.model", "ro.board.platform"),
        state=state,
        extra={
            "product": pick("ro.product.name") or tags.get("product", ""),
            "device": pick("ro.product.device") or tags.get("device", ""),
            "sdk": pick("ro.build.version.sdk"),
            "manufacturer": pick("ro.product.manufacturer"),
            # Every ABI the phone runs (a 64-bit phone may keep 32-bit support).
            "abilist": pick("ro.product.cpu.abilist"),
        },
    )


def list_attached(settings: AdbSettings | None = None) -> list[DeviceInfo]:
    """Every phone the server knows, with its properties (read only from phones in
    state "device"; others show what the server's list says)."""
    settings = settings or AdbSettings()
    client = connect_server(settings)
    try:
        entries = client.list(extended=True)
    except (AdbError, OSError, EOFError) as exc:
        raise _infra_error(exc, "listing devices") from exc
    infos: list[DeviceInfo] = []
    for entry in entries:
        props: dict[str, str] = {}
        if entry.state == "device":
            with contextlib.suppress(InfraError):
                props = _Transport(client, entry.serial).properties()
        infos.append(_device_info(entry.serial, entry.state, props, entry.tags))
    return infos


def _normalize(text: str) -> str:
    return re.sub(r"[\s_\-]+", "", text.lower())


def _describe(infos: Sequence[DeviceInfo], label: str = "attached") -> str:
    if not infos:
        return "no devices are attached"
    return f"{label}: " + ", ".join(
        f"{i.serial} ({i.model or 'unknown model'}{'' if i.state == 'device' else ', ' + i.state})"
        for i in infos
    )


def friendly_matches(name: str, attached: Sequence[DeviceInfo]) -> list[DeviceInfo]:
    """The phones whose model, product or device name is `name`, ignoring case,
    spaces, '_' and '-' ("pixel8" matches "Pixel 8")."""
    wanted = _normalize(name)
    if not wanted:
        return []
    return [
        info
        for info in attached
        if wanted
        in {
            _normalize(v)
            for v in (info.model, info.extra.get("product", ""), info.extra.get("device", ""))
            if v
        }
    ]


def resolve_serial(
    name: str | None, settings: AdbSettings | None = None, aliases: Mapping[str, str] | None = None
) -> str:
    """The serial a device name means: an alias from the config, an exact serial,
    ANDROID_SERIAL (when no name is given) or the only phone attached, or a phone
    whose model, product or device name matches ignoring case and spaces
    ("pixel8" matches "Pixel 8")."""
    settings = settings or AdbSettings()
    aliases = aliases or {}
    if name is not None and name in aliases:
        return aliases[name]
    if name is None and os.environ.get(ENV_SERIAL):
        return os.environ[ENV_SERIAL]
    attached = list_attached(settings)
    if name is None:
        ready = [i for i in attached if i.state == "device"]
        if len(ready) == 1:
            return ready[0].serial
        raise UsageError(
            "no device named and "
            + ("none is attached" if not ready else f"{len(ready)} are attached"),
            f"name one with --device (a serial, a model like pixel8, or an alias) or set {ENV_SERIAL}; "
            f"{_describe(attached)}",
        )
    for info in attached:
        if info.serial == name:
            return info.serial
    matches = friendly_matches(name, attached)
    if len(matches) == 1:
        return matches[0].serial
    if not matches:
        raise UsageError(
            f"no attached device matches {name!r}",
            '--device takes a serial, a model name (pixel8 matches "Pixel 8") or an alias from '
            f"etdeploy.toml; {_describe(attached)}",
        )
    raise UsageError(
        f"{len(matches)} attached devices match {name!r}",
        f"name one by serial (--device {matches[0].serial}), or give each an alias: a devices.NAME "
        f'table in etdeploy.toml with serial = "{matches[0].serial}"; {_describe(matches, "they are")}',
    )


# -- the device -----------------------------------------------------------------------


@dataclass
class _HashCache:
    """Local sha256 by (path, size, mtime), so a re-push does not re-read big files."""

    entries: dict[tuple[str, int, int], str] = field(default_factory=dict)

    def digest(self, path: Path) -> str:
        st = path.stat()
        key = (str(path.resolve()), st.st_size, st.st_mtime_ns)
        if key not in self.entries:
            self.entries[key] = sha256_file(path)
        return self.entries[key]


class _BackgroundDigest:
    """A local file's sha256, computed on a thread while the transfer runs."""

    def __init__(self, cache: _HashCache, path: Path) -> None:
        self._value: str | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(cache, path), daemon=True)
        self._thread.start()

    def _run(self, cache: _HashCache, path: Path) -> None:
        try:
            self._value = cache.digest(path)
        except BaseException as exc:  # handed to the caller in result()
            self._error = exc

    def result(self) -> str:
        self._thread.join()
        if self._error is not None:
            raise self._error
        assert self._value is not None
        return self._value


class AdbDevice(Device):
    """An Android phone behind an adb server."""

    transport = "adb"

    def __init__(
        self,
        name: str | None = None,
        settings: AdbSettings | None = None,
        *,
        aliases: Mapping[str, str] | None = None,
        lock_timeout_s: float = 600.0,
    ) -> None:
        self.settings = settings or AdbSettings()
        serial = self.settings.serial or resolve_serial(name, self.settings, aliases)
        super().__init__(name or serial, lock_timeout_s=lock_timeout_s)
        self.serial = serial
        self._client = connect_server(self.settings)
        self._link = _Transport(self._client, serial, self.name)
        try:
            state = self._link.state()
        except (AdbError, OSError, EOFError) as exc:
            raise _infra_error(exc, "looking for the device", device=self.name) from exc
        if state == "absent":
            raise DeviceError(
                f"device {serial} is not attached to the adb server at {self.settings.server}",
                f"connect it (adb connect HOST:PORT for Wi-Fi) or fix the serial; "
                f"{_describe(list_attached(self.settings))}",
                device=self.name,
                retryable=True,
            )
        self._props: dict[str, str] | None = None
        self._clock_offset_s: float | None = None
        self._hashes = _HashCache()
        self._io_lock = threading.RLock()
        #: Whether run() reads the run's logcat lines (tag ExecuTorch).
        self.capture_logcat = True

    # -- identity -----------------------------------------------------------------

    @property
    def features(self) -> frozenset[str]:
        return self._link.features

    def state(self) -> str:
        """The server's word for the phone: device, offline, unauthorized, absent."""
        try:
            return self._link.state()
        except (AdbError, OSError, EOFError) as exc:
            raise _infra_error(exc, "asking the device's state", device=self.name) from exc

    def properties(self) -> dict[str, str]:
        if self._props is None:
            self._props = self._link.properties()
        return dict(self._props)

    def info(self) -> DeviceInfo:
        return _device_info(self.serial, self.state(), self.properties(), {}, self.name)

    @property
    def workdir(self) -> str:
        return WORKDIR

    def lock_key(self) -> str:
        return f"adb:{self.settings.host}:{self.settings.port}:{self.serial}"

    def _abs(self, remote: str) -> str:
        return remote if remote.startswith("/") else f"{WORKDIR}/{remote}"

    # -- sync -----------------------------------------------------------------------

    def _sync(self, what: str, command: str) -> adbutils.AdbConnection:
        try:
            connection = self._link.open("sync:", timeout=self.settings.transfer_idle_timeout_s)
        except (AdbError, OSError, EOFError) as exc:
            raise _infra_error(exc, what, device=self.name, command=command) from exc
        connection.conn.settimeout(self.settings.transfer_idle_timeout_s)
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
        """mode, size (64-bit) and mtime of a remote path, or None when it does not exist."""
        remote = self._abs(remote)
        v2 = "stat_v2" in self.features
        connection = self._sync(f"reading {remote}", f"stat {remote}")
        try:
            sock = connection.conn
            self._request(sock, b"STA2" if v2 else b"STAT", remote)
            if v2:
                fields = _STAT_V2.unpack(_recv_exact(sock, _STAT_V2.size))
                error, mode, size, mtime = fields[1], fields[4], fields[8], fields[10]
                if error:
                    return None
            else:
                _id, mode, size, mtime = _STAT_V1.unpack(_recv_exact(sock, _STAT_V1.size))
                if mode == 0:
                    return None
            sock.sendall(_SYNC_HEADER.pack(b"QUIT", 0))
        except (OSError, EOFError, AdbError) as exc:
            raise _infra_error(exc, f"reading {remote}", device=self.name) from exc
        finally:
            connection.close()
        if not v2 and stat.S_ISREG(mode):
            # The v1 reply carries the size in 32 bits; ask the shell for the real one.
            size = int(
                self._link.check(f"stat -c %s {shlex.quote(remote)}", f"sizing {remote}").strip()
            )
        return RemoteStat(mode=mode, size=size, mtime=mtime)

    def remote_size(self, remote: str) -> int | None:
        found = self.stat(remote)
        return found.size if found else None

    def exists(self, remote: str) -> bool:
        return self.stat(remote) is not None

    def sha256(self, remote: str) -> str | None:
        remote = self._abs(remote)
        found = self.stat(remote)
        return None if found is None else self._hash(remote, found.size)

    def _hash(self, remote: str, size: int) -> str | None:
        quoted = shlex.quote(remote)
        # Phones hash at roughly 100 MB/s and up; allow for slow ones.
        deadline = max(30.0, size / 20e6)
        command = f"[ -f {quoted} ] || exit {_NO_SUCH_FILE}; sha256sum {quoted}"
        result = self._link.shell(command, deadline_s=deadline)
        output = (result.stdout + result.stderr).decode(errors="replace").strip()
        if result.exit_code == _NO_SUCH_FILE:
            return None
        if result.lost or result.timed_out or result.exit_code != 0:
            if result.exit_code == 127:
                raise DeviceError(
                    "the device has no sha256sum",
                    "Android 8 and later ship it in toybox",
                    device=self.name,
                    command=command,
                    log=output,
                )
            raise DeviceError(
                f"hashing {remote} on the device failed",
                "see the log",
                device=self.name,
                command=command,
                log=output,
                retryable=result.lost or result.timed_out,
            )
        digest = output.split()[0].lower() if output else ""
        if not re.fullmatch(r"[0-9a-f]{64}", digest):
            raise DeviceError(
                f"unexpected sha256sum output for {remote}",
                "see the log",
                device=self.name,
                command=command,
                log=output,
            )
        return digest

    def push(
        self,
        local: Path,
        remote: str,
        *,
        progress: ProgressCallback | None = None,
        mode: int = 0o644,
    ) -> PushResult:
        local = Path(local)
        remote = self._abs(remote)
        if not local.is_file():
            raise UsageError(f"no such file to push: {local}", "check the path")
        size = local.stat().st_size
        with self._io_lock:
            found = self._probe(remote)
            # Sizes first: a differing size needs no hashing on either side.
            if found is not None and found.size == size:
                local_sha = self._hashes.digest(local)
                same = found.recorded_sha256 == local_sha or self._hash(remote, size) == local_sha
                if same:
                    fixes = (
                        []
                        if found.mode == mode & 0o7777
                        else [f"chmod {mode:o} {shlex.quote(remote)}"]
                    )
                    if found.recorded_sha256 != local_sha:
                        fixes.append(self._record_command(remote, local_sha, size))
                    if fixes:
                        self._link.check("; ".join(fixes), f"updating {remote}")
                    if progress:
                        progress(remote, size, size)
                    return PushResult(remote, 0, True)
            # Hash while sending (hashlib releases the GIL): the digest is recorded
            # next to the file so the next push of it needs no hashing on the phone.
            digest = _BackgroundDigest(self._hashes, local)
            partial = temporary_name(remote)
            self._send(local, partial, remote, size, mode, progress)
            quoted_partial, quoted_remote = shlex.quote(partial), shlex.quote(remote)
            finish = (
                f's=$(stat -c %s {quoted_partial}) && [ "$s" = {size} ] || '
                f'{{ echo "size $s, expected {size}" >&2; rm -f {quoted_partial}; exit 3; }}; '
                f"chmod {mode:o} {quoted_partial} && mv -f {quoted_partial} {quoted_remote} && "
                + self._record_command(remote, digest.result(), size)
            )
            self._link.check(finish, f"moving {remote.rpartition('/')[2]} into place")
        return PushResult(remote, size, False)

    @staticmethod
    def _record_path(remote: str) -> str:
        head, _, tail = remote.rpartition("/")
        return f"{head}/.{tail}.etdeploy-sha256"

    def _record_command(self, remote: str, sha: str, size: int) -> str:
        # "sha size mtime": trusted later only while the file keeps that size and mtime.
        return (
            f'printf "%s %s %s\\n" {sha} {size} "$(stat -c %Y {shlex.quote(remote)})" '
            f"> {shlex.quote(self._record_path(remote))}"
        )

    def _probe(self, remote: str) -> _RemoteFile | None:
        """One shell call: make the parent, drop partials an earlier cut transfer left,
        and read the file's size, mtime, mode and recorded digest."""
        head, _, tail = remote.rpartition("/")
        quoted = shlex.quote(remote)
        stale = shlex.quote(partial_prefix(remote)) + "*"
        script = (
            f"mkdir -p {shlex.quote(head or '/')} && rm -f {stale} || exit 1; "
            f"if [ -f {quoted} ]; then stat -c '%s %Y %a' {quoted} && "
            f"cat {shlex.quote(self._record_path(remote))} 2>/dev/null; true; else echo absent; fi"
        )
        lines = self._link.check(script, f"preparing {head} for {tail}").splitlines()
        if not lines or lines[0].strip() == "absent":
            return None
        size_text, mtime_text, mode_text = lines[0].split()
        size, mtime = int(size_text), int(mtime_text)
        recorded = None
        if len(lines) > 1:
            fields = lines[1].split()
            if len(fields) == 3 and fields[1] == str(size) and fields[2] == str(mtime):
                recorded = fields[0]
        return _RemoteFile(size=size, mtime=mtime, mode=int(mode_text, 8), recorded_sha256=recorded)

    def _send(
        self,
        local: Path,
        partial: str,
        remote: str,
        size: int,
        mode: int,
        progress: ProgressCallback | None,
    ) -> None:
        command = f"push {local} {remote}"
        v2 = "sendrecv_v2" in self.features
        connection = self._sync(f"pushing {local.name}", command)
        sock = connection.conn
        done = 0
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
                        done += n
                        if progress:
                            progress(remote, done, size)
                        # The phone answers mid-transfer only to fail (full disk, ...).
                        readable, _, _ = select.select([sock], [], [], 0)
                        if readable:
                            self._read_status(sock, local, remote)
                sock.sendall(_SYNC_HEADER.pack(b"DONE", int(local.stat().st_mtime) & 0xFFFFFFFF))
                self._read_status(sock, local, remote)
                with contextlib.suppress(OSError):
                    sock.sendall(_SYNC_HEADER.pack(b"QUIT", 0))
            except TimeoutError as exc:
                raise TransportError(
                    f"push of {local.name} to {remote} stalled: no progress for "
                    f"{self.settings.transfer_idle_timeout_s:g} s ({done} of {size} bytes sent)",
                    "is the device responsive? the next push starts over",
                    device=self.name,
                    command=command,
                    retryable=True,
                ) from exc
            except (OSError, EOFError) as exc:
                raise TransportError(
                    f"connection to the device dropped while pushing {local.name} to {remote} "
                    f"({done} of {size} bytes sent)",
                    "check the cable or Wi-Fi; the next push starts over",
                    device=self.name,
                    command=command,
                    retryable=True,
                ) from exc
        finally:
            connection.close()

    def _read_status(self, sock: socket.socket, local: Path, remote: str) -> None:
        kind, length = _SYNC_HEADER.unpack(_recv_exact(sock, _SYNC_HEADER.size))
        if kind == b"OKAY":
            return
        message = (
            _recv_exact(sock, length).decode(errors="replace") if kind == b"FAIL" else repr(kind)
        )
        partial = temporary_name(remote)
        with contextlib.suppress(EtdeployError):
            self._link.check(
                f"rm -f {shlex.quote(partial)}", "removing a partial file", deadline_s=10
            )
        if "no space" in message.lower():
            raise DeviceError(
                f"the device ran out of space while pushing {local.name} to {remote}: {message}",
                "free space in /data/local/tmp (etdeploy clean) and push again",
                device=self.name,
                command=f"push {local} {remote}",
            )
        raise DeviceError(
            f"the device refused {local.name} -> {remote}: {message}",
            "check the path and permissions",
            device=self.name,
            command=f"push {local} {remote}",
        )

    def pull(self, remote: str, local: Path, *, progress: ProgressCallback | None = None) -> Path:
        remote = self._abs(remote)
        local = Path(local)
        found = self.stat(remote)
        if found is None or not found.is_file:
            raise DeviceError(
                f"no such file on the device: {remote}",
                "did the runner write it?",
                device=self.name,
                command=f"pull {remote}",
            )
        local.parent.mkdir(parents=True, exist_ok=True)
        partial = temporary_path(local)
        v2 = "sendrecv_v2" in self.features
        command = f"pull {remote} {local}"
        done = 0
        with self._io_lock:
            connection = self._sync(f"pulling {remote}", command)
            sock = connection.conn
            try:
                self._request(sock, b"RCV2" if v2 else b"RECV", remote)
                if v2:
                    sock.sendall(struct.pack("<4sI", b"RCV2", 0))
                with open(partial, "wb") as out:
                    while True:
                        kind, length = _SYNC_HEADER.unpack(_recv_exact(sock, _SYNC_HEADER.size))
                        if kind == b"DONE":
                            break
                        if kind == b"FAIL":
                            message = _recv_exact(sock, length).decode(errors="replace")
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
                        out.write(_recv_exact(sock, length))
                        done += length
                        if progress:
                            progress(remote, done, found.size)
                with contextlib.suppress(OSError):
                    sock.sendall(_SYNC_HEADER.pack(b"QUIT", 0))
                os.replace(partial, local)
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
                    f"connection to the device dropped while pulling {remote} ({done} bytes received)",
                    "check the cable or Wi-Fi; a retry may succeed",
                    device=self.name,
                    command=command,
                    retryable=True,
                ) from exc
            finally:
                connection.close()
                partial.unlink(missing_ok=True)
        return local

    def makedirs(self, remote: str) -> None:
        remote = self._abs(remote)
        self._link.check(f"mkdir -p {shlex.quote(remote)}", f"creating {remote}")

    def remove(self, remote: str, *, recursive: bool = False) -> None:
        remote = self._abs(remote)
        targets = f"{shlex.quote(remote)} {shlex.quote(self._record_path(remote))}"
        self._link.check(f"rm -{'rf' if recursive else 'f'} {targets}", f"removing {remote}")

    # -- processes --------------------------------------------------------------------

    def _device_time(self) -> float:
        """Now on the device's clock (logcat -T wants device time)."""
        if self._clock_offset_s is None:
            before = time.time()
            text = self._link.check(
                "date +%s.%N", "reading the device clock", deadline_s=10
            ).strip()
            after = time.time()
            try:
                device_now = float(text)
            except ValueError:  # a date without %N
                device_now = float(self._link.check("date +%s", "reading the device clock").strip())
            self._clock_offset_s = device_now - (before + after) / 2
        return time.time() + self._clock_offset_s

    def _wrap(
        self, argv: Sequence[str], cwd: str | None, env: Mapping[str, str] | None, pidfile: str
    ) -> str:
        exports = ""
        for key, value in (env or {}).items():
            if not _ENV_NAME.match(key):
                raise UsageError(
                    f"not an environment variable name: {key!r}", "use letters, digits and _"
                )
            exports += f"export {key}={shlex.quote(value)}; "
        directory = shlex.quote(self._abs(cwd) if cwd else WORKDIR)
        pid_dir = shlex.quote(pidfile.rpartition("/")[0])
        quoted_pid = shlex.quote(pidfile)
        # The pid is this shell's: adbd setsid()s it, so it leads the process group.
        return (
            f"mkdir -p {pid_dir} 2>/dev/null; echo $$ > {quoted_pid} 2>/dev/null; "
            f"if cd {directory}; then {exports}{shlex.join(argv)}; else (exit {_CWD_FAILED}); fi; "
            f"rc=$?; rm -f {quoted_pid}; exit $rc"
        )

    def _kill(self, pidfile: str) -> None:
        quoted = shlex.quote(pidfile)
        script = (
            f'p=$(cat {quoted} 2>/dev/null); if [ -n "$p" ]; then '
            f'kill -9 -- -"$p" 2>/dev/null || {{ pkill -9 -P "$p" 2>/dev/null; kill -9 "$p" 2>/dev/null; }}; '
            f"fi; rm -f {quoted}"
        )
        with contextlib.suppress(EtdeployError):
            self._link.shell(script, deadline_s=10)

    def run(
        self,
        argv: Sequence[str],
        *,
        deadline_s: float,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        idle_timeout_s: float | None = None,
    ) -> RunOutput:
        if not argv:
            raise UsageError("nothing to run", "pass a command")
        pidfile = f"{WORKDIR}/.pids/{uuid.uuid4().hex}.pid"
        script = self._wrap(argv, cwd, env, pidfile)
        log_since = self._device_time() if self.capture_logcat else 0.0
        try:
            result = self._link.shell(
                script,
                deadline_s=deadline_s,
                idle_timeout_s=idle_timeout_s,
                on_timeout=lambda: self._kill(pidfile),
            )
        except BaseException:
            # Our caller was interrupted (Ctrl-C, a farm's job timeout): the
            # runner on the phone must not outlive it. Best effort, then re-raise.
            with contextlib.suppress(Exception):
                self._kill(pidfile)
            raise
        stdout = result.stdout.decode(errors="replace")
        stderr = result.stderr.decode(errors="replace")
        if result.lost:
            raise DeviceError(
                f"device went offline while running {argv[0]}",
                "check `adb devices`; a retry may succeed",
                device=self.name,
                command=shlex.join(argv),
                log=(stdout + stderr)[-4000:],
                retryable=True,
            )
        device_log = self._logcat(log_since) if self.capture_logcat else ""
        return RunOutput(
            argv=tuple(argv),
            exit_code=result.exit_code,
            stdout=stdout,
            stderr=stderr,
            elapsed_s=result.elapsed_s,
            timed_out=result.timed_out,
            device_log=device_log,
        )

    def logcat_command(self, since_device_time: float) -> str:
        # A -T argument with a '.' is a time (epoch seconds), digits alone a count.
        return f"logcat -d -v threadtime -T {since_device_time:.3f} -s {LOGCAT_TAG}"

    def _logcat(self, since: float) -> str:
        try:
            result = self._link.shell(self.logcat_command(since - 0.05), deadline_s=15)
        except EtdeployError:
            return ""
        if result.exit_code != 0:
            return ""
        lines = [
            line
            for line in result.stdout.decode(errors="replace").splitlines()
            if line and not line.startswith("--------- beginning of")
        ]
        return "\n".join(lines) + ("\n" if lines else "")

    def close(self) -> None:
        # Every request opens its own server connection; nothing stays open.
        self._props = None
