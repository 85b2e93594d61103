"""Checks of the values a farm spec gives, each a UsageError that names the key
where the value is written ("nightly.toml: farm.models[1].warmup: ...") and a hint.

etdeploy.farm.spec calls these while it reads the spec, so a typo fails the
whole farm at parse time, before any device is touched, rather than once per job.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from etdeploy.build_options import QUANTIZATIONS
from etdeploy.builder import unsupported
from etdeploy.builder.backends import get_backend
from etdeploy.config import Config
from etdeploy.devices.registry import ADB_KEYS, COMMON_KEYS, LOCAL_KEYS, adb_settings
from etdeploy.devices.simulator import SimulatorSettings
from etdeploy.devices.ssh import SshSettings
from etdeploy.errors import UsageError
from etdeploy.settings import expect_type

# How a spec spells the float build in `quantize`.
NO_QUANT = "none"
# A number in TOML: seconds and tolerances may be written as integers.
NUMBER = (int, float)

# The smallest value the farm's own job keys may take, and whether it is excluded; the
# run settings' ranges are etdeploy.settings' own.
_MINIMUM: dict[str, tuple[float, bool]] = {"job_timeout_s": (0, True), "retries": (0, False)}


def strings(values: list[Any], key: str, label: str) -> list[str]:
    """A list of distinct strings."""
    for i, value in enumerate(values):
        expect_type(value, str, f"{key}[{i}]", label)
    if len(set(values)) != len(values):
        raise UsageError(f"{label}: {key} lists a value twice", f"list each once in {key}")
    return list(values)


def check_settings(settings: Mapping[str, Any], prefix: str, label: str) -> None:
    """Ranges of the farm's own job keys a table gives, named where they are written."""
    for key, (low, exclusive) in _MINIMUM.items():
        value = settings.get(key)
        if value is None or isinstance(value, bool) or not isinstance(value, NUMBER):
            continue
        if value < low or (exclusive and value == low):
            bound = f"greater than {low:g}" if exclusive else f"at least {low:g}"
            raise UsageError(
                f"{label}: {prefix}{key}: must be {bound}, got {value!r}",
                f"fix {prefix}{key} in {label}",
            )


def check_backend(name: str, key: str, label: str) -> None:
    """A backend the builder knows."""
    try:
        get_backend(name)
    except UsageError as exc:
        raise UsageError(f"{label}: {key}: {exc.message}", exc.hint) from None


def parse_quant(value: str, key: str, label: str) -> str | None:
    """A quantization mode etdeploy builds (a program's, or 8da4w for a language
    model); None for NO_QUANT, the float build."""
    if value == NO_QUANT:
        return None
    if value not in QUANTIZATIONS:
        raise UsageError(
            f"{label}: {key}: unknown quantization {value!r}",
            f'use "{NO_QUANT}" (the float build) or one of: {", ".join(QUANTIZATIONS)}',
        )
    return value


def cannot_run(backend: str, quant: str | None, device: str, config: Config) -> str | None:
    """Why this cell of a matrix cannot run, whatever the model: None when it can.

    These are facts known before anything starts, so the farm skips such a cell
    (with this reason in every report) instead of failing it as bad input once
    per device. What depends on the device's runner (a kernel or delegate it
    lacks) is left to the job's preflight.
    """
    # The builder's own rule, so the farm skips exactly what a build would refuse.
    reason = unsupported(backend, quant)
    if reason is not None:
        return reason
    # Core ML exists only on Apple's OSes; an adb device is an Android phone.
    table = config.devices.get(device)
    if backend == "coreml" and table is not None and table.transport == "adb":
        return f"Core ML runs only on Apple OSes; {device} is an Android device (adb)"
    return None


def check_model_ref(model: str, where: str, label: str, base_dir: Path) -> None:
    """A file reference must exist (relative paths are relative to the spec): caught
    here, before any device is touched, rather than once per device."""
    if model.endswith(".pt2"):
        location = model
    else:
        location, sep, _factory = model.rpartition(":")
        if not sep or not location.endswith(".py"):
            return  # an example or a module: the worker's loader checks it
    path = Path(location).expanduser()
    if not (path if path.is_absolute() else base_dir / path).is_file():
        raise UsageError(
            f"{label}: {where}: model file not found: {location}",
            f"paths in a farm spec are relative to its folder ({base_dir})",
        )


def check_device_tables(config: Config, label: str) -> None:
    """Each [devices.NAME] table's keys and values, as its transport reads them,
    without connecting: a typo fails the spec, not every job on that device."""
    # This repeats what the registry's openers check (their key lists, the runner
    # key, each transport's settings parser); a public check in the registry would
    # let this loop be one call per table.

    for name, device in config.devices.items():
        where = f"{label}: devices.{name}"
        table = {k: v for k, v in device.settings.items() if k not in COMMON_KEYS}
        runner = device.settings.get("runner")
        if runner is not None and not isinstance(runner, str):
            raise UsageError(
                f"{where}.runner: expected str, got {runner!r}", "give the runner's path"
            )
        if device.transport in ("adb", "local"):
            allowed = ADB_KEYS if device.transport == "adb" else LOCAL_KEYS
            unknown = sorted(set(table) - set(allowed))
            if unknown:
                raise UsageError(
                    f"{where}.{unknown[0]}: unknown key",
                    f"{device.transport} devices take: {', '.join((*allowed, *COMMON_KEYS))}",
                )
            if device.transport == "adb":
                adb_settings(table, where=where)
        elif device.transport == "ssh":
            SshSettings.from_mapping(table, where=where)
        elif device.transport == "ios-simulator":
            SimulatorSettings.from_mapping(table, where=where)
