"""A loopback ADB device: it stands for an Android phone reached over adb TCP/IP.

A phone after `adb tcpip 5555` listens on TCP and speaks the device side of the
ADB wire protocol to whatever adb server runs `adb connect phone:5555`. This
object is that listener on 127.0.0.1, so the real adb server (the binary adbutils
ships) and everything above it can be tested without a phone.

What is real:
- The transport: 24-byte message headers, the CNXN handshake with a device banner
  (`device::ro.product.name=...;ro.product.model=...;ro.product.device=...;features=...`),
  OPEN/OKAY/WRTE/CLSE streams with both sides' ids, and adb's flow control: one
  WRTE in flight per stream, each answered by an OKAY. Our OKAY for incoming data
  goes out when the service has taken the data, so a slow service slows the
  sender, as on a phone. delayed_ack is not advertised, so it is never used.
- Services: `shell:` (v1, raw: stdout and stderr merged, no exit status),
  `shell,v2,...:` (the shell protocol: stdin/stdout/stderr/exit packets, the
  exit byte being the status or 0x80|signal as adbd sends it), `exec:` and
  `sync:` with STAT, LST2/STA2, LIST, LIS2, SEND, SND2, RECV, RCV2 and QUIT.
  STAT v1 truncates sizes to 32 bits exactly as adbd does.
- Processes: shell commands are real processes on this machine, each in its own
  session (adbd setsid()s its children too), so `kill` and `pkill` sent through
  a shell reach them. When the host closes a shell stream the process group is
  killed (or, with `on_stream_close = "sighup"`, only the leader gets SIGHUP,
  which is what adbd does).

What stands in, and how:
- The phone's file system is the directory `root/fs`: device path /a/b is
  root/fs/a/b in sync requests. /data/local/tmp (the only place the shell user
  may write on a phone) is root/fs/data/local/tmp, the sandbox.
- Shell commands run with `bash -c` in the sandbox, after the literal text
  "/data/local/tmp" in the command line is replaced by the sandbox's path.
  Nothing else is rewritten: a command that prints a path prints the host path,
  and a command can reach any file this user can. It is a test double, not a
  security boundary.
- `getprop`, `log` and `logcat` are small scripts first on the shell's PATH that
  answer from `properties` and from this device's log buffer (getprop is a shell
  script: a phone's native getprop answers in milliseconds); `sha256sum`,
  `stat`, `mv`, `kill` are this machine's (coreutils/procps, like toybox's).
- A phone of a class (release sets): its SoC, brand, device and model, SDK level
  and ABI are `properties` (ro.soc.manufacturer, ro.soc.model, ro.product.brand,
  ro.product.device, ro.product.model, ro.build.version.sdk, ro.product.cpu.abi);
  with `mem_total_kb` the text "/proc/meminfo" in a command line is rewritten to a
  file of this phone's own (MemTotal as given, in kB as the kernel writes it), so
  `cat /proc/meminfo` reads its RAM, not this machine's; with `system_features`
  a `pm` script answers `pm list features` as PackageManager does (one
  `feature:NAME` a line) and refuses every other pm command. Without them the
  shell reads this machine's /proc/meminfo and has no `pm`, as before.
- No AUTH (as a userdebug build with ro.adb.secure=0): it answers the host's
  CNXN with its own. No TLS, no pty (pty requests run raw), no compression.

The arm64 phone (`arm64=True`): a Pixel 8 as it is, reporting arm64-v8a
(ro.product.cpu.abi and abilist). What it is sent runs as ARM code: binfmt_misc
is not available here, so the phone's shells run with tests/support/arm64.py's
exec shim, which starts every aarch64 ELF executable under `qemu-aarch64` with an
empty sysroot (the program brings its own loader and libraries, as on a phone);
its shell and tools stay this machine's. `uname -m` answers aarch64. It stands
for the CPU, not for Android's userland: the runner that ran here is the glibc
bundle, and bionic is not involved.

Faults (`faults`, a LoopbackFaults; each byte count is per SEND):
`drop_after_send_bytes` cuts the TCP connection after that many bytes of a
SEND (the partial file stays, as when adbd dies mid-write); `stall_after_send_bytes`
stops reading the connection, so nothing is answered, until `release_stall()`;
`no_space_after_bytes` makes SEND fail with adbd's "write failed: No space left
on device" (the partial file removed, as adbd does), which a real full disk
under the sandbox (a small tmpfs mounted there) does too; `send_bytes_per_s` takes a
SEND's data no faster than that (a slow link; the push stays healthy); `fail_shell_pattern` makes
any shell command matching the regex fail without running. Drop and stall fire
once, then reset; the others stay until cleared. `stall_next_recv` stalls the next
RECV (a pull) the same way, once.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import queue
import re
import shlex
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from tests.support.arm64 import Arm64Emulation, arm64_emulation

# --- protocol constants --------------------------------------------------------
# From AOSP packages/modules/adb: docs/dev/protocol.md (formerly protocol.txt),
# docs/dev/sync.md (formerly SYNC.TXT), adb.h, file_sync_protocol.h and
# shell_protocol.h; read 2026-12-02 (GrapheneOS mirror of that module, May 2026).
A_SYNC = 0x434E5953
A_CNXN = 0x4E584E43
A_AUTH = 0x48545541
A_OPEN = 0x4E45504F
A_OKAY = 0x59414B4F
A_CLSE = 0x45534C43
A_WRTE = 0x45545257
A_STLS = 0x534C5453
A_VERSION_MIN = 0x01000000
A_VERSION_SKIP_CHECKSUM = 0x01000001
A_VERSION = 0x01000001
MAX_PAYLOAD_V1 = 4 * 1024
MAX_PAYLOAD = 1024 * 1024
HEADER = struct.Struct("<6I")

SYNC_DATA_MAX = 64 * 1024
SYNC_PATH_MAX = 1024
SYNC_FLAG_DRY_RUN = 0x8000_0000
SYNC_STAT_V1 = struct.Struct("<4sIII")
# id, error, dev, ino, mode, nlink, uid, gid, size, atime, mtime, ctime
SYNC_STAT_V2 = struct.Struct("<4sIQQIIIIQqqq")
SYNC_DENT_V1 = struct.Struct("<4sIIII")
SYNC_DENT_V2 = struct.Struct("<4sIQQIIIIQqqqI")

SHELL_STDIN, SHELL_STDOUT, SHELL_STDERR, SHELL_EXIT = 0, 1, 2, 3
SHELL_CLOSE_STDIN, SHELL_WINDOW_SIZE = 4, 5
SHELL_PACKET = struct.Struct("<BI")

# What this double implements, named as adb's transport.cpp names them.
DEFAULT_FEATURES: tuple[str, ...] = (
    "shell_v2",
    "stat_v2",
    "ls_v2",
    "fixed_push_mkdir",
    "sendrecv_v2",
)

# A Pixel 8 (codename shiba, Google Tensor G3, platform "zuma": Google's Pixel 8
# specs and AOSP device/google/shusky, read 2026-12-02) running Android 15 (SDK 35).
# The ABI is x86_64 because the runner these tests push is built for this machine;
# the arm64 phone (ARM64_PROPERTIES over these) reports the Pixel 8's real one.
DEFAULT_PROPERTIES: dict[str, str] = {
    "ro.product.model": "Pixel 8",
    "ro.product.name": "shiba",
    "ro.product.device": "shiba",
    "ro.product.brand": "google",
    "ro.product.manufacturer": "Google",
    "ro.product.cpu.abi": "x86_64",
    "ro.product.cpu.abilist": "x86_64",
    "ro.build.version.release": "15",
    "ro.build.version.sdk": "35",
    "ro.soc.manufacturer": "Google",
    "ro.soc.model": "Tensor G3",
    "ro.board.platform": "zuma",
    "ro.debuggable": "1",
    "ro.adb.secure": "0",
}

# Pixels from the 7 on list arm64-v8a alone (getprop output quoted by XDA
# Developers, "Google Pixel 7 ... 64-bit only apps", Oct 2022, read 2026-12-03).
ARM64_PROPERTIES: dict[str, str] = {
    "ro.product.cpu.abi": "arm64-v8a",
    "ro.product.cpu.abilist": "arm64-v8a",
}

DEVICE_TMP = "/data/local/tmp"
OnStreamClose = Literal["kill-group", "sighup"]


@dataclass
class LoopbackFaults:
    """Faults to inject; set a field on `device.faults` while the device runs."""

    drop_after_send_bytes: int | None = None
    stall_after_send_bytes: int | None = None
    # The next RECV (a pull) stalls as a SEND does past stall_after_send_bytes.
    stall_next_recv: bool = False
    no_space_after_bytes: int | None = None
    # A slow link (a phone on weak Wi-Fi): a SEND's data is taken at most this fast.
    send_bytes_per_s: float | None = None
    fail_shell_pattern: str | None = None
    fail_shell_exit_code: int = 1


class _StreamClosed(Exception):
    """The stream was closed (by the host, or because the connection dropped)."""


class _Stream:
    """One adb stream: our local id, the host's id, inbound data and flow control."""

    def __init__(self, link: _Link, local_id: int, remote_id: int) -> None:
        self.link = link
        self.local_id = local_id
        self.remote_id = remote_id
        self._inbound: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        self._buf = b""
        self._pos = 0
        # OPEN implies READY from the host: the first WRTE may go at once.
        self._ready = threading.Event()
        self._ready.set()
        self._write_lock = threading.Lock()
        self.closed = threading.Event()
        self.on_host_close: list[Callable[[], None]] = []

    # -- called by the link's reader thread -----------------------------------------
    def feed(self, data: bytes) -> None:
        self._inbound.put(data)

    def acked(self) -> None:
        self._ready.set()

    def host_closed(self) -> None:
        if self.closed.is_set():
            return
        self.closed.set()
        self._inbound.put(None)
        self._ready.set()
        for callback in self.on_host_close:
            with contextlib.suppress(Exception):
                callback()

    # -- called by the service ----------------------------------------------------
    def _next_chunk(self) -> bytes | None:
        item = self._inbound.get()
        if item is None:
            self._inbound.put(None)  # stay closed for later readers
            return None
        # The data is ours now: tell the host it may send the next WRTE.
        self.link.send(A_OKAY, self.local_id, self.remote_id)
        return item

    def read(self) -> bytes:
        """Whatever arrives next; b"" once the stream is closed."""
        if self._pos < len(self._buf):
            data = self._buf[self._pos :]
            self._buf, self._pos = b"", 0
            return data
        chunk = self._next_chunk()
        return chunk or b""

    def read_exact(self, n: int) -> bytes:
        if len(self._buf) - self._pos >= n:
            data = self._buf[self._pos : self._pos + n]
            self._pos += n
            return data
        parts = [self._buf[self._pos :]]
        have = len(parts[0])
        self._buf, self._pos = b"", 0
        while have < n:
            chunk = self._next_chunk()
            if chunk is None:
                raise _StreamClosed
            need = n - have
            if len(chunk) > need:
                parts.append(chunk[:need])
                self._buf, self._pos = chunk, need
                have = n
            else:
                parts.append(chunk)
                have += len(chunk)
        return b"".join(parts)

    def write(self, data: bytes) -> None:
        step = self.link.host_max_payload
        with self._write_lock:
            for start in range(0, len(data), step):
                while not self._ready.wait(0.2):
                    if self.closed.is_set() or self.link.dead.is_set():
                        raise _StreamClosed
                if self.closed.is_set():
                    raise _StreamClosed
                self._ready.clear()
                self.link.send(A_WRTE, self.local_id, self.remote_id, data[start : start + step])

    def close(self) -> None:
        """Our side ends the stream (the service finished)."""
        if self.closed.is_set():
            return
        self.closed.set()
        self.link.forget(self)
        self.link.send(A_CLSE, self.local_id, self.remote_id)
        self._inbound.put(None)


