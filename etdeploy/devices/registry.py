"""From a `--device NAME` to a Device, and what `etdeploy devices` lists.

This is the one place transports are registered: TRANSPORTS maps the name used
in etdeploy.toml (`transport = "ssh"`) to an opener that turns one [devices.NAME]
table into a Device. A new transport is its module plus one entry there.

What a name means, in order (open_device):

1. a [devices.NAME] table in etdeploy.toml: that transport, with its settings;
2. "local": this machine;
3. "adb": the phone ANDROID_SERIAL names, else the only one attached;
4. anything else is looked up on the adb server: an exact serial, or a phone whose
   model, product or device name matches ignoring case and spaces ("pixel8"
   matches "Pixel 8"). None or several matches are usage errors that list what is
   attached (etdeploy.devices.adb.resolve_serial).

No name at all (None) takes [run] device from etdeploy.toml, else ANDROID_SERIAL,
else "local", the embedded default.

The transports' modules (adbutils, paramiko) are imported only when a device of
that kind is opened or listed, so importing this module is cheap.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from etdeploy.config import CONFIG_NAME, Config, DeviceConfig
from etdeploy.devices.adb import AdbDevice, AdbSettings
from etdeploy.devices.base import Device, DeviceInfo
from etdeploy.devices.local import LocalDevice
from etdeploy.devices.simulator import SimulatorDevice, SimulatorSettings
from etdeploy.devices.ssh import SshDevice, SshSettings
from etdeploy.errors import DeviceError, EtdeployError, InfraError, UsageError
from etdeploy.jsonvalue import JsonValue

if TYPE_CHECKING:
    from etdeploy.devices.adb import AdbSettings

LOCAL = "local"
# `--device adb`: whichever phone adb itself would pick (ANDROID_SERIAL, else the only one).
ADB_DEFAULT = "adb"
# Keys every [devices.NAME] table may carry, whatever its transport: its runner,
# and the peak memory a run on it may reach (etdeploy.memory.limit reads it).
COMMON_KEYS = ("runner", "max_memory")
# Settings of an adb table (AdbSettings.from_config) and of a local one.
ADB_KEYS = (
    "serial",
    "adb_host",
    "adb_port",
    "connect_timeout_s",
    "transfer_idle_timeout_s",
    "start_server",
)
LOCAL_KEYS = ("workdir",)


@dataclass(frozen=True)
class OpenOptions:
    """What the caller adds to a device's table: flags and where the table came from."""

    # Prefix of every error about the table: "etdeploy.toml: devices.pixel8".
    where: str
    # Relative paths in the table are relative to the config file's directory.
    base_dir: Path
    adb_host: str | None = None
    adb_port: int | None = None
    lock_timeout_s: float | None = None
    # Configured adb names and their serials.
    aliases: Mapping[str, str] = dataclasses.field(default_factory=dict)

    def lock_kwargs(self) -> dict[str, float]:
        return {} if self.lock_timeout_s is None else {"lock_timeout_s": self.lock_timeout_s}


Opener = Callable[[str, Mapping[str, JsonValue], OpenOptions], Device]


# -- openers, one per transport ------------------------------------------------------


def check_keys(
    table: Mapping[str, JsonValue], allowed: tuple[str, ...], where: str, transport: str
) -> None:
    unknown = sorted(set(table) - set(allowed))
    if unknown:
        raise UsageError(
            f"{where}: unknown key {unknown[0]!r}",
            f"{transport} devices take: {', '.join((*allowed, *COMMON_KEYS))}",
        )


def _open_local(name: str, table: Mapping[str, JsonValue], options: OpenOptions) -> Device:
    check_keys(table, LOCAL_KEYS, options.where, "local")
    workdir = table.get("workdir")
    if workdir is not None and not isinstance(workdir, str):
        raise UsageError(
            f"{options.where}.workdir: expected str, got {workdir!r}", "give a directory path"
        )
    path = _config_path(workdir, options.base_dir) if workdir else None
    return LocalDevice(name, workdir=path, **options.lock_kwargs())


