"""Units with one home: durations in milliseconds, written the same way by the
console and every report (a latency of 0.0039 ms is "3.9 µs" everywhere).

Issue 27 gathers sizes here too (parse_size, format_bytes); until then they live in
etdeploy.sizecheck.limits.
"""

from __future__ import annotations


def format_ms(value: float | None) -> str:
    """A latency in milliseconds, as µs below one: "3.9 µs", "0.21 ms" would hide digits."""
    if value is None:
        return "-"
    return f"{value * 1000:.1f} µs" if value < 1 else f"{value:.2f} ms"