class _Link:
    """One TCP connection from the adb server: the transport to this device."""

    def __init__(self, device: LoopbackAdbDevice, sock: socket.socket) -> None:
        self.device = device
        self.sock = sock
        self._send_lock = threading.Lock()
        self._streams: dict[int, _Stream] = {}
        self._streams_lock = threading.Lock()
        self._next_id = 1
        self.version = A_VERSION_MIN
        self.host_max_payload = MAX_PAYLOAD_V1
        self.online = False
        self.dead = threading.Event()
        self.stalled = threading.Event()

    # -- sending ------------------------------------------------------------------
    def send(self, command: int, arg0: int, arg1: int, payload: bytes = b"") -> None:
        # Checksums are skipped from A_VERSION_SKIP_CHECKSUM on; older hosts need them.
        check = 0 if self.version >= A_VERSION_SKIP_CHECKSUM else sum(payload) & 0xFFFFFFFF
        header = HEADER.pack(command, arg0, arg1, len(payload), check, command ^ 0xFFFFFFFF)
        try:
            with self._send_lock:
                self.sock.sendall(header + payload if len(payload) < 65536 else header)
                if len(payload) >= 65536:
                    self.sock.sendall(payload)
        except OSError:
            self.drop()

    def forget(self, stream: _Stream) -> None:
        with self._streams_lock:
            self._streams.pop(stream.local_id, None)

    def drop(self) -> None:
        """Cut the connection, as a phone leaving Wi-Fi does."""
        if self.dead.is_set():
            return
        self.dead.set()
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            self.sock.close()
        with self._streams_lock:
            streams = list(self._streams.values())
            self._streams.clear()
        for stream in streams:
            stream.host_closed()

    # -- receiving ----------------------------------------------------------------
    def _recv_exact(self, n: int) -> bytes | None:
        buf = bytearray(n)
        view = memoryview(buf)
        got = 0
        while got < n:
            try:
                k = self.sock.recv_into(view[got:])
            except OSError:
                return None
            if k == 0:
                return None
            got += k
        return bytes(buf)

    def serve(self) -> None:
        try:
            while not self.dead.is_set():
                while self.stalled.is_set() and not self.dead.is_set():
                    time.sleep(0.05)
                header = self._recv_exact(HEADER.size)
                if header is None:
                    break
                command, arg0, arg1, length, _check, magic = HEADER.unpack(header)
                if magic != command ^ 0xFFFFFFFF or length > MAX_PAYLOAD:
                    break  # an invalid header MUST close the connection (protocol.md)
                payload = self._recv_exact(length) if length else b""
                if payload is None:
                    break
                if not self._handle(command, arg0, arg1, payload):
                    break
        finally:
            self.drop()

    def _handle(self, command: int, arg0: int, arg1: int, payload: bytes) -> bool:
        if command == A_CNXN:
            self.version = min(arg0, A_VERSION)
            self.host_max_payload = min(arg1, MAX_PAYLOAD) or MAX_PAYLOAD_V1
            self.online = True
            self.send(A_CNXN, A_VERSION, MAX_PAYLOAD, self.device.banner().encode())
            return True
        if not self.online:
            return True  # anything before CNXN MUST be ignored
        if command == A_OPEN:
            self._open(arg0, payload.rstrip(b"\0").decode("utf-8", "replace"))
        elif command == A_OKAY:
            stream = self._stream(arg1)
            if stream is not None and stream.remote_id == arg0:
                stream.acked()
        elif command == A_WRTE:
            stream = self._stream(arg1)
            if stream is not None:
                stream.feed(payload)
        elif command == A_CLSE:
            with self._streams_lock:
                closing = self._streams.pop(arg1, None)
            if closing is not None:
                closing.host_closed()
        elif command in (A_AUTH, A_STLS, A_SYNC):
            pass  # never asked for; a host does not send these unprompted
        else:
            return False  # unknown command: close (protocol.md)
        return True

    def _stream(self, local_id: int) -> _Stream | None:
        with self._streams_lock:
            return self._streams.get(local_id)

    def _open(self, remote_id: int, service: str) -> None:
        handler = self.device.service_for(service)
        if handler is None or remote_id == 0:
            self.send(A_CLSE, 0, remote_id)
            return
        with self._streams_lock:
            local_id = self._next_id
            self._next_id += 1
            stream = _Stream(self, local_id, remote_id)
            self._streams[local_id] = stream
        self.send(A_OKAY, local_id, remote_id)
        threading.Thread(
            target=self.device.run_service,
            args=(handler, stream),
            name=f"loopback-adb-{service.split(':', 1)[0]}",
            daemon=True,
        ).start()