def adb_settings(
    table: Mapping[str, JsonValue] | None = None,
    *,
    adb_host: str | None = None,
    adb_port: int | None = None,
    where: str = "adb",
    **overrides: object,
) -> AdbSettings:
    """AdbSettings from a table (or none), with --adb-host/--adb-port over both the
    table and ANDROID_ADB_SERVER_HOST/PORT."""
    values = dict(table or {})
    if adb_host:
        values["adb_host"] = adb_host
    if adb_port:
        values["adb_port"] = adb_port
    settings = AdbSettings.from_config(values, where=where)
    return dataclasses.replace(settings, **overrides) if overrides else settings


def _open_adb(name: str, table: Mapping[str, JsonValue], options: OpenOptions) -> Device:
    check_keys(table, ADB_KEYS, options.where, "adb")
    settings = adb_settings(
        table, adb_host=options.adb_host, adb_port=options.adb_port, where=options.where
    )
    # Without a serial the table's name is matched against the attached phones.
    try:
        return AdbDevice(name, settings, aliases=options.aliases, **options.lock_kwargs())
    except UsageError as exc:
        raise _absent_or_usage(exc, name, None) from None


def _open_ssh(name: str, table: Mapping[str, JsonValue], options: OpenOptions) -> Device:
    settings = SshSettings.from_mapping(table, where=options.where)
    return SshDevice(settings, name=name, **options.lock_kwargs())


def _open_simulator(name: str, table: Mapping[str, JsonValue], options: OpenOptions) -> Device:
    settings = SimulatorSettings.from_mapping(table, where=options.where)
    return SimulatorDevice(settings, name=name, **options.lock_kwargs())


# The registry: etdeploy.toml's transport name -> how to open one.
TRANSPORTS: dict[str, Opener] = {
    "local": _open_local,
    "adb": _open_adb,
    "ssh": _open_ssh,
    "ios-simulator": _open_simulator,
}


# -- opening ---------------------------------------------------------------------------


def config_label(config: Config) -> str:
    return config.path.name if config.path else CONFIG_NAME


def config_base_dir(config: Config) -> Path:
    return config.path.parent if config.path else Path.cwd()


def _config_path(value: str, base: Path) -> Path:
    path = Path(os.path.expanduser(value))
    return path if path.is_absolute() else base / path


def _aliases(config: Config) -> dict[str, str]:
    return {
        name: str(dc.settings["serial"])
        for name, dc in config.devices.items()
        if dc.transport == "adb" and isinstance(dc.settings.get("serial"), str)
    }


def _open_configured(dc: DeviceConfig, config: Config, options: OpenOptions) -> Device:
    opener = TRANSPORTS.get(dc.transport)
    if opener is None:
        raise UsageError(
            f"{options.where}.transport: unknown transport {dc.transport!r}",
            f"use one of: {', '.join(TRANSPORTS)}",
        )
    table = dict(dc.settings)
    table.pop("max_memory", None)  # the run's limit, not the transport's
    _runner_of(table.pop("runner", None), options.where, options.base_dir)  # checked here too
    try:
        return opener(dc.name, table, options)
    except UsageError as exc:
        raise in_config(exc, config_label(config), options.where) from None


def _runner_of(value: object, where: str, base_dir: Path) -> Path | None:
    if value is not None and not isinstance(value, str):
        raise UsageError(f"{where}.runner: expected str, got {value!r}", "give the runner's path")
    return _config_path(value, base_dir) if value else None


def configured_runner(name: str | None, config: Config) -> Path | None:
    """The runner `--device NAME`'s [devices.NAME] table names (`runner = "PATH"`,
    relative to the config file), for a device it is built elsewhere for; None when
    the table names none and etdeploy picks or builds one."""
    name = device_name(name, config)
    configured = config.devices.get(name)
    if configured is None:
        return None
    where = f"{config_label(config)}: devices.{name}"
    return _runner_of(configured.settings.get("runner"), where, config_base_dir(config))


def in_config(exc: UsageError, label: str, where: str) -> UsageError:
    """A usage error about a table, with the file and the table in front. Settings
    parsers given `where` already name file, table and key; others get the table."""
    message = exc.message if exc.message.startswith(label) else f"{where}: {exc.message}"
    return UsageError(message, exc.hint)


