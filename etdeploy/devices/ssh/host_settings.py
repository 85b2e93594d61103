"""How to reach an SSH host: its settings as etdeploy.toml gives them, and the target
they resolve to. No paramiko here: a command served by a keeper (keeper.py) reads its
settings and never imports paramiko (~60-80 ms of every command).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from etdeploy.errors import UsageError

HostKeyPolicy = Literal["strict", "accept-new"]

DEFAULT_SSH_PORT = 22

# How long a keeper stays after the last command when nobody said: none is kept.
# Nothing runs in the background unless the user turns it on (design.md); a user who
# wants one sets persist_s (Ansible keeps its master 60 s, ControlPersist=60s in its
# default ssh_args, docs.ansible.com ssh connection plugin, read 2026-12-05).
TOML_PERSIST_S = 0.0


@dataclass(frozen=True)
class SshSettings:
    """How to reach one SSH host. Unset fields fall back to ~/.ssh/config, then defaults."""

    host: str
    user: str | None = None
    port: int | None = None
    key_filename: str | None = None
    # Default: UserKnownHostsFile from ssh_config, else ~/.ssh/known_hosts.
    known_hosts: str | None = None
    host_key_policy: HostKeyPolicy = "strict"
    connect_timeout_s: float = 10.0
    banner_timeout_s: float = 15.0
    auth_timeout_s: float = 15.0
    keepalive_s: float = 15.0
    # Default: ~/etdeploy on the remote, or /tmp/etdeploy-$USER without a usable home.
    workdir: str | None = None
    # Default: ~/.ssh/config (absent is fine).
    ssh_config: str | None = None
    allow_agent: bool = True
    # Longest silence tolerated on an SFTP request before the transfer is given up.
    io_timeout_s: float = 60.0
    # Seconds a keeper process holds the connection after the last command that used
    # it (keeper.py); 0 (the default): each command connects itself.
    persist_s: float = 0.0

    @classmethod
    def from_mapping(cls, values: Mapping[str, object], *, where: str = "ssh") -> SshSettings:
        """Typed settings from an etdeploy.toml device table; a bad value names its key."""
        unknown = sorted(set(values) - set(SSH_SETTING_TYPES))
        if unknown:
            raise UsageError(
                f"{where}: unknown key {unknown[0]!r}",
                f"ssh devices take: {', '.join(SSH_SETTING_TYPES)}",
            )
        if "host" not in values:
            raise UsageError(f"{where}: host is required", 'add host = "my-mac.local"')
        checked = check_setting_types(values, SSH_SETTING_TYPES, where)
        policy = checked.get("host_key_policy", "strict")
        if policy not in ("strict", "accept-new"):
            raise UsageError(
                f'{where}.host_key_policy: expected "strict" or "accept-new", got {policy!r}',
                "strict checks known_hosts; accept-new records a new host's key",
            )
        checked.setdefault("persist_s", TOML_PERSIST_S)
        if checked["persist_s"] < 0:
            raise UsageError(
                f"{where}.persist_s: expected 0 or more seconds, got {checked['persist_s']!r}",
                "0 connects anew for every command; 60 keeps the connection a minute",
            )
        return cls(**checked)


# What each setting must be, as read from TOML (ints are accepted for seconds).
SSH_SETTING_TYPES: dict[str, type | tuple[type, ...]] = {
    "host": str,
    "user": str,
    "port": int,
    "key_filename": str,
    "known_hosts": str,
    "host_key_policy": str,
    "connect_timeout_s": (int, float),
    "banner_timeout_s": (int, float),
    "auth_timeout_s": (int, float),
    "keepalive_s": (int, float),
    "workdir": str,
    "ssh_config": str,
    "allow_agent": bool,
    "io_timeout_s": (int, float),
    "persist_s": (int, float),
}


def check_setting_types(
    values: Mapping[str, object], types: Mapping[str, type | tuple[type, ...]], where: str
) -> dict[str, Any]:
    """values with each one checked against types; an error names the key. The values
    are as loose as a class's keyword arguments (`cls(**checked)`) once checked."""
    checked: dict[str, Any] = {}
    for key, value in values.items():
        expected = types[key]
        allowed = expected if isinstance(expected, tuple) else (expected,)
        # bool is an int in Python, but `port = true` is a mistake, not port 1.
        if isinstance(value, bool) and bool not in allowed:
            ok = False
        else:
            ok = isinstance(value, allowed)
        if not ok:
            names = " or ".join(t.__name__ for t in allowed)
            raise UsageError(
                f"{where}.{key}: expected {names}, got {value!r}",
                f"fix {key} in etdeploy.toml",
            )
        if isinstance(value, (int, float)) and not isinstance(value, bool) and float in allowed:
            checked[key] = float(value)
        else:
            checked[key] = value
    return checked


@dataclass(frozen=True)
class SshTarget:
    """Settings resolved against ssh_config: what is actually dialled."""

    alias: str
    hostname: str
    port: int
    user: str
    key_filenames: tuple[str, ...]
    known_hosts: tuple[Path, ...]

    @property
    def host_key_name(self) -> str:
        """The name OpenSSH files this host under in known_hosts."""
        if self.port == DEFAULT_SSH_PORT:
            return self.hostname
        return f"[{self.hostname}]:{self.port}"

    @property
    def display(self) -> str:
        return f"{self.user}@{self.hostname}:{self.port}"
