"""etdeploy.toml -> typed settings. Flags override the file, the file overrides
defaults. A bad value names its key: `etdeploy.toml: run.iterations: expected an
integer, got "ten"`.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from etdeploy import settings
from etdeploy.errors import UsageError
from etdeploy.jsonvalue import JsonObject, JsonValue

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - 3.10
    import tomli as tomllib

CONFIG_NAME = "etdeploy.toml"
TRANSPORTS = ("local", "adb", "ssh", "ios-simulator")


@dataclass(frozen=True)
class DeviceConfig:
    name: str
    transport: str
    # Transport-specific settings (serial, adb_host, host, user, key, ...), kept
    # as given; each transport validates its own.
    settings: JsonObject = field(default_factory=dict)


@dataclass(frozen=True)
class Config:
    path: Path | None = None
    build: JsonObject = field(default_factory=dict)
    run: JsonObject = field(default_factory=dict)
    devices: dict[str, DeviceConfig] = field(default_factory=dict)
    limits: JsonObject = field(default_factory=dict)
    sizecheck: JsonObject = field(default_factory=dict)
    verify: JsonObject = field(default_factory=dict)


# [sizecheck]: sizes are "150MB"-style strings or plain byte counts. [build], [run]
# and [verify] hold run settings, whose keys and types etdeploy.settings declares.
_SIZECHECK_KEYS: dict[str, type | tuple[type, ...]] = {
    "store": str,
    "deliveries": list,
    "budget": (str, int),
    "extra": (str, int),
    "estimate": str,
}


def find_config(start: Path | None = None) -> Path | None:
    """The nearest etdeploy.toml in the directory or its parents."""
    here = (start or Path.cwd()).resolve()
    for directory in (here, *here.parents):
        candidate = directory / CONFIG_NAME
        if candidate.is_file():
            return candidate
    return None


def load_config(path: Path | None = None) -> Config:
    if path is None:
        path = find_config()
        if path is None:
            return Config()
    elif not path.is_file():
        raise UsageError(f"config file not found: {path}", "check --config")
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(
            f"{path.name}: not valid TOML: {exc}", "fix the syntax at that line"
        ) from None
    return parse_config(data, path)


def parse_config(data: Mapping[str, JsonValue], path: Path | None = None) -> Config:
    label = path.name if path else CONFIG_NAME
    tables = {"build", "run", "devices", "limits", "sizecheck", "verify"}
    for key in data:
        if key not in tables:
            raise UsageError(
                f"{label}: unknown section [{key}]", f"sections are: {', '.join(sorted(tables))}"
            )
    sections: dict[str, JsonObject] = {}
    for section in (*settings.SECTIONS, "sizecheck"):
        table = _expect_table(data.get(section, {}), section, label)
        keys = list(_SIZECHECK_KEYS if section == "sizecheck" else settings.by_key(section))
        for key, value in table.items():
            if key not in keys:
                raise UsageError(
                    f"{label}: unknown key {section}.{key}",
                    f"keys of [{section}]: {', '.join(keys)}",
                )
            if section == "sizecheck":
                settings.expect_type(value, _SIZECHECK_KEYS[key], f"{section}.{key}", label)
            else:
                entry = settings.by_key(section)[key]
                settings.expect_type(value, entry.toml_type, f"{section}.{key}", label)
        sections[section] = dict(table)
    devices: dict[str, DeviceConfig] = {}
    device_tables = _expect_table(data.get("devices", {}), "devices", label)
    for name, given_table in device_tables.items():
        table = _expect_table(given_table, f"devices.{name}", label)
        transport = table.get("transport", "adb")
        if transport not in TRANSPORTS:
            raise UsageError(
                f"{label}: devices.{name}.transport: unknown transport {transport!r}",
                f"use one of: {', '.join(TRANSPORTS)}",
            )
        given = {k: v for k, v in table.items() if k != "transport"}
        devices[name] = DeviceConfig(name, str(transport), given)
    limits = _expect_table(data.get("limits", {}), "limits", label)
    # Values are converted (and their ranges checked) here, so a bad one names its key now.
    settings.from_tables(sections, label, path.parent if path else None)
    return Config(
        path,
        sections["build"],
        sections["run"],
        devices,
        dict(limits),
        sections["sizecheck"],
        sections["verify"],
    )


def _expect_table(value: object, key: str, label: str) -> JsonObject:
    if not isinstance(value, dict):
        raise UsageError(f"{label}: {key} must be a table", f"write [{key}] with keys below it")
    return value


def config_settings(config: Config) -> dict[str, Any]:
    """The run settings etdeploy.toml gives ([build], [run], [verify]), as field values
    of etdeploy.settings.RunSettings; paths relative to the file."""
    label = config.path.name if config.path else CONFIG_NAME
    tables = {"build": config.build, "run": config.run, "verify": config.verify}
    return settings.from_tables(tables, label, config.path.parent if config.path else None)
