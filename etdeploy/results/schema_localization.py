"""The `localization` block of the result schema (`run --localize`), as JSON
Schema fragments: what etdeploy.results.result_localization writes.

Added as optional properties of /1 (a reader of /1 ignores keys it does not
know): the block itself, each tap's own error (`local`) and what value it
shares (`same_as`), the origin, the amplifiers and the hint, and the reasons
values were left untapped.
"""

from __future__ import annotations

from etdeploy.results.result_localization import AMPLIFIER_CAUSES, TAP_STATUSES
from etdeploy.results.schema_parts import COUNT, METRIC, MS, OPT_STR, STR, nullable
from etdeploy.results.validator import Schema

LOCALIZATION_STATUSES = ["localized", "ill_conditioned", "clean", "not_localizable", "unexplained"]
OPERATOR_KINDS = ["elementwise", "function", "sum", "normalization", "quantized", "other"]

TAP_METRICS: Schema = {
    "type": "object",
    "required": ["max_abs", "rel", "ulps", "magnitude"],
    "properties": {
        "max_abs": METRIC,
        "rel": METRIC,
        "ulps": METRIC,
        "magnitude": METRIC,
        "sqnr_db": METRIC,
        "steps": METRIC,
    },
}

# The error an operator added itself, on the device's own inputs, against its bound.
OPERATOR_ERROR: Schema = {
    "type": "object",
    "required": ["max_abs", "rel", "ratio", "bound_rel", "kind", "n"],
    "properties": {
        "max_abs": METRIC,
        "rel": METRIC,
        # over 1: more than float32 (or its quantization grid) allows the operator
        "ratio": METRIC,
        "bound_rel": METRIC,
        "kind": {"enum": OPERATOR_KINDS},
        "n": {"type": "integer", "minimum": 1},
        "steps": METRIC,
        "sample": STR,
    },
}

_PLACE = {
    "op": STR,
    "node": STR,
    "module": OPT_STR,
    "source": OPT_STR,
    "code": OPT_STR,
    "partition": STR,
    "kernel": OPT_STR,
    "sample": STR,
}

TAP: Schema = {
    "type": "object",
    "required": ["index", "node", "op", "partition", "reducer", "metrics", "status"],
    "properties": {
        **_PLACE,
        "index": COUNT,
        "module_class": OPT_STR,
        "delegate": nullable("integer", minimum=0),
        "reducer": {"enum": ["full", "stats"]},
        "shape": {"type": "array", "items": {"type": "integer"}},
        "inputs": {"type": "array", "items": STR},
        "metrics": {"$ref": "#/$defs/tap_metrics"},
        "carried_in": METRIC,
        "growth": METRIC,
        "status": {"enum": list(TAP_STATUSES)},
        "context": {"type": "boolean"},
        "step": METRIC,
        "local": {"$ref": "#/$defs/operator_error"},
        "same_as": STR,
    },
}

ORIGIN: Schema = {
    "type": "object",
    "required": ["op", "node", "partition", "error", "over_bound", "contribution"],
    "properties": {
        **_PLACE,
        "error": {"$ref": "#/$defs/operator_error"},
        # false: no operator is over its bound; this one's rounding contributes most
        "over_bound": {"type": "boolean"},
        "contribution": METRIC,
    },
}

AMPLIFIER: Schema = {
    "type": "object",
    "required": ["op", "node", "factor", "cause"],
    "properties": {
        "op": STR,
        "node": STR,
        "module": OPT_STR,
        "source": OPT_STR,
        "sample": STR,
        "factor": METRIC,
        "cause": {"enum": list(AMPLIFIER_CAUSES)},
    },
}

LOCALIZATION: Schema = {
    "type": "object",
    "required": ["status", "reason", "reference", "samples", "attempts", "tolerance"],
    "properties": {
        "status": {"enum": LOCALIZATION_STATUSES},
        "reason": STR,
        "reference": STR,
        "samples": {"type": "array", "items": STR},
        "granularity": nullable("string"),
        "attempts": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["granularity", "taps", "reproduced", "note"],
                "properties": {
                    "granularity": STR,
                    "taps": COUNT,
                    "reproduced": nullable("boolean"),
                    "note": STR,
                },
            },
        },
        "tolerance": {"type": "object"},
        "taps": {"type": "array", "items": {"$ref": "#/$defs/tap"}},
        "first_divergence": {"type": ["object", "null"]},
        "program": {
            "type": "object",
            "properties": {
                "untapped": {"type": "array", "items": STR},
                "why_untapped": {"type": "object", "additionalProperties": STR},
            },
        },
        "module": STR,
        "seconds": MS,
        "origin": {"$ref": "#/$defs/origin"},
        "amplifiers": {"type": "array", "items": {"$ref": "#/$defs/amplifier"}},
        "hint": STR,
    },
}

DEFS: dict[str, Schema] = {
    "localization": LOCALIZATION,
    "tap": TAP,
    "tap_metrics": TAP_METRICS,
    "operator_error": OPERATOR_ERROR,
    "origin": ORIGIN,
    "amplifier": AMPLIFIER,
}
