"""Units with one home: sizes in bytes (parsed from "150MB", written as the stores write
them) and durations in milliseconds. Every command, report and setting reads and writes
them through here, so "64MiB" means the same in a flag, etdeploy.toml and a farm spec.

MB and GB are decimal (1 MB = 10**6 bytes), as the app stores write them; KiB/MiB/GiB are
binary, for those who mean them.
"""

from __future__ import annotations

import re

from etdeploy.errors import UsageError

_KB = 10**3
_MB = 10**6
_GB = 10**9

_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")
_UNITS = {
    "": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
    "k": 10**3, "m": 10**6, "g": 10**9, "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
}  # fmt: skip


def parse_size(value: str | int | float, *, what: str = "size") -> int:
    """Bytes from 123, "123", "12MB", "1.5GB", "64MiB". KB/MB/GB decimal, KiB/MiB/GiB binary."""
    if isinstance(value, bool):
        raise UsageError(f"{what}: expected a size, got {value!r}", "write e.g. 150MB or 1.5GB")
    if isinstance(value, int):
        if value < 0:
            raise UsageError(f"{what}: a size cannot be negative ({value})")
        return value
    if isinstance(value, float):
        value = repr(value)
    if not isinstance(value, str):
        raise UsageError(f"{what}: expected a size, got {value!r}", "write e.g. 150MB or 1.5GB")
    m = _SIZE_RE.match(value)
    unit = m.group(2).lower() if m else None
    if m is None or unit not in _UNITS:
        raise UsageError(
            f"{what}: cannot read {value!r} as a size",
            "write bytes or a number with kB/MB/GB (decimal) or KiB/MiB/GiB, e.g. 150MB",
        )
    number = m.group(1)
    whole, _, frac = number.partition(".")
    scale = _UNITS[unit]
    # Exact decimal arithmetic: 1.5GB is 1_500_000_000, not a float's approximation.
    numerator = int(whole + frac) * scale
    denominator: int = 10 ** len(frac)
    if numerator % denominator:
        raise UsageError(f"{what}: {value!r} is not a whole number of bytes")
    return numerator // denominator


def format_bytes(n: int) -> str:
    """Decimal units, as the stores write them: 1.50 GB, 123.4 MB, 16.94 kB, 999 B
    (SI's lower-case k for 1000, as the HTML report writes it too)."""
    sign = "-" if n < 0 else ""
    n = abs(n)
    for unit, scale in (("GB", _GB), ("MB", _MB), ("kB", 10**3)):
        if n >= scale:
            value = n / scale
            return f"{sign}{value:.2f} {unit}" if value < 100 else f"{sign}{value:.1f} {unit}"
    return f"{sign}{n} B"


def format_ms(value: float | None) -> str:
    """A latency in milliseconds, as µs below one: "3.9 µs", "0.21 ms" would hide digits."""
    if value is None:
        return "-"
    return f"{value * 1000:.1f} µs" if value < 1 else f"{value:.2f} ms"
