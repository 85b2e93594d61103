"""The memory limit a run is held to: `--max-memory 300MB`, `[run] max_memory`, a
device's own `[devices.NAME] max_memory`, a farm job's `max_memory`. A run whose
peak (the highest phase peak, at every shape point it ran) passes it fails
(exit 1), naming the phase and its largest part.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from etdeploy.config import DeviceConfig
from etdeploy.errors import UsageError
from etdeploy.results.result_memory import Memory, MemoryLimit
from etdeploy.units import format_bytes, parse_size

_HINT = "write a size: bytes, or a number with kB/MB/GB (decimal) or KiB/MiB/GiB, e.g. 300MB"


@dataclass(frozen=True)
class MaxMemory:
    """A limit and where it was set, as a message names it."""

    bytes: int
    source: str


def parse_max_memory(value: Any, source: str) -> int:
    """Bytes from "300MB", "1.5GB", "512MiB" or an integer; a UsageError (exit 2)
    naming `source` otherwise."""
    try:
        limit = parse_size(value, what=source)
    except UsageError as exc:
        raise UsageError(exc.message, _HINT) from None
    if limit <= 0:
        raise UsageError(f"{source}: the limit must be more than 0 bytes, got {value!r}", _HINT)
    return limit


def device_max_memory(
    devices: Mapping[str, Any], device: str | None, label: str
) -> MaxMemory | None:
    """A configured device's own limit ([devices.NAME] max_memory), if it has one.
    `devices` maps names to DeviceConfig; `label` names the config file."""
    table = devices.get(device) if device else None
    settings = getattr(table, "settings", None) or {}
    if "max_memory" not in settings:
        return None
    source = f"{label}: devices.{device}.max_memory"
    return MaxMemory(parse_max_memory(settings["max_memory"], source), source)


def judge_limit(limit: MaxMemory, accounts: Sequence[tuple[str, Memory]]) -> MemoryLimit:
    """The limit against the highest peak among `accounts` (the run itself, "" ,
    and each shape point, "at shapes min"), naming where it was and what it was made of."""
    peaks = [
        (where, memory, phase)
        for where, memory in accounts
        if (phase := memory.peak_phase) is not None
    ]
    if not peaks:
        return MemoryLimit(
            limit_bytes=limit.bytes, source=limit.source, peak_bytes=None, passed=True,
            message=f"no memory measured to hold to {format_bytes(limit.bytes)} ({limit.source}): "
            "the runner does not measure memory",
        )  # fmt: skip
    where, _, phase = max(peaks, key=lambda row: row[2].peak_bytes)
    place = f"{phase.label}{' ' + where if where else ''}"
    bound = f"{format_bytes(limit.bytes)} ({limit.source})"
    passed = phase.peak_bytes <= limit.bytes
    if passed:
        message = f"peak {format_bytes(phase.peak_bytes)} ({place}) is within {bound}"
    else:
        largest = phase.largest
        biggest = (
            f"; its largest part: {largest.label} {format_bytes(largest.bytes)}" if largest else ""
        )
        message = (
            f"peak memory {format_bytes(phase.peak_bytes)} ({place}) exceeds the limit "
            f"{bound} by {format_bytes(phase.peak_bytes - limit.bytes)}{biggest}"
        )
    return MemoryLimit(
        limit_bytes=limit.bytes, source=limit.source, peak_bytes=phase.peak_bytes,
        passed=passed, message=message, phase=phase.phase,
    )  # fmt: skip


def resolve_max_memory(
    flag: str | None, run: Mapping[str, Any], devices: Mapping[str, DeviceConfig], device: str | None,
    label: str,
) -> MaxMemory | None:  # fmt: skip
    """The limit a run is held to: --max-memory, else the device's own
    ([devices.NAME] max_memory), else [run] max_memory; None when none is set.
    `run` and `devices` are etdeploy.toml's tables, `label` its file's name."""
    if flag is not None:
        return MaxMemory(parse_max_memory(flag, "--max-memory"), f"--max-memory {flag}")
    own = device_max_memory(devices, device, label)
    if own is not None:
        return own
    if "max_memory" in run:
        source = f"{label}: run.max_memory"
        return MaxMemory(parse_max_memory(run["max_memory"], source), source)
    return None
