"""What the keeper (keeper.py) and its clients (keeper_client.py) share: where a
keeper's socket is, and the messages they exchange.

A keeper is found by a digest of everything that decides what it connects to and
how it behaves: the device's settings and name, the ssh_config file as it is now
(path, size, mtime, inode), the local user, $HOME, the ssh-agent socket when the
agent is allowed, the working directory when a path setting is relative, and the
code it runs (etdeploy.background.code_stamp: etdeploy's version and sources,
paramiko and its crypto libraries as installed, the interpreter). Change any of them and
the next command starts a keeper of its own; the old one leaves after its idle time.

Its directory is private (etdeploy.background.private_directory): a directory there
that is a link, another user's or open to others is refused, not repaired.

Messages are JSON lines on a Unix socket. A request is {"op": ..., args}; the
keeper answers with any number of {"progress": ...} lines and then exactly one of
{"ok": value}, {"error": {...}} (an EtdeployError, rebuilt as the same type with the
same message, hint, device and command) or {"cancelled": true}. A client may send
{"op": "cancel"} while its request runs; closing the socket means the same.
"""

from __future__ import annotations

import base64
import getpass
import hashlib
import json
import os
import tempfile
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TypeVar

import etdeploy.errors
from etdeploy.background import code_stamp, private_directory
from etdeploy.devices.ssh.command_results import Completed, HelperResult
from etdeploy.devices.ssh.host_settings import SshSettings, SshTarget
from etdeploy.errors import EtdeployError, InfraError, TransportError
from etdeploy.jsonvalue import JsonObject
from etdeploy.paths import cache_root

T = TypeVar("T")

PROTOCOL = 1
# AF_UNIX paths hold at most 108 bytes on Linux and 104 on macOS (sun_path, unix(7);
# macOS <sys/un.h>, read 2026-12-05); a cache dir deeper than this puts the keepers
# in a short private directory under the temp dir instead.
_SOCKET_DIR_MAX = 80
# The settings that name files on this machine: relative, they depend on the cwd.
_PATH_SETTINGS = ("key_filename", "known_hosts", "ssh_config")


# The modules a keeper imports besides etdeploy: a new version of one installed under a
# running keeper makes it stale.
KEEPER_MODULES = ("paramiko", "cryptography", "bcrypt", "nacl")


def keeper_dir() -> Path:
    """The private directory (0700) of this cache's keepers; Untrusted when what is
    there is not this user's alone (etdeploy.background.private_directory)."""
    root = cache_root()
    if len(str(root / "keepers")) <= _SOCKET_DIR_MAX:
        return private_directory(root, ["keepers"])
    tag = hashlib.sha256(str(root).encode()).hexdigest()[:12]
    return private_directory(Path(tempfile.gettempdir()), [f"etdeploy-{os.getuid()}", tag])


@dataclass(frozen=True)
class KeeperPaths:
    """One keeper's files: its socket, the lock its starters hold, its pid, its log."""

    key: str
    socket: Path
    lock: Path
    pid: Path
    log: Path

    @classmethod
    def of(cls, directory: Path, key: str) -> KeeperPaths:
        return cls(
            key,
            directory / f"{key}.sock",
            directory / f"{key}.lock",
            directory / f"{key}.pid",
            directory / f"{key}.log",
        )


def keeper_key(settings: SshSettings, name: str) -> str:
    """The digest that names the keeper for these settings (the module docstring)."""
    config = Path(os.path.expanduser(os.path.expandvars(settings.ssh_config or "~/.ssh/config")))
    try:
        info = config.stat()
        config_id: list[object] = [
            str(config.resolve()),
            info.st_size,
            info.st_mtime_ns,
            info.st_ino,
        ]
    except OSError:
        config_id = [str(config), None]
    values = asdict(settings)
    relative = any(
        values.get(k) and not str(values[k]).startswith(("/", "~", "$")) for k in _PATH_SETTINGS
    )
    identity = {
        "protocol": PROTOCOL,
        "code": code_stamp(KEEPER_MODULES),
        "settings": values,
        "name": name,
        "config": config_id,
        "user": getpass.getuser(),
        "home": os.environ.get("HOME", ""),
        "agent": os.environ.get("SSH_AUTH_SOCK", "") if settings.allow_agent else "",
        "cwd": os.getcwd() if relative else "",
    }
    digest = hashlib.sha256(json.dumps(identity, sort_keys=True, default=str).encode())
    return digest.hexdigest()[:24]


# -- messages -----------------------------------------------------------------------------


