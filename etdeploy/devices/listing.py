"""`etdeploy devices` and doctor's device rows: every device `--device` can name,
attached or configured, reachable or not, each probed with a short timeout; and
the adb servers asked (and the one started when none answered here)."""

from __future__ import annotations

import dataclasses
import socket
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from etdeploy.config import Config, DeviceConfig
from etdeploy.devices.base import DeviceInfo
from etdeploy.errors import EtdeployError, UsageError

if TYPE_CHECKING:
    from etdeploy.devices.adb import AdbSettings

from etdeploy.devices.adb import friendly_matches, list_attached
from etdeploy.devices.local import LocalDevice
from etdeploy.devices.registry import (
    ADB_KEYS,
    COMMON_KEYS,
    LOCAL,
    TRANSPORTS,
    OpenOptions,
    adb_settings,
    check_keys,
    config_base_dir,
    config_label,
    in_config,
)

# How long `etdeploy devices` waits for any one host or server before it reports
# the device unreachable: listing must not hang on a host that is down.
PROBE_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class DeviceRow:
    """One line of `etdeploy devices`: an attached phone, a configured device, or both."""

    # What --device takes for it: the configured name, else the serial.
    name: str
    transport: str
    # The adb serial, user@host:port, the simulator's UDID (or its selector), this host.
    target: str
    # Whether etdeploy.toml names it.
    configured: bool
    # Whether it answered and is ready for a job.
    reachable: bool
    # adb's own word for a phone (device, offline, unauthorized), a simulator's
    # (booted, shutdown); else "ready", "absent", "ambiguous", "unreachable",
    # "bad config", or "no server" for an adb server that does not answer.
    state: str
    model: str = ""
    os: str = ""
    os_version: str = ""
    abi: str = ""
    soc: str = ""
    # The adb server a phone hangs on, or the Mac a simulator runs on.
    via: str = ""
    # Why it is not reachable, and what to do about it.
    error: str = ""
    hint: str = ""

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _row_from_info(
    info: DeviceInfo, *, name: str, configured: bool, reachable: bool, state: str, via: str = ""
) -> DeviceRow:
    return DeviceRow(
        name=name, transport=info.transport, target=info.serial, configured=configured,
        reachable=reachable, state=state, model=info.model, os=info.os,
        os_version=info.os_version, abi=info.abi, soc=info.soc, via=via,
    )  # fmt: skip


def _error_row(name: str, transport: str, target: str, exc: EtdeployError, *, configured: bool,
               state: str = "unreachable", via: str = "") -> DeviceRow:  # fmt: skip
    return DeviceRow(
        name=name, transport=transport, target=target, configured=configured, reachable=False,
        state=state, via=via, error=exc.message, hint=exc.hint or "",
    )  # fmt: skip


_ADB_STATE_HINTS = {
    "unauthorized": "unlock the phone and accept the USB debugging prompt",
    "offline": "reconnect the cable or Wi-Fi; `adb reconnect` may help",
    "authorizing": "wait a moment; the phone is checking the host's key",
}


def _attached_row(info: DeviceInfo, name: str, *, configured: bool, via: str) -> DeviceRow:
    ready = info.state == "device"
    row = _row_from_info(
        info, name=name, configured=configured, reachable=ready, state=info.state, via=via
    )
    if not ready:
        row = dataclasses.replace(
            row, error=f"adb says the phone is {info.state}",
            hint=_ADB_STATE_HINTS.get(info.state, "check `adb devices`"),
        )  # fmt: skip
    return row


def _list_server(settings: AdbSettings) -> list[DeviceInfo] | EtdeployError:
    try:
        return list_attached(settings)
    except EtdeployError as exc:
        return exc