def device_name(name: str | None, config: Config) -> str:
    """The device `--device NAME` means when NAME is None: [run] device from
    etdeploy.toml, else the phone ANDROID_SERIAL names, else this machine."""
    if name is not None:
        return name
    configured_default = config.run.get("device")
    if isinstance(configured_default, str) and configured_default:
        return configured_default
    return ADB_DEFAULT if os.environ.get("ANDROID_SERIAL") else LOCAL


def open_device(
    name: str | None,
    config: Config,
    *,
    adb_host: str | None = None,
    adb_port: int | None = None,
    lock_timeout_s: float | None = None,
) -> Device:
    """The Device `--device NAME` means (see the module docstring for the order).

    adb_host/adb_port (--adb-host/--adb-port) win over a table's adb_host/adb_port
    and over ANDROID_ADB_SERVER_HOST/PORT. lock_timeout_s None keeps the Device's
    default. A bad setting is a UsageError that names its key
    ("etdeploy.toml: devices.pixel8.adb_port: expected int, got '5999'").
    Reaching an adb server on this host may start one there, as adb does.
    """
    label = config_label(config)
    name = device_name(name, config)
    options = OpenOptions(
        where=f"{label}: devices.{name}",
        base_dir=config_base_dir(config),
        adb_host=adb_host,
        adb_port=adb_port,
        lock_timeout_s=lock_timeout_s,
        aliases=_aliases(config),
    )
    configured = config.devices.get(name)
    if configured is not None:
        return _open_configured(configured, config, options)
    if name == LOCAL:
        return TRANSPORTS["local"](LOCAL, {}, options)
    return _open_attached(name, config, options)


def _open_attached(name: str, config: Config, options: OpenOptions) -> Device:
    """A phone on the adb server that is not configured: by serial or by model."""
    settings = adb_settings(
        adb_host=options.adb_host, adb_port=options.adb_port, where="--adb-host/--adb-port"
    )
    wanted = None if name == ADB_DEFAULT else name
    try:
        return AdbDevice(wanted, settings, aliases=options.aliases, **options.lock_kwargs())
    except UsageError as exc:
        # resolve_serial knows what is attached; we know what is configured.
        raise _absent_or_usage(exc, name, config) from None
    except InfraError as exc:
        if wanted is None or exc.device is not None:
            raise
        # The server could not be asked at all: say why we asked it.
        raise DeviceError(
            f"{name!r} is neither local nor in {config_label(config)}, so it was looked up on adb: {exc.message}",
            _with_configured(exc.hint, config),
            command=exc.command,
            log=exc.log,
            retryable=exc.retryable,
        ) from exc


# What resolve_serial says when no phone answers to the name (as opposed to
# several answering, which is the user's to settle): a missing phone, exit 3.
_NOTHING_ANSWERS = ("no attached device matches ", "no device named and none is attached")


def _absent_or_usage(exc: UsageError, name: str, config: Config | None) -> EtdeployError:
    """A name no device answers to is a DeviceError (exit 3), whatever the name:
    CI tells a phone that is missing from a command line that is wrong (exit 2).
    A name close to a configured device's gets "did you mean" in its hint. A name
    several phones answer to stays the user's to settle (exit 2)."""
    hint = _with_configured(exc.hint, config) if config is not None else exc.hint
    if not exc.message.startswith(_NOTHING_ANSWERS):
        return UsageError(exc.message, hint)
    close = (
        difflib.get_close_matches(name, [*config.devices, LOCAL], n=1, cutoff=0.7)
        if config is not None
        else []
    )
    if close:
        hint = f"did you mean --device {close[0]}? " + (hint or "")
    return DeviceError(exc.message, hint)


def _with_configured(hint: str | None, config: Config) -> str:
    names = ", ".join(sorted(config.devices)) or "none"
    extra = f"devices in {config_label(config)}: {names}; `etdeploy devices` lists them all"
    return f"{hint}; {extra}" if hint else extra


# -- the runner's ABI ---------------------------------------------------------------

