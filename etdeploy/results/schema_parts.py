"""The blocks the result and farm schemas (etdeploy.results.schema) are made of:
a metric, a verdict, a stage of the error budget, a size verdict, an error...
each a JSON Schema fragment."""

from __future__ import annotations

from etdeploy.results.validator import Schema

TIMESTAMP = r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:?\d{2})?$"


def nullable(type_name: str, **more: object) -> Schema:
    return {"type": [type_name, "null"], **more}


STR = {"type": "string"}
OPT_STR = nullable("string")
COUNT = {"type": "integer", "minimum": 0}
OPT_COUNT = nullable("integer", minimum=0)
MS = {"type": "number", "minimum": 0}
OPT_MS = nullable("number", minimum=0)
# numerics.py writes a non-finite metric (an infinite SQNR of an exact match, a NaN
# output) as null, since JSON has no Infinity.
METRIC = nullable("number")

# `required` throughout is what RunResult.from_json needs (the fields of
# etdeploy.results.result without a default): a document that validates reads.
OUTPUT_METRICS = {
    "type": "object",
    "required": [
        "output",
        "name",
        "sample",
        "shape",
        "max_abs",
        "max_rel",
        "mean_abs",
        "sqnr_db",
        "cosine",
        "allclose",
    ],
    "properties": {
        "output": COUNT,
        "name": STR,
        "sample": STR,
        "shape": {"type": "array", "items": COUNT},
        "max_abs": METRIC,
        "max_rel": METRIC,
        "mean_abs": METRIC,
        "sqnr_db": METRIC,
        "cosine": METRIC,
        "allclose": {"type": "boolean"},
        "top1_agree": nullable("boolean"),
        "top5_agree": nullable("boolean"),
        "tightest_atol": METRIC,
        # The error in steps of the output's quantization scale (a stage judged in steps).
        "steps": METRIC,
    },
}

# One stage of the error budget (etdeploy.numerics.judge_stage).
BUDGET_STAGE = {
    "type": "object",
    "required": [
        "stage",
        "measured",
        "rule",
        "limit",
        "passed",
        "reason",
        "max_abs",
        "sqnr_db",
        "cosine",
    ],
    "properties": {
        "stage": {"enum": ["quantization", "lowering", "device"]},
        "measured": STR,
        "rule": {"enum": ["allclose", "steps", "accuracy"]},
        "limit": STR,
        "passed": {"type": "boolean"},
        "reason": STR,
        "max_abs": METRIC,
        "sqnr_db": METRIC,
        "cosine": METRIC,
        "top1_agreement": nullable("number", minimum=0, maximum=1),
        "steps": METRIC,
        "worst": {"anyOf": [{"type": "null"}, {"$ref": "#/$defs/output_metrics"}]},
        "metrics": {"type": "array", "items": {"$ref": "#/$defs/output_metrics"}},
    },
}

THRESHOLDS = {
    "type": "object",
    "required": [
        "atol",
        "rtol",
        "min_sqnr_db",
        "min_top1",
        "min_cosine",
        "max_abs",
        "quant_steps",
        "quant_rtol",
    ],
    "properties": {
        "atol": {"type": "number", "minimum": 0},
        "rtol": {"type": "number", "minimum": 0},
        "min_sqnr_db": {"type": "number"},
        "min_top1": {"type": "number", "minimum": 0, "maximum": 1},
        "min_cosine": {"type": "number", "minimum": 0, "maximum": 1},
        "max_abs": nullable("number", minimum=0),
        "quant_steps": {"type": "number", "minimum": 0},
        "quant_rtol": {"type": "number", "minimum": 0},
    },
}