_TOOL_HEADER = """#!{python}
# A tool of the loopback ADB device (tests/support/loopback_adb.py).
import json, os, sys, time
STATE = {state!r}
"""

# getprop as a phone's (a native binary) answers: all properties as "[key]: [value]"
# lines, or one value (else the default given). A shell script over getprop.txt, not a
# Python one: a phone answers it in a few milliseconds, not a Python start-up's 30.
_GETPROP_SH = """#!/bin/sh
# A tool of the loopback ADB device (tests/support/loopback_adb.py).
file={state}/getprop.txt
[ $# -eq 0 ] && exec cat "$file"
while IFS= read -r line; do
  case $line in "[$1]: ["*) value=${{line#"[$1]: ["}}; printf '%s\\n' "${{value%]}}"; exit 0;; esac
done < "$file"
printf '%s\\n' "${{2:-}}"
"""

# `pm list features`: PackageManager's system features, one "feature:NAME" a line.
_PM = """
if sys.argv[1:] != ["list", "features"]:
    sys.exit("pm: the loopback phone answers only `pm list features`")
with open(os.path.join(STATE, "features.json")) as f:
    for name in sorted(json.load(f)):
        print(f"feature:{name}")
"""

# Android's `log [-p priority] [-t tag] message...` writes one line to logcat.
_LOG = """
args = sys.argv[1:]
tag, level = "log", "I"
while args and args[0] in ("-t", "-p"):
    if len(args) < 2:
        sys.exit("log: option needs a value")
    if args[0] == "-t":
        tag = args[1]
    else:
        level = args[1][:1].upper()
    args = args[2:]
entry = {"t": time.time(), "pid": os.getppid(), "level": level, "tag": tag,
         "msg": " ".join(args)}
with open(os.path.join(STATE, "logcat.jsonl"), "a") as f:
    f.write(json.dumps(entry) + "\\n")
"""

