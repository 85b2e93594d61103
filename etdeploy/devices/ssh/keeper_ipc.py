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
import contextlib
import getpass
import hashlib
import json
import os
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import etdeploy.errors
from etdeploy.background import code_stamp, private_directory
from etdeploy.devices.ssh.command_results import Completed, HelperResult
from etdeploy.devices.ssh.host_settings import SshSettings, SshTarget
from etdeploy.errors import EtdeployError, InfraError, TransportError
from etdeploy.paths import cache_root

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


def error_to_wire(exc: EtdeployError) -> dict[str, Any]:
    wire: dict[str, Any] = {
        "type": type(exc).__name__,
        "message": exc.message,
        "hint": exc.hint,
        "log": exc.log,
        "exit_code": exc.exit_code,
    }
    if isinstance(exc, InfraError):
        wire.update(device=exc.device, command=exc.command, retryable=exc.retryable)
    return wire


def error_from_wire(wire: dict[str, Any]) -> EtdeployError:
    """The error the keeper met, as the same type with the same fields."""
    kind = getattr(etdeploy.errors, str(wire.get("type")), None)
    if not (isinstance(kind, type) and issubclass(kind, EtdeployError)):
        kind = TransportError
    exc: EtdeployError
    if issubclass(kind, InfraError):
        exc = kind(
            wire["message"],
            wire.get("hint"),
            device=wire.get("device"),
            command=wire.get("command"),
            log=wire.get("log"),
            retryable=bool(wire.get("retryable")),
        )
    else:
        exc = kind(wire["message"], wire.get("hint"), log=wire.get("log"))
    with contextlib.suppress(TypeError, ValueError):
        exc.exit_code = int(wire["exit_code"])
    return exc


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def completed_to_wire(done: Completed) -> dict[str, Any]:
    wire = asdict(done)
    wire["stdout"], wire["stderr"] = _b64(done.stdout), _b64(done.stderr)
    return wire


def completed_from_wire(wire: dict[str, Any]) -> Completed:
    values = dict(wire)
    values["stdout"] = base64.b64decode(values["stdout"])
    values["stderr"] = base64.b64decode(values["stderr"])
    return Completed(**values)


def helper_to_wire(done: HelperResult) -> dict[str, Any]:
    return {"exit_code": done.exit_code, "stdout": _b64(done.stdout), "stderr": _b64(done.stderr)}


def helper_from_wire(wire: dict[str, Any]) -> HelperResult:
    return HelperResult(
        wire["exit_code"], base64.b64decode(wire["stdout"]), base64.b64decode(wire["stderr"])
    )


def target_to_wire(target: SshTarget) -> dict[str, Any]:
    wire = asdict(target)
    wire["known_hosts"] = [str(p) for p in target.known_hosts]
    return wire


def target_from_wire(wire: dict[str, Any]) -> SshTarget:
    return SshTarget(
        alias=wire["alias"],
        hostname=wire["hostname"],
        port=int(wire["port"]),
        user=wire["user"],
        key_filenames=tuple(wire["key_filenames"]),
        known_hosts=tuple(Path(p) for p in wire["known_hosts"]),
    )