# ABI spellings -> one architecture name. Android's (arm64-v8a, ...), uname -m's
# (aarch64, ...) and Apple's (arm64).
_ARCH = {
    "arm64-v8a": "arm64", "arm64": "arm64", "aarch64": "arm64",
    "x86_64": "x86_64", "amd64": "x86_64",
    "armeabi-v7a": "arm", "armeabi": "arm", "armv7l": "arm", "arm": "arm",
    "x86": "x86", "i686": "x86", "i386": "x86",
}  # fmt: skip
# Platforms whose executables are Mach-O; the rest (Android, Linux) run ELF.
_APPLE = ("darwin", "macos", "ios", "ios-simulator")
_PLATFORM_PREFIXES = ("ios-simulator", "darwin", "macos", "ios", "linux", "android")


def split_abi(abi: str) -> tuple[str, str]:
    """("darwin", "arm64") for "darwin-arm64"; ("", "arm64") for "arm64-v8a"."""
    lowered = abi.strip().lower()
    for prefix in _PLATFORM_PREFIXES:
        if lowered.startswith(prefix + "-"):
            rest = lowered[len(prefix) + 1 :]
            return prefix, _ARCH.get(rest, rest)
    return "", _ARCH.get(lowered, lowered)


def check_runner_abi(device_info: DeviceInfo, runner_abi: str) -> None:
    """Refuse a runner that cannot execute on the device, before anything is pushed.

    runner_abi is what runner_build reports ("x86_64", "arm64-v8a", "darwin-arm64",
    or "unknown" when the binary's header says nothing we know: then nothing is
    checked). An Android phone also runs what its ro.product.cpu.abilist lists
    (extra["abilist"]: a 64-bit phone that keeps 32-bit support, an x86_64
    emulator with ARM translation). A Mach-O header cannot tell macOS from iOS
    simulator builds, so a "darwin-*" runner is accepted on any Apple platform
    of its architecture.
    """
    if not runner_abi or runner_abi == "unknown" or not device_info.abi:
        return
    runner_platform, runner_arch = split_abi(runner_abi)
    device_platform, device_arch = split_abi(device_info.abi)
    device_platform = device_platform or device_info.os.lower()
    runs = [device_arch]
    listed = device_info.extra.get("abilist", "")
    runs += [split_abi(a)[1] for a in listed.split(",") if a.strip()]
    problem = ""
    if (runner_platform in _APPLE) != (device_platform in _APPLE):
        kind = "a macOS/iOS (Mach-O)" if runner_platform in _APPLE else "an Android/Linux (ELF)"
        problem = f"the runner is {kind} program built for {runner_abi}, but {device_info.name} runs {device_info.os}"
    elif runner_platform in ("ios", "ios-simulator") and runner_platform != device_platform:
        problem = (
            f"the runner is built for {runner_abi}, but {device_info.name} is {device_platform}"
        )
    elif runner_arch not in runs:
        also = f" (it runs {listed})" if listed and listed != device_info.abi else ""
        problem = f"the runner is built for {runner_abi}, but {device_info.name} is {device_info.abi}{also}"
    if problem:
        raise UsageError(problem, _abi_hint(device_info))


def _abi_hint(info: DeviceInfo) -> str:
    if info.os == "android":
        # The ABIs `etdeploy runner build --abi` knows (runner_build.ABIS).
        if info.abi == "arm64-v8a":
            return (
                "build one for it (`etdeploy runner build --abi arm64-v8a`: the self-contained "
                "arm64 bundle, or the NDK build when ANDROID_NDK is set) or pass a matching "
                "executor_runner with --runner"
            )
        if info.abi == "x86_64":
            return (
                "build one for it (`etdeploy runner build --abi x86_64`, needs the Android "
                "NDK) or pass a matching executor_runner with --runner"
            )
        return f"build an executor_runner for {info.abi} with the Android NDK and pass it with --runner"
    if info.os == "linux" and split_abi(info.abi)[1] == "arm64":
        return "build one for it (`etdeploy runner build --abi aarch64`) or pass one with --runner"
    if info.transport == LOCAL:
        return (
            "build the runner for this machine (`etdeploy runner build`) or pass one with --runner"
        )
    if info.os in _APPLE:
        return (
            "build the runner on the Mac for that platform (ios_harness/README.md) and pass it with "
            '--runner, or set runner = "PATH" in the device\'s table in etdeploy.toml'
        )
    return (
        f"build the runner on {info.name} itself and pass it with --runner, "
        'or set runner = "PATH" in its table in etdeploy.toml'
    )