VERDICT = {
    "type": "object",
    "required": ["passed", "reason", "metrics"],
    "properties": {
        "passed": {"type": "boolean"},
        "reason": STR,
        "on_noise": {"type": "boolean"},
        "top1_agreement": nullable("number", minimum=0, maximum=1),
        "worst": {"anyOf": [{"type": "null"}, {"$ref": "#/$defs/output_metrics"}]},
        "metrics": {"type": "array", "items": {"$ref": "#/$defs/output_metrics"}},
        # What `metrics` compare with: "float eager" or "reference file".
        "reference": STR,
        # The error budget: every stage within its limit is a pass.
        "budget": {"type": "array", "items": BUDGET_STAGE},
        "kinds": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["name", "kind", "declared"],
                "properties": {
                    "name": STR,
                    "kind": {"enum": ["classifier", "regression", "embedding", "mask", "other"]},
                    "declared": {"type": "boolean"},
                },
            },
        },
        "thresholds": THRESHOLDS,
        # Where the quantized eager program came from (a quantized program only).
        "quantized_reference": STR,
    },
}

SIZE_VERDICT = {
    "type": "object",
    "required": ["key", "label", "limit_bytes", "measured_bytes", "status"],
    "properties": {
        "key": STR,
        "store": STR,
        "label": STR,
        "limit_bytes": COUNT,
        "inclusive": {"type": "boolean"},
        "measure": {"enum": ["download", "raw"]},
        "severity": STR,
        "measured_bytes": COUNT,
        "headroom_bytes": {"type": "integer"},
        "excess_bytes": COUNT,
        "status": {"enum": ["fits", "over", "warning"]},
        "text": STR,
        "source": STR,
        "read_on": STR,
        "note": OPT_STR,
        "uncertainty_bytes": COUNT,
    },
}

SIZE = {
    "description": "etdeploy.sizecheck.summary_for_result",
    "type": "object",
    "required": ["schema", "raw_bytes", "download_bytes", "verdicts", "passed"],
    "properties": {
        "schema": {"const": "etdeploy.size-summary/1"},
        "path": STR,
        "raw_bytes": COUNT,
        "download_bytes": COUNT,
        "extra_bytes": COUNT,
        "total_raw_bytes": COUNT,
        "total_download_bytes": COUNT,
        "estimate": STR,
        "method": STR,
        "error_bound": {"type": "number", "minimum": 0},
        "download_uncertainty_bytes": COUNT,
        "cached": {"type": "boolean"},
        "store": STR,
        "deliveries": {"type": "array", "items": STR},
        "budget_bytes": OPT_COUNT,
        "verdicts": {"type": "array", "items": {"$ref": "#/$defs/size_verdict"}},
        "passed": {"type": "boolean"},
        "config": OPT_STR,
        "notes": {"type": "array", "items": STR},
    },
}

DELEGATION = {
    "type": "object",
    "required": ["delegated_nodes", "non_delegated_nodes", "share"],
    "properties": {
        "delegated_nodes": COUNT,
        "non_delegated_nodes": COUNT,
        "delegated_subgraphs": COUNT,
        "share": {"type": "number", "minimum": 0, "maximum": 1},
        "by_op": {
            "type": "object",
            "additionalProperties": {
                "type": "object",
                "required": ["delegated", "non_delegated"],
                "properties": {"delegated": COUNT, "non_delegated": COUNT},
            },
        },
    },
}

ERROR = {
    "type": "object",
    "required": ["kind", "message", "infrastructure"],
    "properties": {
        "kind": STR,
        "message": STR,
        "hint": OPT_STR,
        "infrastructure": {"type": "boolean"},
        "retryable": {"type": "boolean"},
        "device": OPT_STR,
        "command": OPT_STR,
    },
}

PROFILE_EVENT = {
    "type": "object",
    "required": [
        "name",
        "delegated",
        "backend",
        "op_types",
        "module",
        "count",
        "p50_ms",
        "avg_ms",
        "max_ms",
    ],
    "properties": {
        "name": STR,
        "delegated": {"type": "boolean"},
        "backend": OPT_STR,
        "op_types": {"type": "array", "items": STR},
        "module": OPT_STR,
        "count": COUNT,
        # null: the ETDump had no usable time for the event (NaN).
        "p50_ms": nullable("number", minimum=0),
        "avg_ms": nullable("number", minimum=0),
        "max_ms": nullable("number", minimum=0),
        "share": nullable("number", minimum=0),
    },
}

