"""The memory limit a run is held to: `--max-memory 300MB`, `[run] max_memory`, a
device's own `[devices.NAME] max_memory`, a farm job's `max_memory`. A run whose
peak (the highest phase peak, at every shape point it ran) passes it fails
(exit 1), naming the phase and its largest part. The judged account (JudgedMemory)
is one input of the run's one verdict (etdeploy.pipeline.verify).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from etdeploy.config import DeviceConfig
from etdeploy.errors import UsageError
from etdeploy.results.result_memory import Memory, MemoryLimit
from etdeploy.results.result_shapes import ShapePoint
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


@dataclass(frozen=True)
class JudgedMemory:
    """The memory account with the limit judged on it and on every shape point,
    and the points' own verdicts: one input of the run's verdict (pipeline.verify)."""

    memory: Memory
    points: tuple[ShapePoint, ...] = ()
    warnings: tuple[str, ...] = ()

    @property
    def passed(self) -> bool:
        limit = self.memory.limit
        return (limit is None or limit.passed) and all(p.passed for p in self.points)


def judge_memory(
    memory: Memory, points: tuple[ShapePoint, ...], limit: MaxMemory | None
) -> JudgedMemory:
    """The limit (if one is set) against the run's peak and every shape point's."""
    if limit is None:
        return JudgedMemory(memory, points)
    accounts = [("", memory)] + [
        (f"at shapes {p.point}", p.memory) for p in points if p.memory is not None
    ]
    judged = judge_limit(limit, accounts)
    warnings = (
        (f"{limit.source} was not checked: {judged.message}",) if judged.peak_bytes is None else ()
    )
    return JudgedMemory(replace(memory, limit=judged), points, warnings)