def _probe(device_config: DeviceConfig, config: Config) -> DeviceRow:
    """Open a configured (non-adb) device with short timeouts and read its info."""
    name, transport = device_config.name, device_config.transport
    where = f"{config_label(config)}: devices.{name}"
    table = dict(device_config.settings)
    table.pop("runner", None)
    target = str(table.get("host") or table.get("udid") or table.get("name") or name)
    if transport in ("ssh", "ios-simulator"):
        # Cap the connect-phase timeouts: a host that is down costs seconds, not minutes.
        for key in ("connect_timeout_s", "banner_timeout_s", "auth_timeout_s"):
            value = table.get(key, PROBE_TIMEOUT_S)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                table[key] = min(float(value), PROBE_TIMEOUT_S)
    options = OpenOptions(where=where, base_dir=config_base_dir(config))
    try:
        device = TRANSPORTS[transport](name, table, options)
    except UsageError as exc:
        bad = in_config(exc, config_label(config), where)
        return _error_row(name, transport, target, bad, configured=True, state="bad config")
    try:
        info = device.info()
    except EtdeployError as exc:
        # A usage error here is the table's selection (several simulators match), not the host.
        state = "bad config" if isinstance(exc, UsageError) else "unreachable"
        return _error_row(name, transport, target, exc, configured=True, state=state)
    finally:
        device.close()
    # A simulator's own state (booted, shutdown) says more than "ready": `run` boots it.
    state = info.state if transport == "ios-simulator" else "ready"
    return _row_from_info(info, name=name, configured=True, reachable=True, state=state,
                          via=info.extra.get("mac", ""))  # fmt: skip


@dataclass(frozen=True)
class AdbServerState:
    """One adb server `etdeploy devices` asked: whether it answered, whether
    etdeploy started it (none answered on this machine, so one was started, as
    `adb devices` does), and how many phones it has."""

    server: str  # host:port
    answered: bool
    started: bool
    phones: int

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class DeviceSurvey:
    """What `etdeploy devices` shows: the rows, and the adb servers behind them."""

    rows: list[DeviceRow]
    adb_servers: list[AdbServerState]


def _server_listens(settings: AdbSettings) -> bool:
    """Whether anything accepts connections at the server's address: asked before
    listing, so that a server the listing had to start can be reported."""
    try:
        with socket.create_connection((settings.host, settings.port), timeout=PROBE_TIMEOUT_S):
            return True
    except OSError:
        return False


# A server's listing (or why there is none), and whether etdeploy started the server.
_Listed = tuple[list[DeviceInfo] | EtdeployError, bool]


def _list_server_noting_start(settings: AdbSettings) -> _Listed:
    listened = _server_listens(settings)
    listing = _list_server(settings)
    return listing, not listened and not isinstance(listing, EtdeployError)


def describe_devices(
    config: Config, *, adb_host: str | None = None, adb_port: int | None = None
) -> list[DeviceRow]:
    """The rows of survey_devices: every device `--device` can name."""
    return survey_devices(config, adb_host=adb_host, adb_port=adb_port).rows


def survey_devices(
    config: Config, *, adb_host: str | None = None, adb_port: int | None = None
) -> DeviceSurvey:
    """Every device `--device` can name: this machine, each configured device, then
    the phones on the adb server that no configured name covers; and each adb
    server asked, with whether etdeploy had to start it.

    Each configured host is asked once, with connect timeouts capped at
    PROBE_TIMEOUT_S; one that does not answer is a row with its error, never an
    exception. Phones come from the adb server at --adb-host/--adb-port, else
    ANDROID_ADB_SERVER_HOST/PORT, else 127.0.0.1:5037 (and the servers configured
    adb devices name). When no server answers on this host one is started there,
    as `adb devices` does; on another host nothing is started and the row says so.
    """
    default_adb = adb_settings(
        adb_host=adb_host,
        adb_port=adb_port,
        where="--adb-host/--adb-port",
        connect_timeout_s=PROBE_TIMEOUT_S,
    )
    adb_configs = _configured_adb(config, adb_host, adb_port)
    servers: dict[tuple[str, int], AdbSettings] = {
        (default_adb.host, default_adb.port): default_adb
    }
    for settings in adb_configs.values():
        if not isinstance(settings, UsageError):
            servers.setdefault((settings.host, settings.port), settings)
    listed, probes = _ask_in_parallel(config, servers)
    listings = {key: listing for key, (listing, _started) in listed.items()}
    adb_servers = [
        AdbServerState(
            server=f"{host}:{port}",
            answered=not isinstance(listing, EtdeployError),
            started=started,
            phones=0 if isinstance(listing, EtdeployError) else len(listing),
        )
        for (host, port), (listing, started) in listed.items()
    ]
    return DeviceSurvey(_survey_rows(config, adb_configs, listings, probes), adb_servers)