# logcat: -d (dump and exit), -s (default filter silent), -v FORMAT (threadtime
# is the only format), -b BUFFER (ignored), -T/-t TIME-or-COUNT, TAG[:PRIORITY].
# As in logcat, a -T argument of digits only is a count, anything else a time:
# "sssss.mmm" (epoch) or "MM-DD hh:mm:ss.mmm".
_LOGCAT = """
import datetime
PRIORITIES = "VDIWEFS"
args = sys.argv[1:]
default, filters, since, count, dump = "V", {}, None, None, False
while args:
    arg = args.pop(0)
    if arg == "-d":
        dump = True
    elif arg == "-s":
        default = "S"
    elif arg in ("-v", "-b"):
        args.pop(0)
    elif arg in ("-T", "-t"):
        value = args.pop(0)
        dump = dump or arg == "-t"
        if value.isdigit():
            count = int(value)
        elif "-" in value:
            year = datetime.date.today().year
            since = datetime.datetime.strptime(f"{year}-{value}", "%Y-%m-%d %H:%M:%S.%f").timestamp()
        else:
            since = float(value)
    elif arg.startswith("-"):
        sys.exit(f"logcat: unsupported option {arg}")
    else:
        tag, _, level = arg.partition(":")
        filters[tag] = (level or "V").upper()[:1]
if not dump:
    sys.exit("logcat: the loopback device only dumps (-d)")
lines = []
path = os.path.join(STATE, "logcat.jsonl")
if os.path.exists(path):
    with open(path) as f:
        for raw in f:
            e = json.loads(raw)
            floor = filters.get(e["tag"], filters.get("*", default))
            if floor == "S" or PRIORITIES.index(e["level"]) < PRIORITIES.index(floor):
                continue
            if since is not None and e["t"] < since:
                continue
            stamp = datetime.datetime.fromtimestamp(e["t"])
            lines.append(f"{stamp:%m-%d %H:%M:%S}.{stamp.microsecond // 1000:03d} "
                         f"{e['pid']:5d} {e['pid']:5d} {e['level']} {e['tag']}: {e['msg']}")
if count is not None:
    lines = lines[-count:]
for line in lines:
    print(line)
"""


