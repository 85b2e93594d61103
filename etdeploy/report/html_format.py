"""How the HTML report (etdeploy.report.html, html_job) writes values: escaped
text, numbers, decibels, milliseconds, bytes, and a key-value table."""

from __future__ import annotations

import html
import math

from etdeploy.units import format_bytes, format_ms

# What a key-value table holds: numbers and text, None (and "") for rows left out.
Cell = str | int | float | None


def e(value: object) -> str:
    """Escaped for text and attribute values alike: every string from a result goes through here."""
    return html.escape(str(value), quote=True)


def count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def num(value: float | None) -> str:
    # NaN (the cosine of a NaN output) is undefined, as a missing value is.
    if value is None or math.isnan(value):
        return "-"
    if math.isinf(value):
        return "non-finite"
    return f"{value:.3g}"


def db(value: float) -> str:
    if math.isinf(value):
        return "exact (∞)" if value > 0 else "non-finite"
    return f"{value:.1f} dB"


def ms(value: float | None) -> str | None:
    """A latency as the console writes it (etdeploy.units): µs below a millisecond."""
    return None if value is None else format_ms(value)


def size(value: int | None) -> str | None:
    """Decimal units, as the stores state their limits."""
    if value is None:
        return None
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if value >= scale:
            return f"{value / scale:.2f} {unit} ({value:,} bytes)"
    return f"{value} bytes"


def size_short(value: int) -> str:
    """Decimal units alone (a regression's cell, a plot's label)."""
    return format_bytes(value)


def regression_value(value: float | str | None, kind: str) -> str:
    """A regression's baseline or current value in the unit of its kind."""
    if isinstance(value, float):
        if kind == "sqnr":
            return db(value)
        if kind == "latency":
            return format_ms(value)
        if kind == "accuracy":
            return f"{value:.2%}"
        if kind == "memory":
            return size_short(int(value))
        return num(value) if kind == "max_abs" else f"{value:.4g}"
    return "-" if value is None else str(value)


def kv_table(caption: str, rows: list[tuple[str, Cell]]) -> str:
    body = "".join(
        f"<tr><th>{e(k)}</th><td>{e(v)}</td></tr>" for k, v in rows if v not in (None, "")
    )
    return f"<table class=kv><caption>{e(caption)}</caption><tbody>{body}</tbody></table>"
