"""`run --profile`: where the time went, from the runner's ETDump.

The runner records an event per operator and per delegate call (ETDump); the
ETRecord kept at build time lets ExecuTorch's Inspector name each event's ATen
operators and the module they came from. Without an ETRecord the events still
have their runtime names and times.
"""

from __future__ import annotations

import contextlib
import io
import math
from pathlib import Path
from typing import Any

from etdeploy.errors import InputError

# Events that frame the run rather than compute in it.
_FRAMING = {"Method::execute", "Method::init", "Program::load_method"}


def summarize_etdump(etdump: Path, etrecord: Path | None, *, top: int = 10) -> dict[str, Any]:
    """The slowest operators and delegate calls of the profiled executions.

    Returns {"executions_ms": {...}, "events": [...top...], "delegate_calls": [...],
    "etrecord": bool}; each event has name, delegated, backend, op_types, module,
    count, p50_ms, avg_ms, max_ms, share (of the median execution).
    """
    from executorch.devtools import Inspector

    # The Inspector prints progress and pandas chatter to stdout; the core never prints.
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            inspector = Inspector(
                etdump_path=str(etdump), etrecord=str(etrecord) if etrecord else None
            )
    except Exception as exc:  # the devtools raise bare exceptions on a bad file
        raise InputError(
            f"cannot read the profile {etdump.name}: {type(exc).__name__}: {exc}",
            "the ETDump and the ETRecord must come from the same build and runtime",
        ) from exc
    events: list[dict[str, Any]] = []
    execute_ms: list[float] = []
    for block in inspector.event_blocks:
        for event in block.events:
            perf = event.perf_data
            if perf is None or not perf.raw:
                continue
            if event.name == "Method::execute":
                execute_ms.extend(float(x) for x in perf.raw)
            if event.name in _FRAMING:
                continue
            events.append(
                {
                    "name": event.name,
                    "delegated": bool(event.is_delegated_op),
                    "backend": event.delegate_backend_name,
                    "op_types": list(dict.fromkeys(event.op_types or [])),
                    "module": _module_of(event),
                    "count": len(perf.raw),
                    "p50_ms": float(perf.p50),
                    "avg_ms": float(perf.avg),
                    "max_ms": float(perf.max),
                }
            )
    median_execute = sorted(execute_ms)[len(execute_ms) // 2] if execute_ms else None
    for item in events:
        item["share"] = (
            item["p50_ms"] / median_execute
            if median_execute and not math.isnan(item["p50_ms"])
            else None
        )
    ranked = sorted(events, key=lambda e: e["p50_ms"], reverse=True)
    return {
        "executions_ms": {"count": len(execute_ms), "median": median_execute},
        "events": ranked[:top],
        "delegate_calls": [e for e in ranked if e["name"] == "DELEGATE_CALL"][:top],
        "etrecord": etrecord is not None,
    }


def _module_of(event: Any) -> str | None:
    # module_hierarchy: {node: {key: (attribute path, class name)}}; the deepest
    # named attribute is the module a user would recognise (conv1, fc).
    hierarchy = getattr(event, "module_hierarchy", None) or {}
    names: list[str] = []
    for chain in hierarchy.values():
        for path, _cls in chain.values():
            if path and path not in names:
                names.append(path)
    return ", ".join(names) or None
