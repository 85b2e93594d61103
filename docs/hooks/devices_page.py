"""reference/devices.md: the keys of a [devices.NAME] table, per transport, read
from the registry (etdeploy/devices/registry.py) and each transport's settings.

Each transport validates its own table: local and adb against the registry's key
lists, ssh and ios-simulator against their settings' type tables. This page reads
the same lists, so a key a transport accepts is a key listed here. Types and
defaults come from the settings dataclasses, notes from the comments the code
gives each field.
"""

from __future__ import annotations

import dataclasses
import inspect
import typing
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pagetext import code, docstring, field_notes, source_path, table, toml_value, type_name

from etdeploy import config
from etdeploy.devices import registry
from etdeploy.devices.adb.connection import AdbSettings
from etdeploy.devices.local import LocalDevice
from etdeploy.devices.simulator import SIMULATOR_SETTING_TYPES, SimulatorSettings
from etdeploy.devices.ssh.connection import SSH_SETTING_TYPES, SshSettings


@dataclass(frozen=True)
class KeyDoc:
    key: str
    type: str
    default: str
    note: str


@dataclass(frozen=True)
class TransportDoc:
    """How one transport's table is documented: its keys and where they are read."""

    name: str
    key_docs: Callable[[], list[KeyDoc]]
    about: Callable[[], str]
    where: str


def _annotation_type(annotation: Any) -> str:
    """A field's annotation in TOML's words (Path is a str, a path)."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)] or [annotation]
    kind = args[0] if len(args) == 1 else annotation
    if kind is Path:
        return "str (path)"
    if typing.get_origin(kind) is typing.Literal:
        return " or ".join(code(f'"{v}"') for v in typing.get_args(kind))
    return type_name(kind) if isinstance(kind, type) else str(kind)


def _field_default(f: dataclasses.Field[Any]) -> str:
    if f.default is not dataclasses.MISSING:
        return toml_value(f.default)
    return "required" if f.default_factory is dataclasses.MISSING else ""


def settings_keys(
    cls: type, keys: Mapping[str, Any] | tuple[str, ...], attribute: Callable[[str], str]
) -> list[KeyDoc]:
    """KeyDocs of the table keys `keys` held by the dataclass `cls` (attribute(key) names
    the field); a key without a field is a LookupError, so the page cannot go stale."""
    fields = {f.name: f for f in dataclasses.fields(cls)}
    hints = typing.get_type_hints(cls)
    notes = field_notes(cls)
    docs = []
    for key in keys:
        name = attribute(key)
        if name not in fields:
            raise LookupError(f"{cls.__name__} has no field for the table key {key!r}")
        expected = keys[key] if isinstance(keys, Mapping) else None
        kind = type_name(expected) if expected is not None else _annotation_type(hints[name])
        if kind == "str" and _annotation_type(hints[name]) != "str":
            kind = _annotation_type(hints[name])
        docs.append(KeyDoc(key, kind, _field_default(fields[name]), notes.get(name, "")))
    return docs


def _adb_attribute(key: str) -> str:
    """adb_host and adb_port are AdbSettings.host and .port (AdbSettings.from_config)."""
    fields = {f.name for f in dataclasses.fields(AdbSettings)}
    return key if key in fields else key.removeprefix("adb_")


def _local_keys() -> list[KeyDoc]:
    parameters = inspect.signature(LocalDevice.__init__).parameters
    hints = typing.get_type_hints(LocalDevice.__init__)
    docs = []
    for key in registry.LOCAL_KEYS:
        if key not in parameters:
            raise LookupError(f"LocalDevice takes no {key!r}")
        default = parameters[key].default
        shown = "etdeploy's cache" if default is None else toml_value(default)
        docs.append(KeyDoc(key, _annotation_type(hints[key]), shown, ""))
    return docs


TRANSPORT_DOCS: dict[str, TransportDoc] = {
    "local": TransportDoc(
        "local",
        _local_keys,
        lambda: docstring(inspect.getmodule(LocalDevice)),
        source_path(LocalDevice),
    ),
    "adb": TransportDoc(
        "adb",
        lambda: settings_keys(AdbSettings, registry.ADB_KEYS, _adb_attribute),
        lambda: docstring(AdbSettings),
        source_path(AdbSettings),
    ),
    "ssh": TransportDoc(
        "ssh",
        lambda: settings_keys(SshSettings, SSH_SETTING_TYPES, str),
        lambda: docstring(SshSettings),
        source_path(SshSettings),
    ),
    "ios-simulator": TransportDoc(
        "ios-simulator",
        lambda: settings_keys(SimulatorSettings, SIMULATOR_SETTING_TYPES, str),
        lambda: docstring(SimulatorSettings) + " Every ssh key above reaches the Mac.",
        source_path(SimulatorSettings),
    ),
}


def transport_docs() -> Iterator[TransportDoc]:
    """One per registered transport; a transport registered without documentation here
    is a LookupError (tests/test_docs.py)."""
    missing = set(registry.TRANSPORTS) - set(TRANSPORT_DOCS)
    if missing:
        raise LookupError(f"transports without a reference: {', '.join(sorted(missing))}")
    for name in registry.TRANSPORTS:
        yield TRANSPORT_DOCS[name]


def _default_transport() -> str:
    """What a table without `transport` is, asked of the parser itself."""
    parsed = config.parse_config({"devices": {"probe": {}}})
    return parsed.devices["probe"].transport


def _rows(keys: list[KeyDoc]) -> Iterator[list[str]]:
    for doc in keys:
        yield [code(doc.key), doc.type, doc.default, doc.note]


HEADER = ["key", "type", "default", "what the code says of it"]


def render() -> str:
    common = [
        KeyDoc(
            "transport",
            " or ".join(code(f'"{t}"') for t in registry.TRANSPORTS),
            toml_value(_default_transport()),
            "which transport reaches the device",
        )
    ]
    common += [
        KeyDoc(
            k,
            "str (path)",
            "",
            "a runner bundle or executor_runner to use instead "
            "of the one etdeploy builds for the device",
        )
        for k in registry.COMMON_KEYS
    ]
    parts = [
        "# Device tables reference\n",
        "*Generated from the code at every build of this site; do not edit.* A "
        "`[devices.NAME]` table in `etdeploy.toml` (or a farm spec) says how to reach one "
        "device; `--device NAME` picks it. A key its transport does not take is an error "
        "that lists the ones it does (exit 2). Relative paths are relative to the file. "
        f"Transports are registered in {source_path(registry)}. The [phones](../guides/phones.md) "
        "and [SSH hosts](../guides/ssh-hosts.md) guides say how to use them.\n",
        "## Every table\n",
        table(HEADER, _rows(common)),
    ]
    for doc in transport_docs():
        parts += [
            f'## `transport = "{doc.name}"`\n',
            f"From {doc.where}. " + " ".join(doc.about().split()) + "\n",
            table(HEADER, _rows(doc.key_docs())),
        ]
    return "\n".join(parts)
