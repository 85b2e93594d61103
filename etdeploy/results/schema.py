"""The result document `etdeploy.result/2` (and /1, still read) and the farm document `etdeploy.farm/1`
as JSON Schema (draft 2020-12), and their validation.

The blocks they are made of are in schema_parts.py; the farm document itself is
built in farm_json.py. The schemas describe what RunResult.to_json writes
(etdeploy.results.result).
Objects allow keys beyond the listed ones: a reader of /1 must accept additions,
and only a removal or a change of meaning makes /2. The validator is
etdeploy.results.validator (the part of the draft these schemas use).
"""

from __future__ import annotations

from etdeploy.errors import UsageError
from etdeploy.jsonvalue import as_object, read_array, read_object
from etdeploy.results.jobs import summarize
from etdeploy.results.result import READ_SCHEMA_IDS, RESULT_SCHEMA_ID, RunResult
from etdeploy.results.schema_lm import LANGUAGE_MODEL
from etdeploy.results.schema_localization import DEFS as LOCALIZATION_DEFS
from etdeploy.results.schema_memory import MEMORY, MEMORY_DEFS, SHAPE_POINT, check_account
from etdeploy.results.schema_parts import (
    ACCURACY,
    ATTEMPT,
    COUNT,
    DELEGATION,
    ERROR,
    FARM_PLACEMENT,
    MS,
    OPT_MS,
    OPT_STR,
    OUTPUT_METRICS,
    PROFILE,
    PROFILE_EVENT,
    RAN,
    SIZE,
    SIZE_VERDICT,
    STR,
    THROUGHPUT,
    TIMESTAMP,
    VERDICT,
    nullable,
    when,
)
from etdeploy.results.validator import Invalid, Schema, check, show

FARM_SCHEMA_ID = "etdeploy.farm/1"

# The blocks a result refers to ($ref), which a farm document's results refer to too.
_RESULT_DEFS: dict[str, Schema] = {
    "output_metrics": OUTPUT_METRICS,
    "verdict": VERDICT,
    "size": SIZE,
    "size_verdict": SIZE_VERDICT,
    "delegation": DELEGATION,
    "error": ERROR,
    "profile": PROFILE,
    "profile_event": PROFILE_EVENT,
    "attempt": ATTEMPT,
    **MEMORY_DEFS,
    **LOCALIZATION_DEFS,
}