PROFILE = {
    "description": "run --profile: the slowest operators and delegate calls (etdeploy.profile)",
    "type": "object",
    "required": ["executions_ms", "events", "delegate_calls", "etrecord"],
    "properties": {
        "executions_ms": {
            "type": "object",
            "required": ["count", "median"],
            "properties": {"count": COUNT, "median": OPT_MS},
        },
        "events": {"type": "array", "items": {"$ref": "#/$defs/profile_event"}},
        "delegate_calls": {"type": "array", "items": {"$ref": "#/$defs/profile_event"}},
        "etrecord": {"type": "boolean"},
        # Time per operator kind over one execution; absent from results written
        # before it existed.
        "operators": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["name", "backend", "instances", "p50_ms"],
                "properties": {
                    "name": STR,
                    "backend": OPT_STR,
                    "instances": COUNT,
                    "p50_ms": MS,
                    "share": nullable("number", minimum=0),
                },
            },
        },
    },
}

ATTEMPT = {
    "description": "one attempt of a farm job",
    "type": "object",
    "required": ["attempt", "job_id", "status", "started_at", "seconds"],
    "properties": {
        "attempt": {"type": "integer", "minimum": 1},
        "job_id": OPT_STR,
        "status": OPT_STR,
        "started_at": {"type": "string", "pattern": TIMESTAMP},
        "seconds": MS,
        "error": {
            "type": "object",
            "properties": {
                "kind": OPT_STR,
                "message": OPT_STR,
                "infrastructure": nullable("boolean"),
                "retryable": nullable("boolean"),
                "device": OPT_STR,
            },
        },
        "backoff_s": MS,
    },
}

FARM_PLACEMENT = {
    "description": "where in a farm the result came from",
    "type": "object",
    "required": ["key", "shard", "spec"],
    "properties": {
        "key": STR,
        "shard": {
            "type": "object",
            "required": ["index", "count"],
            "properties": {"index": COUNT, "count": {"type": "integer", "minimum": 1}},
        },
        "spec": STR,
    },
}

# The blocks a run that got as far as a verdict always has.
RAN = ["artifact", "runner", "inputs", "deploy", "latency_ms", "memory", "verdict"]


def when(condition: Schema, then: Schema, why: str) -> Schema:
    # `description` of the `if` is what the validator quotes when `then` fails.
    return {"if": {"description": why, **condition}, "then": then}


# The task-accuracy block (etdeploy.results.result_accuracy): a metric may be null where
# it is not finite; a fraction for classification, an error in the target's units else.
_PAIRED: Schema = {
    "type": "object",
    "required": ["metric", "program", "reference", "difference", "ci_low", "ci_high"],
    "properties": {
        "metric": STR, "program": STR, "reference": STR,
        "difference": nullable("number"), "ci_low": nullable("number"),
        "ci_high": nullable("number"), "p_value": nullable("number", minimum=0, maximum=1),
        "reference_only": COUNT, "program_only": COUNT, "method": STR,
    },
}  # fmt: skip
ACCURACY: Schema = {
    "type": "object",
    "required": ["task", "output", "samples", "labels", "scores", "device_vs_eager", "passed"],
    "properties": {
        "task": {"enum": ["classification", "regression"]},
        "output": STR,
        "samples": COUNT,
        "labels": STR,
        "scores": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["metric", "eager", "device"],
                "properties": {
                    "metric": STR, "eager": nullable("number"), "device": nullable("number"),
                    "quantized": nullable("number"),
                },
            },
        },
        "device_vs_eager": _PAIRED,
        "quantized_vs_eager": _PAIRED,
        "disagreements": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["sample", "label", "eager", "device"],
                "properties": {"sample": STR, "label": STR, "eager": STR, "device": STR,
                               "margin": nullable("number"), "input": STR},
            },
        },
        "disagreeing": COUNT,
        "min_accuracy": nullable("number", minimum=0, maximum=1),
        "max_drop": nullable("number", minimum=0, maximum=1),
        "passed": {"type": "boolean"},
        "reason": STR,
    },
}  # fmt: skip
THROUGHPUT: Schema = {
    "type": "object",
    "required": ["samples", "samples_per_s", "p50_ms", "p90_ms"],
    "properties": {
        "samples": COUNT, "samples_per_s": nullable("number", minimum=0),
        "p50_ms": MS, "p90_ms": MS,
    },
}  # fmt: skip
