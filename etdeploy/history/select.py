"""Choosing series by name: `etdeploy history show PATTERN`.

A series is named model|backend|quantization|device|metric. A pattern with a
shell wildcard (* ? [) is matched against the whole name (fnmatch); any other
pattern is a part of the name (digits|xnnpack, latency.median_ms).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence

from etdeploy.errors import UsageError
from etdeploy.history.changes import Series


def matching(series: Sequence[Series], pattern: str | None) -> list[Series]:
    if not pattern:
        return list(series)
    if any(c in pattern for c in "*?["):
        return [s for s in series if fnmatch.fnmatchcase(s.name, pattern)]
    return [s for s in series if pattern in s.name]


def require_match(series: Sequence[Series], pattern: str | None, store: str) -> list[Series]:
    """The matching series; none is a UsageError naming a few that exist."""
    found = matching(series, pattern)
    if found:
        return found
    if not series:
        raise UsageError(
            f"history store {store} holds no series",
            "record a night first: etdeploy history record OUT/results.jsonl",
        )
    names = ", ".join(s.name for s in series[:3])
    raise UsageError(
        f"no series in {store} matches {pattern!r}",
        f"series are named model|backend|quantization|device|metric, e.g. {names}; "
        "`etdeploy history list` shows them all",
    )