class LoopbackAdbDevice:
    """A phone on 127.0.0.1:port that a real adb server can `adb connect` to."""

    def __init__(
        self,
        root: Path,
        *,
        properties: Mapping[str, str] | None = None,
        features: Sequence[str] = DEFAULT_FEATURES,
        host: str = "127.0.0.1",
        port: int = 0,
        arm64: bool = False,
        mem_total_kb: int | None = None,
        system_features: Sequence[str] | None = None,
    ) -> None:
        self.root = Path(root)
        self.fs = self.root / "fs"
        self.sandbox = self.fs / DEVICE_TMP.lstrip("/")
        self.state_dir = self.root / "state"
        self.tools = self.root / "tools"
        self.properties: dict[str, str] = dict(DEFAULT_PROPERTIES)
        if arm64:
            self.properties.update(ARM64_PROPERTIES)
        self.properties.update(properties or {})
        self.arm64 = arm64
        # The phone's RAM (/proc/meminfo's MemTotal) and system features (`pm list features`).
        self.mem_total_kb = mem_total_kb
        self.system_features = None if system_features is None else tuple(system_features)
        # Set up by start() for the arm64 phone: how its shells run ARM code.
        self.emulation: Arm64Emulation | None = None
        self.features = tuple(features)
        self.faults = LoopbackFaults()
        self.on_stream_close: OnStreamClose = "kill-group"
        # While True, connections are refused (closed at once): a phone that is off.
        self.offline = False
        self._host = host
        self._requested_port = port
        self._listener: socket.socket | None = None
        self._links: list[_Link] = []
        self._links_lock = threading.Lock()
        self._stalled: list[_Link] = []
        self._groups: set[int] = set()
        self._groups_lock = threading.Lock()
        self._stopping = threading.Event()
        # What the host asked for, for tests to check: every OPENed service, and the
        # device path of every SEND that completed.
        self.opened_services: list[str] = []
        self.received_files: list[str] = []

    # -- lifecycle ----------------------------------------------------------------
    def start(self) -> LoopbackAdbDevice:
        for folder in (self.sandbox, self.state_dir, self.tools):
            folder.mkdir(parents=True, exist_ok=True)
        if self.arm64 and self.emulation is None:
            self.emulation = arm64_emulation(self.root / "arm64")
        self._write_properties()
        self._install_tools()
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((self._host, self._requested_port))
        listener.listen(8)
        self._listener = listener
        threading.Thread(target=self._accept_loop, name="loopback-adb-accept", daemon=True).start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        if self._listener is not None:
            with contextlib.suppress(OSError):
                self._listener.close()
        self.release_stall()
        self.drop_connections()
        with self._groups_lock:
            groups = list(self._groups)
        for pgid in groups:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, signal.SIGKILL)

    def __enter__(self) -> LoopbackAdbDevice:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        if self._listener is None:
            raise RuntimeError("the loopback device is not started")
        return int(self._listener.getsockname()[1])

    @property
    def address(self) -> str:
        """What `adb connect` takes, and the serial the adb server then gives it."""
        return f"{self._host}:{self.port}"

    # -- what tests poke at ---------------------------------------------------------
    def device_path(self, remote: str) -> Path:
        """The host path behind a device path (/data/local/tmp/x -> sandbox/x)."""
        if not remote.startswith("/"):
            raise ValueError(f"device paths are absolute: {remote!r}")
        parts = [p for p in remote.split("/") if p not in ("", ".")]
        if ".." in parts:
            raise ValueError(f"no '..' in device paths: {remote!r}")
        return self.fs.joinpath(*parts)

    def drop_connections(self) -> None:
        """Cut every connection to the adb server (it will reconnect unless offline)."""
        with self._links_lock:
            links = list(self._links)
        for link in links:
            link.drop()

    @property
    def stalled(self) -> bool:
        """Whether a stall fault holds a connection now."""
        return bool(self._stalled)

    def release_stall(self) -> None:
        """End a stall: the stalled connections are cut, so the server reconnects fresh."""
        stalled, self._stalled = self._stalled, []
        for link in stalled:
            link.drop()
            link.stalled.clear()

    def set_property(self, key: str, value: str) -> None:
        self.properties[key] = value
        self._write_properties()

    def log(self, tag: str, message: str, *, level: str = "I", when: float | None = None) -> None:
        """Append one line to the device's log buffer, as a process calling liblog would."""
        entry = {
            "t": time.time() if when is None else when,
            "pid": os.getpid(),
            "level": level,
            "tag": tag,
            "msg": message,
        }
        with open(self.state_dir / "logcat.jsonl", "a") as f:
            f.write(json.dumps(entry) + "\n")

    def live_processes(self) -> list[int]:
        """Pids still running (not zombies) in the process groups this device started."""
        with self._groups_lock:
            groups = set(self._groups)
        alive: list[int] = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                text = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            # Fields after "(comm)": state ppid pgrp ...
            fields = text[text.rfind(")") + 2 :].split()
            if len(fields) >= 3 and int(fields[2]) in groups and fields[0] not in ("Z", "X"):
                alive.append(int(entry))
        return alive

    def banner(self) -> str:
        props = ";".join(
            f"{key}={self.properties.get(key, '')}"
            for key in ("ro.product.name", "ro.product.model", "ro.product.device")
        )
        return f"device::{props};features={','.join(self.features)}"

    # -- plumbing -------------------------------------------------------------------
    def _write_properties(self) -> None:
        if not self.state_dir.is_dir():
            return
        tmp = self.state_dir / "properties.json.tmp"
        tmp.write_text(json.dumps(self.properties, sort_keys=True))
        os.replace(tmp, self.state_dir / "properties.json")
        text = "".join(f"[{k}]: [{v}]\n" for k, v in sorted(self.properties.items()))
        (self.state_dir / "getprop.txt.tmp").write_text(text)
        os.replace(self.state_dir / "getprop.txt.tmp", self.state_dir / "getprop.txt")

    def _install_tools(self) -> None:
        header = _TOOL_HEADER.format(python=sys.executable, state=str(self.state_dir))
        getprop = self.tools / "getprop"
        getprop.write_text(_GETPROP_SH.format(state=shlex.quote(str(self.state_dir))))
        getprop.chmod(0o755)
        tools = [("log", _LOG), ("logcat", _LOGCAT)]
        if self.system_features is not None:
            (self.state_dir / "features.json").write_text(json.dumps(list(self.system_features)))
            tools.append(("pm", _PM))
        for name, body in tools:
            path = self.tools / name
            path.write_text(header + body)
            path.chmod(0o755)
        if self.mem_total_kb is not None:
            # The lines a kernel writes first; MemTotal is what a store reads as the RAM.
            kb = self.mem_total_kb
            (self.state_dir / "meminfo").write_text(
                f"MemTotal:       {kb:8d} kB\nMemFree:        {kb // 4:8d} kB\n"
                f"MemAvailable:   {kb // 2:8d} kB\n"
            )

    def _rewrite(self, command: str) -> str:
        """The command line as this phone's shell runs it (see the module docstring)."""
        command = command.replace(DEVICE_TMP, str(self.sandbox))
        if self.mem_total_kb is not None:
            command = command.replace("/proc/meminfo", str(self.state_dir / "meminfo"))
        return command

    def _accept_loop(self) -> None:
        assert self._listener is not None
        while not self._stopping.is_set():
            try:
                sock, _ = self._listener.accept()
            except OSError:
                return
            if self.offline or self._stopping.is_set():
                sock.close()
                continue
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            link = _Link(self, sock)
            with self._links_lock:
                self._links = [x for x in self._links if not x.dead.is_set()] + [link]
            threading.Thread(target=link.serve, name="loopback-adb-link", daemon=True).start()

    def service_for(self, service: str) -> Callable[[_Stream], None] | None:
        self.opened_services.append(service)
        if service.startswith("shell"):
            rest = service[len("shell") :]
            if not rest.startswith((":", ",")):
                return None
            args, _, command = rest.lstrip(",").partition(":")
            shell_protocol = "v2" in args.split(",")
            return lambda stream: self._shell(stream, command, shell_protocol)
        if service.startswith("exec:"):
            command = service[len("exec:") :]
            return lambda stream: self._shell(stream, command, False)
        if service == "sync:":
            return self._sync
        return None

    def run_service(self, handler: Callable[[_Stream], None], stream: _Stream) -> None:
        try:
            handler(stream)
        except _StreamClosed:
            pass
        finally:
            stream.close()

    def _stall(self, stream: _Stream) -> None:
        link = stream.link
        link.stalled.set()
        self._stalled.append(link)
        link.dead.wait()
        raise _StreamClosed

    # -- shell ----------------------------------------------------------------------
    def _shell(self, stream: _Stream, command: str, shell_protocol: bool) -> None:
        def emit(kind: int, data: bytes) -> None:
            if shell_protocol:
                stream.write(SHELL_PACKET.pack(kind, len(data)) + data)
            else:
                stream.write(data)

        pattern = self.faults.fail_shell_pattern
        if pattern and re.search(pattern, command):
            emit(SHELL_STDERR, f"/system/bin/sh: injected failure: {command}\n".encode())
            if shell_protocol:
                emit(SHELL_EXIT, bytes([self.faults.fail_shell_exit_code & 0xFF]))
            return

        env = {
            "PATH": f"{self.tools}:{os.environ.get('PATH', '/usr/bin:/bin')}",
            "TMPDIR": str(self.sandbox),
            "HOME": str(self.sandbox),
            "TERM": "dumb",
            "LANG": "C.UTF-8",
        }
        if self.emulation is not None:
            env.update(self.emulation.env())
            env["PATH"] = (
                f"{self.tools}:{self.emulation.path(os.environ.get('PATH', '/usr/bin:/bin'))}"
            )
        argv = ["bash", "-c", self._rewrite(command)] if command else ["bash"]
        process = subprocess.Popen(
            argv,
            cwd=self.sandbox,
            env=env,
            bufsize=0,
            start_new_session=True,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE if shell_protocol else subprocess.STDOUT,
        )
        with self._groups_lock:
            self._groups.add(process.pid)
        stream.on_host_close.append(lambda: self._hang_up(process))

        def pump(pipe: object, kind: int) -> None:
            fd = pipe.fileno()  # type: ignore[attr-defined]
            try:
                while data := os.read(fd, 65536):
                    emit(kind, data)
            except (_StreamClosed, OSError):
                pass

        pumps = [threading.Thread(target=pump, args=(process.stdout, SHELL_STDOUT), daemon=True)]
        if shell_protocol:
            pumps.append(
                threading.Thread(target=pump, args=(process.stderr, SHELL_STDERR), daemon=True)
            )
        for thread in pumps:
            thread.start()
        threading.Thread(
            target=self._feed_stdin, args=(stream, process, shell_protocol), daemon=True
        ).start()
        code = process.wait()
        for thread in pumps:
            thread.join()
        for pipe in (process.stdout, process.stderr):
            if pipe is not None:
                pipe.close()
        if shell_protocol and not stream.closed.is_set():
            # adbd reports a signal death as 0x80 | signal number.
            status = code if code >= 0 else 0x80 | -code
            emit(SHELL_EXIT, bytes([status & 0xFF]))

    def _feed_stdin(
        self, stream: _Stream, process: subprocess.Popen[bytes], shell_protocol: bool
    ) -> None:
        stdin = process.stdin
        assert stdin is not None
        try:
            while True:
                if shell_protocol:
                    kind, length = SHELL_PACKET.unpack(stream.read_exact(SHELL_PACKET.size))
                    data = stream.read_exact(length) if length else b""
                    if kind == SHELL_CLOSE_STDIN:
                        break
                    if kind != SHELL_STDIN:
                        continue  # window size changes mean nothing without a pty
                else:
                    data = stream.read()
                    if not data:
                        break
                stdin.write(data)
        except (_StreamClosed, OSError, struct.error):
            pass
        finally:
            with contextlib.suppress(OSError):
                stdin.close()

    def _hang_up(self, process: subprocess.Popen[bytes]) -> None:
        if process.poll() is not None and self.on_stream_close == "sighup":
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            if self.on_stream_close == "sighup":
                os.kill(process.pid, signal.SIGHUP)
            else:
                os.killpg(process.pid, signal.SIGKILL)

    # -- sync -----------------------------------------------------------------------
    def _sync(self, stream: _Stream) -> None:
        while True:
            head = stream.read_exact(8)
            request, length = head[:4], struct.unpack("<I", head[4:])[0]
            if length > SYNC_PATH_MAX:
                self._sync_fail(stream, "path too long")
                return
            path = stream.read_exact(length).decode("utf-8", "replace") if length else ""
            if request == b"STAT":
                self._stat_v1(stream, path)
            elif request in (b"STA2", b"LST2") and "stat_v2" in self.features:
                self._stat_v2(stream, request, path)
            elif request == b"LIST":
                self._list(stream, path, v2=False)
            elif request == b"LIS2" and "ls_v2" in self.features:
                self._list(stream, path, v2=True)
            elif request == b"SEND":
                spec, comma, mode_text = path.rpartition(",")
                if not comma or not mode_text.isdigit():
                    self._sync_fail(stream, "missing , in ID_SEND_V1" if not comma else "bad mode")
                    return
                if not self._send(stream, spec, int(mode_text), 0):
                    return
            elif request == b"SND2" and "sendrecv_v2" in self.features:
                setup = stream.read_exact(12)
                _id, mode, flags = struct.unpack("<4sII", setup)
                if flags & ~SYNC_FLAG_DRY_RUN:
                    self._sync_fail(stream, f"unknown flags: {flags}")
                    return
                if not self._send(stream, path, mode, flags):
                    return
            elif request == b"RECV":
                if not self._recv(stream, path):
                    return
            elif request == b"RCV2" and "sendrecv_v2" in self.features:
                _id, flags = struct.unpack("<4sI", stream.read_exact(8))
                if flags:
                    self._sync_fail(stream, f"unknown flags: {flags}")
                    return
                if not self._recv(stream, path):
                    return
            elif request == b"QUIT":
                return
            else:
                code = struct.unpack("<I", request)[0]
                self._sync_fail(stream, f"unknown command {code:08x}")
                return

    def _host_path(self, remote: str) -> Path | None:
        try:
            return self.device_path(remote)
        except ValueError:
            return None

    @staticmethod
    def _sync_fail(stream: _Stream, message: str) -> None:
        data = message.encode()
        stream.write(b"FAIL" + struct.pack("<I", len(data)) + data)

    def _stat_v1(self, stream: _Stream, remote: str) -> None:
        path = self._host_path(remote)
        mode = size = mtime = 0
        if path is not None:
            with contextlib.suppress(OSError):
                st = os.lstat(path)
                # adbd assigns st_size to a uint32_t: sizes wrap at 4 GiB.
                mode, size, mtime = (
                    st.st_mode,
                    st.st_size & 0xFFFFFFFF,
                    int(st.st_mtime) & 0xFFFFFFFF,
                )
        stream.write(SYNC_STAT_V1.pack(b"STAT", mode, size, mtime))

    def _stat_v2(self, stream: _Stream, request: bytes, remote: str) -> None:
        path = self._host_path(remote)
        try:
            if path is None:
                raise FileNotFoundError(errno.ENOENT, remote)
            st = os.stat(path) if request == b"STA2" else os.lstat(path)
        except OSError as exc:
            stream.write(SYNC_STAT_V2.pack(request, exc.errno or errno.EIO, *([0] * 10)))
            return
        stream.write(
            SYNC_STAT_V2.pack(
                request,
                0,
                st.st_dev,
                st.st_ino,
                st.st_mode,
                st.st_nlink,
                st.st_uid,
                st.st_gid,
                st.st_size,
                int(st.st_atime),
                int(st.st_mtime),
                int(st.st_ctime),
            )
        )

    def _list(self, stream: _Stream, remote: str, *, v2: bool) -> None:
        path = self._host_path(remote)
        names: list[str] = []
        if path is not None and path.is_dir():
            names = [".", "..", *sorted(os.listdir(path))]
        for name in names:
            assert path is not None
            encoded = name.encode()
            try:
                st = os.lstat(path / name)
            except OSError:
                continue
            if v2:
                stream.write(
                    SYNC_DENT_V2.pack(
                        b"DNT2",
                        0,
                        st.st_dev,
                        st.st_ino,
                        st.st_mode,
                        st.st_nlink,
                        st.st_uid,
                        st.st_gid,
                        st.st_size,
                        int(st.st_atime),
                        int(st.st_mtime),
                        int(st.st_ctime),
                        len(encoded),
                    )
                    + encoded
                )
            else:
                stream.write(
                    SYNC_DENT_V1.pack(
                        b"DENT",
                        st.st_mode,
                        st.st_size & 0xFFFFFFFF,
                        int(st.st_mtime) & 0xFFFFFFFF,
                        len(encoded),
                    )
                    + encoded
                )
        done = SYNC_DENT_V2 if v2 else SYNC_DENT_V1
        stream.write(done.pack(b"DONE", *([0] * (len(done.unpack(bytes(done.size))) - 1))))

    def _drain_send(self, stream: _Stream) -> None:
        # adbd keeps reading the client's DATA until DONE after a failure, so a
        # client that writes without reading does not lose the FAIL message.
        while True:
            kind, size = struct.unpack("<4sI", stream.read_exact(8))
            if kind != b"DATA" or size > SYNC_DATA_MAX:
                return
            stream.read_exact(size)

    def _send(self, stream: _Stream, remote: str, mode: int, flags: int) -> bool:
        if self._receive_file(stream, remote, mode, flags):
            self.received_files.append(remote)
            return True
        return False

    def _receive_file(self, stream: _Stream, remote: str, mode: int, flags: int) -> bool:
        path = self._host_path(remote)
        dry_run = bool(flags & SYNC_FLAG_DRY_RUN)
        if path is None or (not dry_run and not path.is_relative_to(self.sandbox)):
            self._sync_fail(stream, "couldn't create file: Permission denied")
            self._drain_send(stream)
            return False
        faults = self.faults
        out = None
        if not dry_run:
            try:
                path.parent.mkdir(parents=True, exist_ok=True)  # fixed_push_mkdir
                if path.is_file() or path.is_symlink():
                    path.unlink()
                out = open(path, "wb")  # noqa: SIM115 - closed on every path below
            except OSError as exc:
                self._sync_fail(
                    stream, f"couldn't create file: {os.strerror(exc.errno or errno.EIO)}"
                )
                self._drain_send(stream)
                return False
        written = mtime = 0
        started = time.monotonic()
        try:
            while True:
                rate = faults.send_bytes_per_s
                if rate is not None:
                    time.sleep(max(0.0, started + written / rate - time.monotonic()))
                kind, size = struct.unpack("<4sI", stream.read_exact(8))
                if kind == b"DONE":
                    mtime = size  # DONE carries the file's mtime where DATA has a length
                    break
                if kind != b"DATA" or size > SYNC_DATA_MAX:
                    self._sync_fail(stream, "invalid data message")
                    return False
                data = stream.read_exact(size)
                limit = faults.no_space_after_bytes
                if limit is not None and written + len(data) > limit:
                    if out is not None:
                        out.write(data[: max(0, limit - written)])
                        out.close()
                        out = None
                        path.unlink(missing_ok=True)
                    self._sync_fail(stream, "write failed: No space left on device")
                    self._drain_send(stream)
                    return False
                for trigger, action in (
                    (faults.drop_after_send_bytes, "drop"),
                    (faults.stall_after_send_bytes, "stall"),
                ):
                    if trigger is not None and written + len(data) >= trigger:
                        if out is not None:
                            out.write(data[: max(0, trigger - written)])
                            out.flush()
                        if action == "drop":
                            faults.drop_after_send_bytes = None
                            stream.link.drop()
                            raise _StreamClosed
                        faults.stall_after_send_bytes = None
                        self._stall(stream)
                if out is not None:
                    try:
                        out.write(data)
                    except OSError as exc:
                        # A real full disk (a small tmpfs under the sandbox): adbd
                        # answers FAIL "write failed: <strerror>" and unlinks the file.
                        with contextlib.suppress(OSError):
                            out.close()
                        out = None
                        path.unlink(missing_ok=True)
                        self._sync_fail(
                            stream, f"write failed: {os.strerror(exc.errno or errno.EIO)}"
                        )
                        self._drain_send(stream)
                        return False
                written += len(data)
            if out is not None:
                try:
                    out.close()
                except OSError as exc:  # the last buffered bytes did not fit
                    out = None
                    path.unlink(missing_ok=True)
                    self._sync_fail(stream, f"write failed: {os.strerror(exc.errno or errno.EIO)}")
                    return False
                out = None
                mode &= 0o7777
                try:
                    os.chmod(path, mode or 0o644)
                    os.utime(path, (mtime, mtime))  # adbd: lutimes() to the DONE timestamp
                except FileNotFoundError:
                    # Removed while it was written (the host gave up on it): adbd's
                    # lutimes() fails the same way, and it answers FAIL.
                    self._sync_fail(stream, "utimensat failed: No such file or directory")
                    return False
            stream.write(b"OKAY" + struct.pack("<I", 0))
            return True
        finally:
            if out is not None:
                out.close()

    def _recv(self, stream: _Stream, remote: str) -> bool:
        if self.faults.stall_next_recv:
            self.faults.stall_next_recv = False
            self._stall(stream)
        path = self._host_path(remote)
        try:
            if path is None:
                raise FileNotFoundError(errno.ENOENT, remote)
            source = open(path, "rb")  # noqa: SIM115 - closed below
        except OSError as exc:
            self._sync_fail(stream, f"open failed: {os.strerror(exc.errno or errno.EIO)}")
            return False
        with source:
            while chunk := source.read(SYNC_DATA_MAX):
                stream.write(b"DATA" + struct.pack("<I", len(chunk)) + chunk)
        stream.write(b"DONE" + struct.pack("<I", 0))
        return True


@contextlib.contextmanager
def loopback_device(root: Path, **kwargs: object) -> Iterator[LoopbackAdbDevice]:
    device = LoopbackAdbDevice(root, **kwargs)  # type: ignore[arg-type]
    device.start()
    try:
        yield device
    finally:
        device.stop()


def _main() -> None:  # pragma: no cover - manual poking: python -m tests.support.loopback_adb DIR
    root = Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/loopback-adb")
    with loopback_device(root) as device:
        print(f"loopback device at {device.address}; adb connect {device.address}", flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            while True:
                time.sleep(3600)


if __name__ == "__main__":  # pragma: no cover
    _main()