RESULT_SCHEMA: Schema = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$id": RESULT_SCHEMA_ID,
    "title": "etdeploy result: one job (model x backend x device)",
    "type": "object",
    "required": ["schema", "status", "exit_code", "job", "device", "started_at", "seconds"],
    "properties": {
        "schema": {"enum": list(READ_SCHEMA_IDS)},
        "etdeploy": STR,
        "status": {"enum": ["passed", "failed", "error"]},
        "exit_code": {"enum": [0, 1, 2, 3]},
        "job": {
            "type": "object",
            "required": ["id", "model"],
            "properties": {
                "id": OPT_STR,
                "model": OPT_STR,
                "method": STR,
                "iterations": COUNT,
                "warmup": COUNT,
                "backend": OPT_STR,
                "quantization": OPT_STR,
            },
        },
        "device": {
            "type": "object",
            "required": ["name"],
            "properties": {
                "name": STR,
                "transport": STR,
                "serial": OPT_STR,
                "os": STR,
                "os_version": OPT_STR,
                "abi": STR,
                "model": OPT_STR,
                "soc": OPT_STR,
            },
        },
        "artifact": {
            "type": "object",
            "required": ["sha256", "size_bytes", "backend", "quantization"],
            "properties": {
                "pte": STR,
                "sha256": {"type": "string", "pattern": "^[0-9a-f]{64}$"},
                "size_bytes": COUNT,
                "backend": OPT_STR,
                "quantization": OPT_STR,
                "delegation": {"anyOf": [{"type": "null"}, {"$ref": "#/$defs/delegation"}]},
                "built_with": nullable("object", additionalProperties=OPT_STR),
            },
        },
        "runner": {
            "type": "object",
            "required": ["flavor"],
            "properties": {
                "flavor": STR,
                "abi": STR,
                # host | android-ndk | arm64-glibc | external: which build ran.
                "kind": STR,
                "version": OPT_STR,
                "path": STR,
            },
        },
        "inputs": {
            "type": "object",
            "required": ["names", "samples"],
            "properties": {
                "names": {"type": "array", "items": STR},
                "samples": {"type": "array", "items": STR},
                "on_noise": {"type": "boolean"},
                "reference": STR,
            },
        },
        "device_lock": {
            "description": "when the job held its device (seconds; epoch times)",
            "type": "object",
            "required": ["waited_s", "held_from", "held_to"],
            "properties": {
                "waited_s": MS,
                "held_from": {"type": "number"},
                "held_to": {"type": "number"},
            },
        },
        "deploy": {
            "type": "object",
            "required": ["bytes_sent", "files_sent", "files_skipped", "seconds"],
            "properties": {
                "bytes_sent": COUNT,
                "files_sent": COUNT,
                "files_skipped": COUNT,
                "seconds": MS,
            },
        },
        "latency_ms": {
            "type": "object",
            "required": ["n", "iterations"],
            "properties": {
                "load": OPT_MS,
                "n": COUNT,
                "min": MS,
                "median": MS,
                "p90": MS,
                "max": MS,
                "trimmed_mean": MS,
                "stdev": MS,
                "iterations": {"type": "array", "items": MS},
                # Added in result/2 without a bump (a reader ignores them): the
                # process's CPU time per timed iteration, and its median.
                "cpu_median": MS,
                "cpu_iterations": {"type": "array", "items": MS},
            },
        },
        "throughput": THROUGHPUT,
        "accuracy": ACCURACY,
        # A causal language model (etdeploy.pipeline.llm): its tokens against eager.
        "language_model": LANGUAGE_MODEL,
        "memory": MEMORY,
        # run --shapes: the program at points of its dynamic range.
        "shapes": {"type": "array", "items": SHAPE_POINT},
        "verdict": {"$ref": "#/$defs/verdict"},
        "host_check": nullable(
            "object",
            required=["device_vs_host", "host_vs_reference"],
            properties={
                "device_vs_host": {"$ref": "#/$defs/verdict"},
                "host_vs_reference": {"$ref": "#/$defs/verdict"},
            },
        ),
        "size": {"anyOf": [{"type": "null"}, {"$ref": "#/$defs/size"}]},
        "etdump": OPT_STR,
        "profile": {"$ref": "#/$defs/profile"},
        "warnings": {"type": "array", "items": STR},
        "error": {"anyOf": [{"type": "null"}, {"$ref": "#/$defs/error"}]},
        "started_at": {"type": "string", "pattern": TIMESTAMP},
        "seconds": MS,
        "logs": {"type": "array", "items": STR},
        "attempts": {"type": "array", "items": {"$ref": "#/$defs/attempt"}},
        "farm": FARM_PLACEMENT,
        # run --localize (optional): where the device departs from eager, and why.
        "localization": {"$ref": "#/$defs/localization"},
    },
    # What the status promises: exit codes per design.md, the blocks a reader may
    # rely on, and errors that say whether the device or the input is at fault.
    "allOf": [
        when(
            {"properties": {"status": {"const": "passed"}}},
            {
                "required": RAN,
                "properties": {
                    "exit_code": {"const": 0},
                    "verdict": {"properties": {"passed": {"const": True}}},
                    "error": {"type": "null"},
                },
            },
            "status is passed",
        ),
        when(
            {"properties": {"status": {"const": "failed"}}},
            {
                "required": RAN,
                "properties": {"exit_code": {"const": 1}, "error": {"type": "null"}},
            },
            "status is failed",
        ),
        when(
            {"properties": {"status": {"const": "error"}}},
            {
                "required": ["error"],
                "properties": {"exit_code": {"enum": [2, 3]}, "error": {"$ref": "#/$defs/error"}},
            },
            "status is error",
        ),
        when(
            {
                "required": ["status"],
                "properties": {"status": {"const": "error"}, "exit_code": {"const": 3}},
            },
            {"properties": {"error": {"properties": {"infrastructure": {"const": True}}}}},
            "exit code 3 is a device, transport or runner failure",
        ),
        when(
            {
                "required": ["status"],
                "properties": {"status": {"const": "error"}, "exit_code": {"const": 2}},
            },
            {"properties": {"error": {"properties": {"infrastructure": {"const": False}}}}},
            "exit code 2 is bad input",
        ),
    ],
    "$defs": _RESULT_DEFS,
}