def _configured_adb(
    config: Config, adb_host: str | None, adb_port: int | None
) -> dict[str, AdbSettings | UsageError]:
    """Each configured adb device's settings (connect timeouts capped at PROBE_TIMEOUT_S),
    or the error in them."""
    label = config_label(config)
    adb_configs: dict[str, AdbSettings | UsageError] = {}
    for name, dc in config.devices.items():
        if dc.transport != "adb":
            continue
        where = f"{label}: devices.{name}"
        table = {k: v for k, v in dc.settings.items() if k not in COMMON_KEYS}
        try:
            check_keys(table, ADB_KEYS, where, "adb")
            settings = adb_settings(table, adb_host=adb_host, adb_port=adb_port, where=where)
            adb_configs[name] = dataclasses.replace(
                settings, connect_timeout_s=min(settings.connect_timeout_s, PROBE_TIMEOUT_S)
            )
        except UsageError as exc:
            adb_configs[name] = in_config(exc, label, where)
    return adb_configs


def _ask_in_parallel(
    config: Config, servers: dict[tuple[str, int], AdbSettings]
) -> tuple[dict[tuple[str, int], _Listed], dict[str, DeviceRow]]:
    """Each adb server's listing (and whether etdeploy started it), and each configured
    device of another transport probed: in parallel, so one slow host costs its own
    timeout only."""
    others = [dc for dc in config.devices.values() if dc.transport != "adb"]
    with ThreadPoolExecutor(max_workers=8, thread_name_prefix="etdeploy-probe") as pool:
        listing_futures = {
            key: pool.submit(_list_server_noting_start, s) for key, s in servers.items()
        }
        probe_futures = {dc.name: pool.submit(_probe, dc, config) for dc in others}
        listed = {key: f.result() for key, f in listing_futures.items()}
        probes = {name: f.result() for name, f in probe_futures.items()}
    return listed, probes


def _survey_rows(
    config: Config,
    adb_configs: dict[str, AdbSettings | UsageError],
    listings: dict[tuple[str, int], list[DeviceInfo] | EtdeployError],
    probes: dict[str, DeviceRow],
) -> list[DeviceRow]:
    """This machine, each configured device in order, then the phones no configured
    name covers."""
    rows: list[DeviceRow] = []
    if LOCAL not in config.devices:
        local = LocalDevice(LOCAL).info()
        rows.append(
            _row_from_info(local, name=LOCAL, configured=False, reachable=True, state="ready")
        )
    covered: set[tuple[str, int, str]] = set()
    for name, dc in config.devices.items():
        if dc.transport != "adb":
            rows.append(probes[name])
            continue
        settings = adb_configs[name]
        if isinstance(settings, UsageError):
            target = str(dc.settings.get("serial", name))
            rows.append(
                _error_row(name, "adb", target, settings, configured=True, state="bad config")
            )
            continue
        rows.append(
            _configured_adb_row(name, settings, listings[(settings.host, settings.port)], covered)
        )
    for (host, port), listing in listings.items():
        via = f"{host}:{port}"
        if isinstance(listing, EtdeployError):
            rows.append(
                _error_row("adb", "adb", via, listing, configured=False, state="no server", via=via)
            )
            continue
        for info in sorted(listing, key=lambda i: i.serial):
            if (host, port, info.serial) not in covered:
                rows.append(_attached_row(info, info.serial, configured=False, via=via))
    return rows


def _configured_adb_row(
    name: str,
    settings: AdbSettings,
    listing: list[DeviceInfo] | EtdeployError,
    covered: set[tuple[str, int, str]],
) -> DeviceRow:
    """A configured adb device, merged with the phone it names on its server."""
    via = settings.server
    target = settings.serial or name
    if isinstance(listing, EtdeployError):
        return _error_row(name, "adb", target, listing, configured=True, via=via)
    if settings.serial:
        found = [i for i in listing if i.serial == settings.serial]
    else:
        found = friendly_matches(name, listing)
    if len(found) == 1:
        covered.add((settings.host, settings.port, found[0].serial))
        return _attached_row(found[0], name, configured=True, via=via)
    if found:
        error = UsageError(
            f"{len(found)} attached devices match {name!r}",
            f'give it a serial in its table (serial = "{found[0].serial}")',
        )
        return _error_row(name, "adb", target, error, configured=True, state="ambiguous", via=via)
    absent = UsageError(
        f"not attached to the adb server at {via}",
        "plug it in, or `adb connect HOST:PORT` for Wi-Fi",
    )
    return _error_row(name, "adb", target, absent, configured=True, state="absent", via=via)
