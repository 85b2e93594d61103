"""Which phones an adb server has, and which one a name means.

A name is an alias from etdeploy.toml, an exact serial, or a phone whose model,
product or device name matches ignoring case, spaces, '_' and '-' ("pixel8"
matches "Pixel 8"); no name takes ANDROID_SERIAL, else the only phone attached.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Mapping, Sequence

from etdeploy.devices.adb.connection import (
    ENV_SERIAL,
    AdbSettings,
    check_serial,
    connect_server,
    infra_error,
)
from etdeploy.devices.adb.server import AdbError
from etdeploy.devices.adb.wire import PhoneLink
from etdeploy.devices.base import DeviceInfo
from etdeploy.errors import InfraError, UsageError


def device_info(
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
        raise infra_error(exc, "listing devices") from exc
    infos: list[DeviceInfo] = []
    for entry in entries:
        props: dict[str, str] = {}
        if entry.state == "device":
            with contextlib.suppress(InfraError):
                props = PhoneLink(client, entry.serial).properties()
        infos.append(device_info(entry.serial, entry.state, props, entry.tags))
    return infos


def _normalize(text: str) -> str:
    return re.sub(r"[\s_\-]+", "", text.lower())


def describe_attached(infos: Sequence[DeviceInfo], label: str = "attached") -> str:
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
        return check_serial(aliases[name], f"the serial of {name}")
    if name is None and os.environ.get(ENV_SERIAL):
        return check_serial(os.environ[ENV_SERIAL], ENV_SERIAL)
    attached = list_attached(settings)
    if name is None:
        ready = [i for i in attached if i.state == "device"]
        if len(ready) == 1:
            return ready[0].serial
        raise UsageError(
            "no device named and "
            + ("none is attached" if not ready else f"{len(ready)} are attached"),
            f"name one with --device (a serial, a model like pixel8, or an alias) or set {ENV_SERIAL}; "
            f"{describe_attached(attached)}",
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
            f"etdeploy.toml; {describe_attached(attached)}",
        )
    raise UsageError(
        f"{len(matches)} attached devices match {name!r}",
        f"name one by serial (--device {matches[0].serial}), or give each an alias: a devices.NAME "
        f'table in etdeploy.toml with serial = "{matches[0].serial}"; {describe_attached(matches, "they are")}',
    )