_JOB_KEY = {
    "type": "object",
    "required": ["model", "backend", "quantization", "device"],
    "properties": {
        "model": STR,
        "backend": OPT_STR,
        "quantization": OPT_STR,
        "device": STR,
    },
}

# A planned job without a result (etdeploy.results.NotRun): its key and why.
_NOT_RUN = {
    "type": "object",
    "required": ["model", "backend", "quantization", "device", "reason"],
    "properties": {
        "model": STR,
        "backend": OPT_STR,
        "quantization": OPT_STR,
        "device": STR,
        "reason": STR,
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
        "etdeploy": STR,
        "started_at": {"type": "string", "pattern": TIMESTAMP},
        # null while the farm is still running (a snapshot of a partial run).
        "finished_at": nullable("string", pattern=TIMESTAMP),
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
                "total": COUNT,
                "passed": COUNT,
                "failed": COUNT,
                # every status "error"; infrastructure_errors is the part of them
                # with error.infrastructure true (exit code 3).
                "errors": COUNT,
                "infrastructure_errors": COUNT,
            },
        },
    },
    "$defs": {
        "job_key": _JOB_KEY,
        "not_run": _NOT_RUN,
        "result": {k: v for k, v in RESULT_SCHEMA.items() if k not in ("$schema", "$id", "$defs")},
        **_RESULT_DEFS,
    },
}


def validate_result(doc: object) -> None:
    """Raise UsageError naming the first bad key when `doc` is not a valid
    etdeploy.result/2 (or /1) document."""
    _validate(doc, RESULT_SCHEMA, RESULT_SCHEMA_ID)
    check_account(doc, RESULT_SCHEMA_ID)


def validate_farm(doc: object) -> None:
    """Raise UsageError naming the first bad key when `doc` is not a valid
    etdeploy.farm/1 document, including a summary that disagrees with its results."""
    _validate(doc, FARM_SCHEMA, FARM_SCHEMA_ID)
    farm = as_object(doc)  # the schema holds the shapes read below
    results = [as_object(result) for result in read_array(farm, "results")]
    for result in results:
        check_account(result, FARM_SCHEMA_ID)
    expected = summarize([RunResult.from_json(result) for result in results])
    summary = read_object(farm, "summary")
    for key in ("passed", "failed", "errors", "infrastructure_errors", "total"):
        if key in summary and summary[key] != expected[key]:
            raise UsageError(
                f"not a valid {FARM_SCHEMA_ID} document: summary.{key}: is "
                f"{summary[key]}, but the results count {expected[key]}",
                "regenerate the summary with etdeploy.results.summarize(results)",
            )


def _validate(doc: object, schema: Schema, schema_id: str) -> None:
    readable = READ_SCHEMA_IDS if schema_id == RESULT_SCHEMA_ID else (schema_id,)
    if (
        isinstance(doc, dict)
        and isinstance(doc.get("schema"), str)
        and doc["schema"] not in readable
    ):
        raise UsageError(
            f"not a {schema_id} document: schema is {show(doc['schema'])}",
            f"this etdeploy reads {', '.join(readable)}; a newer etdeploy may have written it",
        )
    try:
        check(doc, schema)
    except Invalid as exc:
        raise UsageError(
            f"not a valid {schema_id} document: {exc}",
            "results are written by `etdeploy run --json` and `etdeploy farm`; "
            "a hand-edited or truncated file fails here",
        ) from None
