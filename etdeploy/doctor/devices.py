"""adb (its binary and servers), every device `--device` can name and whether a
runner can run there, and SSH host keys."""

from __future__ import annotations

import dataclasses
import platform
import subprocess
from pathlib import Path
from typing import Any

from etdeploy.config import Config
from etdeploy.devices.adb import connect_server
from etdeploy.devices.base import DeviceInfo
from etdeploy.devices.listing import PROBE_TIMEOUT_S, describe_devices
from etdeploy.devices.registry import adb_settings, check_runner_abi
from etdeploy.devices.simulator import SimulatorSettings
from etdeploy.doctor.check import FAIL, OK, WARN, Check, devices_table
from etdeploy.doctor.runners import arm64_runner_check, x86_64_runner_check
from etdeploy.errors import EtdeployError
from etdeploy.runner_build import host_abi, runner_from_path

# Where etdeploy starts an adb server on demand (etdeploy.devices.adb does the same).
_LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1")


# -- adb ----------------------------------------------------------------------------------------


def adb_checks(config: Config, *, adb_host: str | None, adb_port: int | None) -> list[Check]:
    """The adb binary, and every adb server a device sits behind (the default one
    and each configured device's). A server is asked for its version, never started."""
    checks = [_adb_binary()]
    wanted_by: dict[tuple[str, int], list[str]] = {}
    servers: dict[tuple[str, int], Any] = {}
    try:
        default = adb_settings(adb_host=adb_host, adb_port=adb_port, where="--adb-host/--adb-port")
        servers[(default.host, default.port)] = default
        wanted_by[(default.host, default.port)] = []
    except EtdeployError as exc:
        checks.append(Check("adb", "adb server", FAIL, exc.message, exc.hint or ""))
    for name, device in config.devices.items():
        if device.transport != "adb":
            continue
        table = {k: v for k, v in device.settings.items() if k != "runner"}
        try:
            settings = adb_settings(
                table, adb_host=adb_host, adb_port=adb_port, where=f"devices.{name}"
            )
        except EtdeployError:
            continue  # the device row reports a bad table
        servers.setdefault((settings.host, settings.port), settings)
        wanted_by.setdefault((settings.host, settings.port), []).append(name)
    for key, settings in servers.items():
        probe = dataclasses.replace(
            settings,
            start_server=False,
            connect_timeout_s=min(settings.connect_timeout_s, PROBE_TIMEOUT_S),
        )
        users = wanted_by.get(key, [])
        label = f"adb server {settings.server}"
        try:
            version = connect_server(probe).server_version()
        except EtdeployError as exc:
            # Only a server a configured device needs is a failure; the default one
            # is started on demand on this host (as `adb` does).
            status = FAIL if users else WARN
            detail = exc.message + (f" (needed by {', '.join(users)})" if users else "")
            hint = exc.hint or ""
            if not users and settings.host in _LOCAL_HOSTS:
                hint = "only Android devices need one; etdeploy starts it on this host when a job needs it"
            checks.append(Check("adb", label, status, detail, hint))
            continue
        users_text = f"; serves {', '.join(users)}" if users else ""
        checks.append(Check("adb", label, OK, f"answers, protocol 1.0.{version}{users_text}"))
    return checks


