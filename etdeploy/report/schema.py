"""The result document `etdeploy.result/1` and the farm document `etdeploy.farm/1`
as JSON Schema (draft 2020-12), their validation, and the farm document built
from typed results.

The schemas describe what RunResult.to_json writes (etdeploy.report.result).
Objects allow keys beyond the listed ones: a reader of /1 must accept additions,
and only a removal or a change of meaning makes /2. The validator is
etdeploy.report.validator (the part of the draft these schemas use).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from etdeploy.errors import UsageError
from etdeploy.report.common import JobKey, NotRun, job_key, unique
from etdeploy.report.record import JsonObject
from etdeploy.report.result import RESULT_SCHEMA_ID, RunResult
from etdeploy.report.validator import Invalid, Schema, check, show

FARM_SCHEMA_ID = "etdeploy.farm/1"

_TIMESTAMP = r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:?\d{2})?$"


def _nullable(type_name: str, **more: Any) -> Schema:
    return {"type": [type_name, "null"], **more}


_STR = {"type": "string"}
_OPT_STR = _nullable("string")
_COUNT = {"type": "integer", "minimum": 0}
_OPT_COUNT = _nullable("integer", minimum=0)
_MS = {"type": "number", "minimum": 0}
_OPT_MS = _nullable("number", minimum=0)
# verify.py writes a non-finite metric (an infinite SQNR of an exact match, a NaN
# output) as null, since JSON has no Infinity.
_METRIC = _nullable("number")

# `required` throughout is what RunResult.from_json needs (the fields of
# etdeploy.report.result without a default): a document that validates reads.
_OUTPUT_METRICS = {
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
        "output": _COUNT,
        "name": _STR,
        "sample": _STR,
        "shape": {"type": "array", "items": _COUNT},
        "max_abs": _METRIC,
        "max_rel": _METRIC,
        "mean_abs": _METRIC,
        "sqnr_db": _METRIC,
        "cosine": _METRIC,
        "allclose": {"type": "boolean"},
        "top1_agree": _nullable("boolean"),
        "top5_agree": _nullable("boolean"),
        "tightest_atol": _METRIC,
        # The error in steps of the output's quantization scale (a stage judged in steps).
        "steps": _METRIC,
    },
}

# One stage of the error budget (etdeploy.verify.judge_stage).
_BUDGET_STAGE = {
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
        "measured": _STR,
        "rule": {"enum": ["allclose", "steps", "accuracy"]},
        "limit": _STR,
        "passed": {"type": "boolean"},
        "reason": _STR,
        "max_abs": _METRIC,
        "sqnr_db": _METRIC,
        "cosine": _METRIC,
        "top1_agreement": _nullable("number", minimum=0, maximum=1),
        "steps": _METRIC,
        "worst": {"anyOf": [{"type": "null"}, {"$ref": "#/$defs/output_metrics"}]},
        "metrics": {"type": "array", "items": {"$ref": "#/$defs/output_metrics"}},
    },
}

_THRESHOLDS = {
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
        "max_abs": _nullable("number", minimum=0),
        "quant_steps": {"type": "number", "minimum": 0},
        "quant_rtol": {"type": "number", "minimum": 0},
    },
}

_VERDICT = {
    "type": "object",
    "required": ["passed", "reason", "metrics"],
    "properties": {
        "passed": {"type": "boolean"},
        "reason": _STR,
        "on_noise": {"type": "boolean"},
        "top1_agreement": _nullable("number", minimum=0, maximum=1),
        "worst": {"anyOf": [{"type": "null"}, {"$ref": "#/$defs/output_metrics"}]},
        "metrics": {"type": "array", "items": {"$ref": "#/$defs/output_metrics"}},
        # What `metrics` compare with: "float eager" or "reference file".
        "reference": _STR,
        # The error budget: every stage within its limit is a pass.
        "budget": {"type": "array", "items": _BUDGET_STAGE},
        "kinds": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["name", "kind", "declared"],
                "properties": {
                    "name": _STR,
                    "kind": {"enum": ["classifier", "regression", "embedding", "mask", "other"]},
                    "declared": {"type": "boolean"},
                },
            },
        },
        "thresholds": _THRESHOLDS,
    },
}

_SIZE_VERDICT = {
    "type": "object",
    "required": ["key", "label", "limit_bytes", "measured_bytes", "status"],
    "properties": {
        "key": _STR,
        "store": _STR,
        "label": _STR,
        "limit_bytes": _COUNT,
        "inclusive": {"type": "boolean"},
        "measure": {"enum": ["download", "raw"]},
        "severity": _STR,
        "measured_bytes": _COUNT,
        "headroom_bytes": {"type": "integer"},
        "excess_bytes": _COUNT,
        "status": {"enum": ["fits", "over", "warning"]},
        "text": _STR,
        "source": _STR,
        "read_on": _STR,
        "note": _OPT_STR,
        "uncertainty_bytes": _COUNT,
    },
}

_SIZE = {
    "description": "etdeploy.sizecheck.summary_for_result",
    "type": "object",
    "required": ["schema", "raw_bytes", "download_bytes", "verdicts", "passed"],
    "properties": {
        "schema": {"const": "etdeploy.size-summary/1"},
        "path": _STR,
        "raw_bytes": _COUNT,
        "download_bytes": _COUNT,
        "extra_bytes": _COUNT,
        "total_raw_bytes": _COUNT,
        "total_download_bytes": _COUNT,
        "estimate": _STR,
        "method": _STR,
        "error_bound": {"type": "number", "minimum": 0},
        "download_uncertainty_bytes": _COUNT,
        "cached": {"type": "boolean"},
        "store": _STR,
        "deliveries": {"type": "array", "items": _STR},
        "budget_bytes": _OPT_COUNT,
        "verdicts": {"type": "array", "items": {"$ref": "#/$defs/size_verdict"}},
        "passed": {"type": "boolean"},
        "config": _OPT_STR,
        "notes": {"type": "array", "items": _STR},
    },
}

_DELEGATION = {
    "type": "object",
    "required": ["delegated_nodes", "non_delegated_nodes", "share"],
    "properties": {
        "delegated_nodes": _COUNT,
        "non_delegated_nodes": _COUNT,
        "delegated_subgraphs": _COUNT,
        "share": {"type": "number", "minimum": 0, "maximum": 1},
        "by_op": {
            "type": "object",
            "additionalProperties": {
                "type": "object",
                "required": ["delegated", "non_delegated"],
                "properties": {"delegated": _COUNT, "non_delegated": _COUNT},
            },
        },
    },
}

_ERROR = {
    "type": "object",
    "required": ["kind", "message", "infrastructure"],
    "properties": {
        "kind": _STR,
        "message": _STR,
        "hint": _OPT_STR,
        "infrastructure": {"type": "boolean"},
        "retryable": {"type": "boolean"},
        "device": _OPT_STR,
        "command": _OPT_STR,
    },
}

_PROFILE_EVENT = {
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
        "name": _STR,
        "delegated": {"type": "boolean"},
        "backend": _OPT_STR,
        "op_types": {"type": "array", "items": _STR},
        "module": _OPT_STR,
        "count": _COUNT,
        # null: the ETDump had no usable time for the event (NaN).
        "p50_ms": _nullable("number", minimum=0),
        "avg_ms": _nullable("number", minimum=0),
        "max_ms": _nullable("number", minimum=0),
        "share": _nullable("number", minimum=0),
    },
}

_PROFILE = {
    "description": "run --profile: the slowest operators and delegate calls (etdeploy.profile)",
    "type": "object",
    "required": ["executions_ms", "events", "delegate_calls", "etrecord"],
    "properties": {
        "executions_ms": {
            "type": "object",
            "required": ["count", "median"],
            "properties": {"count": _COUNT, "median": _OPT_MS},
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
                    "name": _STR,
                    "backend": _OPT_STR,
                    "instances": _COUNT,
                    "p50_ms": _MS,
                    "share": _nullable("number", minimum=0),
                },
            },
        },
    },
}

_ATTEMPT = {
    "description": "one attempt of a farm job",
    "type": "object",
    "required": ["attempt", "job_id", "status", "started_at", "seconds"],
    "properties": {
        "attempt": {"type": "integer", "minimum": 1},
        "job_id": _OPT_STR,
        "status": _OPT_STR,
        "started_at": {"type": "string", "pattern": _TIMESTAMP},
        "seconds": _MS,
        "error": {
            "type": "object",
            "properties": {
                "kind": _OPT_STR,
                "message": _OPT_STR,
                "infrastructure": _nullable("boolean"),
                "retryable": _nullable("boolean"),
                "device": _OPT_STR,
            },
        },
        "backoff_s": _MS,
    },
}

_FARM_PLACEMENT = {
    "description": "where in a farm the result came from",
    "type": "object",
    "required": ["key", "shard", "spec"],
    "properties": {
        "key": _STR,
        "shard": {
            "type": "object",
            "required": ["index", "count"],
            "properties": {"index": _COUNT, "count": {"type": "integer", "minimum": 1}},
        },
        "spec": _STR,
    },
}

# The blocks a run that got as far as a verdict always has.
_RAN = ["artifact", "runner", "inputs", "deploy", "latency_ms", "memory", "verdict"]


def _when(condition: Schema, then: Schema, why: str) -> Schema:
    # `description` of the `if` is what the validator quotes when `then` fails.
    return {"if": {"description": why, **condition}, "then": then}


RESULT_SCHEMA: Schema = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$id": RESULT_SCHEMA_ID,
    "title": "etdeploy result: one job (model x backend x device)",
    "type": "object",
    "required": ["schema", "status", "exit_code", "job", "device", "started_at", "seconds"],
    "properties": {
        "schema": {"const": RESULT_SCHEMA_ID},
        "etdeploy": _STR,
        "status": {"enum": ["passed", "failed", "error"]},
        "exit_code": {"enum": [0, 1, 2, 3]},
        "job": {
            "type": "object",
            "required": ["id", "model"],
            "properties": {
                "id": _OPT_STR,
                "model": _OPT_STR,
                "method": _STR,
                "iterations": _COUNT,
                "warmup": _COUNT,
                "backend": _OPT_STR,
                "quantization": _OPT_STR,
            },
        },
        "device": {
            "type": "object",
            "required": ["name"],
            "properties": {
                "name": _STR,
                "transport": _STR,
                "serial": _OPT_STR,
                "os": _STR,
                "os_version": _OPT_STR,
                "abi": _STR,
                "model": _OPT_STR,
                "soc": _OPT_STR,
            },
        },
        "artifact": {
            "type": "object",
            "required": ["sha256", "size_bytes", "backend", "quantization"],
            "properties": {
                "pte": _STR,
                "sha256": {"type": "string", "pattern": "^[0-9a-f]{64}$"},
                "size_bytes": _COUNT,
                "backend": _OPT_STR,
                "quantization": _OPT_STR,
                "delegation": {"anyOf": [{"type": "null"}, {"$ref": "#/$defs/delegation"}]},
                "built_with": _nullable("object", additionalProperties=_OPT_STR),
            },
        },
        "runner": {
            "type": "object",
            "required": ["flavor"],
            "properties": {
                "flavor": _STR,
                "abi": _STR,
                # host | android-ndk | arm64-glibc | external: which build ran.
                "kind": _STR,
                "version": _OPT_STR,
                "path": _STR,
            },
        },
        "inputs": {
            "type": "object",
            "required": ["names", "samples"],
            "properties": {
                "names": {"type": "array", "items": _STR},
                "samples": {"type": "array", "items": _STR},
                "on_noise": {"type": "boolean"},
                "reference": _STR,
            },
        },
        "device_lock": {
            "description": "when the job held its device (seconds; epoch times)",
            "type": "object",
            "required": ["waited_s", "held_from", "held_to"],
            "properties": {
                "waited_s": _MS,
                "held_from": {"type": "number"},
                "held_to": {"type": "number"},
            },
        },
        "deploy": {
            "type": "object",
            "required": ["bytes_sent", "files_sent", "files_skipped", "seconds"],
            "properties": {
                "bytes_sent": _COUNT,
                "files_sent": _COUNT,
                "files_skipped": _COUNT,
                "seconds": _MS,
            },
        },
        "latency_ms": {
            "type": "object",
            "required": ["n", "iterations"],
            "properties": {
                "load": _OPT_MS,
                "n": _COUNT,
                "min": _MS,
                "median": _MS,
                "p90": _MS,
                "max": _MS,
                "trimmed_mean": _MS,
                "stdev": _MS,
                "iterations": {"type": "array", "items": _MS},
            },
        },
        "memory": {
            "type": "object",
            "properties": {"planned_bytes": _OPT_COUNT, "peak_rss_bytes": _OPT_COUNT},
        },
        "verdict": {"$ref": "#/$defs/verdict"},
        "host_check": _nullable(
            "object",
            required=["device_vs_host", "host_vs_reference"],
            properties={
                "device_vs_host": {"$ref": "#/$defs/verdict"},
                "host_vs_reference": {"$ref": "#/$defs/verdict"},
            },
        ),
        "size": {"anyOf": [{"type": "null"}, {"$ref": "#/$defs/size"}]},
        "etdump": _OPT_STR,
        "profile": {"$ref": "#/$defs/profile"},
        "warnings": {"type": "array", "items": _STR},
        "error": {"anyOf": [{"type": "null"}, {"$ref": "#/$defs/error"}]},
        "started_at": {"type": "string", "pattern": _TIMESTAMP},
        "seconds": _MS,
        "logs": {"type": "array", "items": _STR},
        "attempts": {"type": "array", "items": {"$ref": "#/$defs/attempt"}},
        "farm": _FARM_PLACEMENT,
    },
    # What the status promises: exit codes per design.md, the blocks a reader may
    # rely on, and errors that say whether the device or the input is at fault.
    "allOf": [
        _when(
            {"properties": {"status": {"const": "passed"}}},
            {
                "required": _RAN,
                "properties": {
                    "exit_code": {"const": 0},
                    "verdict": {"properties": {"passed": {"const": True}}},
                    "error": {"type": "null"},
                },
            },
            "status is passed",
        ),
        _when(
            {"properties": {"status": {"const": "failed"}}},
            {
                "required": _RAN,
                "properties": {"exit_code": {"const": 1}, "error": {"type": "null"}},
            },
            "status is failed",
        ),
        _when(
            {"properties": {"status": {"const": "error"}}},
            {
                "required": ["error"],
                "properties": {"exit_code": {"enum": [2, 3]}, "error": {"$ref": "#/$defs/error"}},
            },
            "status is error",
        ),
        _when(
            {
                "required": ["status"],
                "properties": {"status": {"const": "error"}, "exit_code": {"const": 3}},
            },
            {"properties": {"error": {"properties": {"infrastructure": {"const": True}}}}},
            "exit code 3 is a device, transport or runner failure",
        ),
        _when(
            {
                "required": ["status"],
                "properties": {"status": {"const": "error"}, "exit_code": {"const": 2}},
            },
            {"properties": {"error": {"properties": {"infrastructure": {"const": False}}}}},
            "exit code 2 is bad input",
        ),
    ],
    "$defs": {
        "output_metrics": _OUTPUT_METRICS,
        "verdict": _VERDICT,
        "size": _SIZE,
        "size_verdict": _SIZE_VERDICT,
        "delegation": _DELEGATION,
        "error": _ERROR,
        "profile": _PROFILE,
        "profile_event": _PROFILE_EVENT,
        "attempt": _ATTEMPT,
    },
}

_JOB_KEY = {
    "type": "object",
    "required": ["model", "backend", "quantization", "device"],
    "properties": {
        "model": _STR,
        "backend": _OPT_STR,
        "quantization": _OPT_STR,
        "device": _STR,
    },
}

# A planned job without a result (etdeploy.report.NotRun): its key and why.
_NOT_RUN = {
    "type": "object",
    "required": ["model", "backend", "quantization", "device", "reason"],
    "properties": {
        "model": _STR,
        "backend": _OPT_STR,
        "quantization": _OPT_STR,
        "device": _STR,
        "reason": _STR,
    },
}

FARM_SCHEMA: Schema = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$id": FARM_SCHEMA_ID,
    "title": "etdeploy farm: a matrix of jobs and their results",
    "type": "object",
    "required": ["schema", "started_at", "finished_at", "matrix", "results", "summary"],
    "properties": {
        "schema": {"const": FARM_SCHEMA_ID},
        "etdeploy": _STR,
        "started_at": {"type": "string", "pattern": _TIMESTAMP},
        # null while the farm is still running (a snapshot of a partial run).
        "finished_at": _nullable("string", pattern=_TIMESTAMP),
        "matrix": {"type": "array", "items": {"$ref": "#/$defs/job_key"}},
        "results": {"type": "array", "items": {"$ref": "#/$defs/result"}},
        # Added in 0.1 (a /1 reader ignores them): jobs of the matrix that cannot
        # run (skipped before they started, not in `matrix`), and planned jobs
        # with no result (a lost shard), each with the reason.
        "skipped": {"type": "array", "items": {"$ref": "#/$defs/not_run"}},
        "not_run": {"type": "array", "items": {"$ref": "#/$defs/not_run"}},
        "summary": {
            "type": "object",
            "required": ["passed", "failed", "errors", "infrastructure_errors"],
            "properties": {
                "total": _COUNT,
                "passed": _COUNT,
                "failed": _COUNT,
                # every status "error"; infrastructure_errors is the part of them
                # with error.infrastructure true (exit code 3).
                "errors": _COUNT,
                "infrastructure_errors": _COUNT,
            },
        },
    },
    "$defs": {
        "job_key": _JOB_KEY,
        "not_run": _NOT_RUN,
        "result": {k: v for k, v in RESULT_SCHEMA.items() if k not in ("$schema", "$id", "$defs")},
        **RESULT_SCHEMA["$defs"],
    },
}


def validate_result(doc: Any) -> None:
    """Raise UsageError naming the first bad key when `doc` is not a valid
    etdeploy.result/1 document."""
    _validate(doc, RESULT_SCHEMA, RESULT_SCHEMA_ID)


def validate_farm(doc: Any) -> None:
    """Raise UsageError naming the first bad key when `doc` is not a valid
    etdeploy.farm/1 document, including a summary that disagrees with its results."""
    _validate(doc, FARM_SCHEMA, FARM_SCHEMA_ID)
    expected = summarize([RunResult.from_json(result) for result in doc["results"]])
    for key in ("passed", "failed", "errors", "infrastructure_errors", "total"):
        if key in doc["summary"] and doc["summary"][key] != expected[key]:
            raise UsageError(
                f"not a valid {FARM_SCHEMA_ID} document: summary.{key}: is "
                f"{doc['summary'][key]}, but the results count {expected[key]}",
                "regenerate the summary with etdeploy.report.summarize(results)",
            )


def _validate(doc: Any, schema: Schema, schema_id: str) -> None:
    if isinstance(doc, dict) and isinstance(doc.get("schema"), str) and doc["schema"] != schema_id:
        raise UsageError(
            f"not a {schema_id} document: schema is {show(doc['schema'])}",
            f"this etdeploy reads {schema_id}; a newer etdeploy may have written it",
        )
    try:
        check(doc, schema)
    except Invalid as exc:
        raise UsageError(
            f"not a valid {schema_id} document: {exc}",
            "results are written by `etdeploy run --json` and `etdeploy farm`; "
            "a hand-edited or truncated file fails here",
        ) from None


# -- the farm document --------------------------------------------------------------------


def summarize(results: Sequence[RunResult]) -> dict[str, int]:
    """Counts by status. `errors` counts every status "error"; `infrastructure_errors`
    is the part of them that a device, transport or runner caused (exit code 3)."""
    summary = {
        "total": len(results),
        "passed": 0,
        "failed": 0,
        "errors": 0,
        "infrastructure_errors": 0,
    }
    for result in results:
        if result.status == "passed":
            summary["passed"] += 1
        elif result.status == "failed":
            summary["failed"] += 1
        else:
            summary["errors"] += 1
            if result.is_infrastructure:
                summary["infrastructure_errors"] += 1
    return summary


def farm_document(
    results: Sequence[RunResult],
    *,
    started_at: str,
    finished_at: str | None,
    matrix: Sequence[JobKey | Mapping[str, str | None]] | None = None,
    not_run: Sequence[NotRun] = (),
) -> JsonObject:
    """The etdeploy.farm/1 document of `results`, as written to farm.json.

    `matrix` is the planned jobs (JobKey, or mappings with model, backend,
    quantization and device); by default the keys of `results`. `not_run`: the
    jobs without a result, listed under "skipped" (cannot run, not planned) or
    "not_run" (planned, never reported)."""
    import etdeploy

    if matrix is None:
        matrix = unique(job_key(r) for r in results)
    planned = [m.to_json() if isinstance(m, JobKey) else dict(m) for m in matrix]
    return {
        "schema": FARM_SCHEMA_ID,
        "etdeploy": etdeploy.__version__,
        "started_at": started_at,
        "finished_at": finished_at,
        "matrix": planned,
        "results": [r.to_json() for r in results],
        "skipped": [n.to_json() for n in not_run if n.skipped],
        "not_run": [n.to_json() for n in not_run if not n.skipped],
        "summary": summarize(results),
    }
