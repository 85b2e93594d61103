"""The memory block of a result and its --shapes points, as JSON Schema fragments
(etdeploy.results.schema). What etdeploy.results.result_memory and result_shapes write.

The account's fields are optional additions to etdeploy.result/1 (a /1 reader
ignores them); the parts of a phase sum to its peak, which `check_account` checks
(JSON Schema cannot add).
"""

from __future__ import annotations

from etdeploy.errors import UsageError
from etdeploy.results.result_memory import PART_LABELS, PHASE_LABELS
from etdeploy.results.schema_parts import COUNT, METRIC, OPT_COUNT, OPT_MS, OPT_STR, STR
from etdeploy.results.validator import Schema

MEMORY_PHASE: Schema = {
    "type": "object",
    "required": ["phase", "peak_bytes", "parts"],
    "properties": {
        "phase": {"enum": list(PHASE_LABELS)},
        "peak_bytes": COUNT,
        "parts": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["part", "bytes"],
                "properties": {
                    "part": {"enum": list(PART_LABELS)},
                    # The unexplained remainder is negative when the parts overstate.
                    "bytes": {"type": "integer"},
                },
            },
        },
        # "phase": the kernel's peak counter was reset at the phase's start.
        "peak_scope": {"enum": ["phase", "process"]},
        "rss_bytes": COUNT,
        "pss_bytes": COUNT,
        "program_pss_bytes": COUNT,
    },
}

MEMORY_LIMIT: Schema = {
    "type": "object",
    "required": ["limit_bytes", "source", "peak_bytes", "passed", "message"],
    "properties": {
        "limit_bytes": COUNT,
        "source": STR,
        "peak_bytes": OPT_COUNT,
        "passed": {"type": "boolean"},
        "message": STR,
        "phase": {"enum": list(PHASE_LABELS)},
    },
}

MEMORY: Schema = {
    "type": "object",
    "properties": {
        "planned_bytes": OPT_COUNT,
        "peak_rss_bytes": OPT_COUNT,
        "peak_bytes": COUNT,
        "phases": {"type": "array", "items": {"$ref": "#/$defs/memory_phase"}},
        "planned_buffers": {"type": "array", "items": COUNT},
        "measured_by": STR,
        "heap_source": OPT_STR,
        "limit": {"$ref": "#/$defs/memory_limit"},
    },
}

SHAPE_POINT: Schema = {
    "type": "object",
    "required": ["point", "shapes", "passed", "reason", "samples"],
    "properties": {
        "point": STR,
        "shapes": {"type": "array", "items": {"type": "array", "items": COUNT}},
        "passed": {"type": "boolean"},
        "reason": STR,
        "samples": COUNT,
        "worst_max_abs": METRIC,
        "worst_sqnr_db": METRIC,
        "latency_median_ms": OPT_MS,
        "load_ms": OPT_MS,
        "memory": MEMORY,
    },
}

MEMORY_DEFS: dict[str, Schema] = {
    "memory_phase": MEMORY_PHASE,
    "memory_limit": MEMORY_LIMIT,
}


def check_account(doc: object, schema_id: str) -> None:
    """Each phase's parts sum to its peak, in the run's account and each shape point's.
    Run after the schema check: `doc`'s blocks have their schema's shape here."""
    if not isinstance(doc, dict):
        return
    blocks = [("memory", doc.get("memory"))]
    blocks += [
        (f"shapes[{i}].memory", point.get("memory"))
        for i, point in enumerate(doc.get("shapes") or [])
        if isinstance(point, dict)
    ]
    for where, memory in blocks:
        phases = memory.get("phases") if isinstance(memory, dict) else None
        for i, phase in enumerate(phases or []):
            total = sum(part["bytes"] for part in phase["parts"])
            if total != phase["peak_bytes"]:
                raise UsageError(
                    f"not a valid {schema_id} document: {where}.phases[{i}]: its parts sum to "
                    f"{total}, not its peak_bytes {phase['peak_bytes']}",
                    "the unexplained part is the peak minus the others; regenerate the result",
                )