def _adb_binary() -> Check:
    try:
        import adbutils

        path = adbutils.adb_path()
    except Exception as exc:  # adbutils raises its own kinds when no binary fits this host
        return Check(
            "adb", "adb binary", WARN, f"not found: {exc}", "needed only for Android devices"
        )
    try:
        done = subprocess.run(
            [path, "version"], capture_output=True, text=True, timeout=10, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Check("adb", "adb binary", WARN, f"{path} does not run: {exc}", "reinstall adbutils")
    lines = done.stdout.splitlines()
    protocol = next(
        (line.rsplit(" ", 1)[-1] for line in lines if line.startswith("Android Debug Bridge")), "?"
    )
    release = next((line.split(" ", 1)[-1] for line in lines if line.startswith("Version ")), "?")
    return Check("adb", "adb binary", OK, f"{release} (protocol {protocol}): {path}")


# -- devices and their runners ---------------------------------------------------------------------


def device_checks(config: Config, *, adb_host: str | None, adb_port: int | None) -> list[Check]:
    """One row per device `--device` can name, then one per reachable device's runner."""
    checks: list[Check] = []
    runner_checks: list[Check] = []
    for row in describe_devices(config, adb_host=adb_host, adb_port=adb_port):
        if row.name == "adb" and not row.configured:
            continue  # the default server's state is the adb section's row
        what = " ".join(x for x in (row.model, row.os, row.os_version, row.abi) if x)
        via = f" via {row.via}" if row.via else ""
        if row.reachable:
            checks.append(
                Check("device", row.name, OK, f"{row.transport} {row.target}{via}: {what}")
            )
            runner = _runner_check(row, config)
            if runner.status == FAIL and not row.configured:
                # A phone that is merely attached is not one the farm or run is set up for.
                runner = dataclasses.replace(runner, status=WARN)
            runner_checks.append(runner)
        else:
            # A configured device that does not answer fails; a phone on a server
            # that nobody configured (unauthorized, offline) is worth a warning.
            status = FAIL if row.configured else WARN
            checks.append(Check("device", row.name, status, f"{row.transport} {row.target}{via}: {row.state}: "
                                f"{row.error}", row.hint))  # fmt: skip
    return checks + runner_checks


def _runner_check(row: Any, config: Config) -> Check:
    """Whether a runner can run on this device, without building one."""
    import os

    name = f"runner for {row.name}"
    info = DeviceInfo(
        name=row.name, transport=row.transport, serial=row.target, os=row.os, abi=row.abi
    )
    configured = config.devices.get(row.name)
    runner = configured.settings.get("runner") if configured else None
    try:
        if isinstance(runner, str):
            base = config.path.parent if config.path else Path.cwd()
            path = Path(os.path.expanduser(runner))
            bundle = runner_from_path(path if path.is_absolute() else base / path)
            check_runner_abi(info, bundle.abi)
            version = bundle.info.get("executorch_version")
            built = f", executorch {version}" if version else ""
            return Check(
                "runner", name, OK, f"configured runner for {bundle.abi} ({bundle.flavor}{built})"
            )
        bundled = arm64_runner_check(info, name) or x86_64_runner_check(info, name)
        if bundled is not None:
            return bundled
        if row.os == "android":
            missing = [
                v for v in ("ANDROID_NDK", "EXECUTORCH_ANDROID_PREFIX") if not os.environ.get(v)
            ]
            if missing:
                return Check(
                    "runner", name, FAIL,
                    f"no runner for {row.abi}: none configured, and building one needs {' and '.join(missing)}",
                    f'set runner = "PATH" in {devices_table(row.name)}, or set ANDROID_NDK and '
                    "EXECUTORCH_ANDROID_PREFIX (android_harness/README.md)",
                )  # fmt: skip
            return Check("runner", name, OK, f"built for {row.abi} with the NDK on first use")
        if row.os == platform.system().lower():
            check_runner_abi(info, host_abi() if row.os == "linux" else f"{row.os}-{host_abi()}")
            return Check(
                "runner", name, OK, f"the host runner ({host_abi()}) runs on {row.os} {row.abi}"
            )
        return Check(
            "runner", name, FAIL,
            f"no runner for {row.os} {row.abi}: etdeploy builds runners for this machine and for Android",
            f'build one on that machine (ios_harness/README.md) and set runner = "PATH" in {devices_table(row.name)}',
        )  # fmt: skip
    except EtdeployError as exc:
        return Check("runner", name, FAIL, exc.message, exc.hint or "")


def ssh_checks(config: Config) -> list[Check]:
    """Each SSH host (and each simulator's Mac): its key in the known_hosts file
    etdeploy reads. Reachability is the device row's; this says why a strict
    connection would be refused before it is tried."""
    import paramiko

    from etdeploy.devices.ssh import SshSettings, resolve_target

    checks = []
    for name, device in config.devices.items():
        if device.transport not in ("ssh", "ios-simulator"):
            continue
        table = {k: v for k, v in device.settings.items() if k != "runner"}
        label = f"host key for {name}"
        try:
            if device.transport == "ssh":
                settings = SshSettings.from_mapping(table, where=f"devices.{name}")
            else:
                settings = SimulatorSettings.from_mapping(table, where=f"devices.{name}").ssh
            target = resolve_target(settings)
        except EtdeployError as exc:
            checks.append(Check("ssh", label, FAIL, exc.message, exc.hint or ""))
            continue
        found = None
        for path in target.known_hosts:
            if not path.is_file():
                continue
            try:
                keys = paramiko.HostKeys(str(path))
            except (OSError, UnicodeDecodeError, paramiko.SSHException) as exc:
                checks.append(
                    Check("ssh", label, FAIL, f"cannot read {path}: {exc}", "check the file")
                )
                break
            if keys.lookup(target.host_key_name):
                found = path
                break
        else:
            policy = settings.host_key_policy
            files = ", ".join(str(p) for p in target.known_hosts)
            scan = f"ssh-keyscan -p {target.port} {target.hostname} >> {target.known_hosts[0]}"
            if policy == "accept-new":
                checks.append(Check("ssh", label, WARN, f"{target.host_key_name} is not in {files}; "
                                    "accept-new records it on first connect", f"or pin it now: {scan}"))  # fmt: skip
            else:
                checks.append(Check("ssh", label, FAIL, f"{target.host_key_name} is not in {files}, and the "
                                    "strict host key policy refuses unknown hosts",
                                    f"check the fingerprint, then: {scan}"))  # fmt: skip
        if found is not None:
            checks.append(Check("ssh", label, OK, f"{target.host_key_name} is known ({found})"))
    return checks