def of_kind(value: object, kind: type[T], what: str) -> T:
    """`value` as `kind`. Another kind (or a bool for a number) in a message is what
    etdeploy and its keeper disagree on: a TransportError, as a keeper lost is."""
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        raise TransportError(
            f"the ssh keeper's {what} is not a {kind.__name__}",
            "etdeploy and its keeper differ; run again (persist_s = 0 connects without one)",
        )
    return value


def wire_field(wire: Mapping[str, object], key: str, kind: type[T]) -> T:
    """wire[key] as `kind` (of_kind)."""
    return of_kind(wire.get(key), kind, repr(key))


def wire_number(wire: Mapping[str, object], key: str) -> float:
    """wire[key] as a number of seconds (JSON writes 5.0 as 5)."""
    if isinstance(wire.get(key), int):
        return float(wire_field(wire, key, int))
    return wire_field(wire, key, float)


def as_wire(value: object, what: str) -> Mapping[str, object]:
    """`value` as a message's object (`what` names it in the error)."""
    if not isinstance(value, dict):
        raise TransportError(
            f"the ssh keeper's {what} is not an object",
            "etdeploy and its keeper differ; run again (persist_s = 0 connects without one)",
        )
    return value


def _optional_str(wire: Mapping[str, object], key: str) -> str | None:
    return None if wire.get(key) is None else wire_field(wire, key, str)


def error_to_wire(exc: EtdeployError) -> JsonObject:
    wire: JsonObject = {
        "type": type(exc).__name__,
        "message": exc.message,
        "hint": exc.hint,
        "log": exc.log,
        "exit_code": exc.exit_code,
    }
    if isinstance(exc, InfraError):
        wire.update(device=exc.device, command=exc.command, retryable=exc.retryable)
    return wire


def error_from_wire(found: object) -> EtdeployError:
    """The error the keeper met, as the same type with the same fields."""
    wire = as_wire(found, "error")
    kind = getattr(etdeploy.errors, str(wire.get("type")), None)
    if not (isinstance(kind, type) and issubclass(kind, EtdeployError)):
        kind = TransportError
    message, hint = wire_field(wire, "message", str), _optional_str(wire, "hint")
    log = _optional_str(wire, "log")
    exc: EtdeployError
    if issubclass(kind, InfraError):
        exc = kind(
            message,
            hint,
            device=_optional_str(wire, "device"),
            command=_optional_str(wire, "command"),
            log=log,
            retryable=bool(wire.get("retryable")),
        )
    else:
        exc = kind(message, hint, log=log)
    exit_code = wire.get("exit_code")
    if isinstance(exit_code, int) and not isinstance(exit_code, bool):
        exc.exit_code = exit_code
    return exc


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def completed_to_wire(done: Completed) -> JsonObject:
    wire: JsonObject = asdict(done)
    wire["stdout"], wire["stderr"] = _b64(done.stdout), _b64(done.stderr)
    return wire


def completed_from_wire(found: object) -> Completed:
    wire = as_wire(found, "answer to a command")
    return Completed(
        exit_code=wire_field(wire, "exit_code", int),
        stdout=base64.b64decode(wire_field(wire, "stdout", str)),
        stderr=base64.b64decode(wire_field(wire, "stderr", str)),
        elapsed_s=wire_number(wire, "elapsed_s"),
        timed_out=wire_field(wire, "timed_out", bool),
        pid=None if wire.get("pid") is None else wire_field(wire, "pid", int),
        pgid=None if wire.get("pgid") is None else wire_field(wire, "pgid", int),
        idle=wire_field(wire, "idle", bool),
    )


def helper_to_wire(done: HelperResult) -> JsonObject:
    return {"exit_code": done.exit_code, "stdout": _b64(done.stdout), "stderr": _b64(done.stderr)}


def helper_from_wire(found: object) -> HelperResult:
    wire = as_wire(found, "answer to a helper script")
    return HelperResult(
        None if wire.get("exit_code") is None else wire_field(wire, "exit_code", int),
        base64.b64decode(wire_field(wire, "stdout", str)),
        base64.b64decode(wire_field(wire, "stderr", str)),
    )


def target_to_wire(target: SshTarget) -> JsonObject:
    wire: JsonObject = asdict(target)
    wire["known_hosts"] = [str(p) for p in target.known_hosts]
    return wire


def target_from_wire(found: object) -> SshTarget:
    wire = as_wire(found, "target")
    return SshTarget(
        alias=wire_field(wire, "alias", str),
        hostname=wire_field(wire, "hostname", str),
        port=wire_field(wire, "port", int),
        user=wire_field(wire, "user", str),
        key_filenames=tuple(str(name) for name in wire_field(wire, "key_filenames", list)),
        known_hosts=tuple(Path(str(path)) for path in wire_field(wire, "known_hosts", list)),
    )
