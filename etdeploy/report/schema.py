"""The result document `etdeploy.result/1` and the farm document `etdeploy.farm/1`
as JSON Schema (draft 2020-12), and a validator for the part of the draft they use.

The schemas describe what etdeploy.pipeline.run_job and error_result write.
Objects allow keys beyond the listed ones: a reader of /1 must accept additions,
and only a removal or a change of meaning makes /2.

The validator covers exactly the keywords below (type, const, enum, required,
properties, additionalProperties, items, minItems, minimum, maximum, pattern,
$ref into $defs, allOf, anyOf, if/then/else); `jsonschema` is not a dependency.
It stops at the first problem and names its key path (`verdict.metrics[3].sqnr_db`).
"""

from __future__ import annotations

import json
import re
from typing import Any

from etdeploy.errors import UsageError

RESULT_SCHEMA_ID = "etdeploy.result/1"
FARM_SCHEMA_ID = "etdeploy.farm/1"

_TIMESTAMP = r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:?\d{2})?$"


def _nullable(type_name: str, **more: Any) -> dict[str, Any]:
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

_OUTPUT_METRICS = {
    "type": "object",
    "required": ["output", "name", "sample", "max_abs", "sqnr_db", "allclose"],
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

# The blocks a run that got as far as a verdict always has.
_RAN = ["artifact", "runner", "inputs", "deploy", "latency_ms", "memory", "verdict"]


def _when(condition: dict[str, Any], then: dict[str, Any], why: str) -> dict[str, Any]:
    # `description` of the `if` is what the validator quotes when `then` fails.
    return {"if": {"description": why, **condition}, "then": then}


RESULT_SCHEMA: dict[str, Any] = {
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
            "properties": {"flavor": _STR, "abi": _STR, "version": _OPT_STR, "path": _STR},
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
        "deploy": {
            "type": "object",
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
            properties={
                "device_vs_host": {"$ref": "#/$defs/verdict"},
                "host_vs_reference": {"$ref": "#/$defs/verdict"},
            },
        ),
        "size": {"anyOf": [{"type": "null"}, {"$ref": "#/$defs/size"}]},
        "etdump": _OPT_STR,
        "warnings": {"type": "array", "items": _STR},
        "error": {"anyOf": [{"type": "null"}, {"$ref": "#/$defs/error"}]},
        "started_at": {"type": "string", "pattern": _TIMESTAMP},
        "seconds": _MS,
        "logs": {"type": "array", "items": _STR},
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

FARM_SCHEMA: dict[str, Any] = {
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
        "result": {k: v for k, v in RESULT_SCHEMA.items() if k not in ("$schema", "$id", "$defs")},
        **RESULT_SCHEMA["$defs"],
    },
}


# -- the validator --------------------------------------------------------------------


class _Invalid(Exception):
    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"{path or '(top level)'}: {problem}")
        self.path = path
        self.problem = problem


_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,),
    "array": (list, tuple),
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "null": (type(None),),
}


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    for name in ("object", "array", "string", "integer", "number"):
        if isinstance(value, _JSON_TYPES[name]):
            return name
    return type(value).__name__


def _is_type(value: Any, name: str) -> bool:
    # bool is an int in Python but never a number in JSON.
    if isinstance(value, bool):
        return name == "boolean"
    return isinstance(value, _JSON_TYPES[name])


def _show(value: Any) -> str:
    # Values as JSON spells them (true, null), short enough for one line.
    text = json.dumps(value, default=str)
    return text if len(text) <= 60 else text[:57] + "..."


def _child(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


def _check(value: Any, schema: dict[str, Any], path: str, root: dict[str, Any]) -> None:
    if "$ref" in schema:
        ref = schema["$ref"]
        if not ref.startswith("#/$defs/"):
            raise ValueError(f"unsupported $ref {ref}")
        _check(value, root["$defs"][ref.removeprefix("#/$defs/")], path, root)
    if "type" in schema:
        names = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        if not any(_is_type(value, n) for n in names):
            raise _Invalid(path, f"expected {' or '.join(names)}, got {_type_name(value)}")
    if "const" in schema and not _same(value, schema["const"]):
        raise _Invalid(path, f"must be {_show(schema['const'])}, got {_show(value)}")
    if "enum" in schema and not any(_same(value, option) for option in schema["enum"]):
        options = ", ".join(_show(o) for o in schema["enum"])
        raise _Invalid(path, f"must be one of {options}, got {_show(value)}")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            raise _Invalid(path, f"must be >= {schema['minimum']}, got {_show(value)}")
        if "maximum" in schema and value > schema["maximum"]:
            raise _Invalid(path, f"must be <= {schema['maximum']}, got {_show(value)}")
    if isinstance(value, str) and "pattern" in schema and not re.search(schema["pattern"], value):
        raise _Invalid(path, f"{_show(value)} does not match {schema['pattern']}")
    if isinstance(value, dict):
        _check_object(value, schema, path, root)
    if isinstance(value, (list, tuple)):
        if len(value) < schema.get("minItems", 0):
            raise _Invalid(path, f"needs at least {schema['minItems']} item(s)")
        if "items" in schema:
            for i, item in enumerate(value):
                _check(item, schema["items"], _child(path, i), root)
    for sub in schema.get("allOf", ()):
        _check(value, sub, path, root)
    if "anyOf" in schema:
        problems = []
        for sub in schema["anyOf"]:
            try:
                _check(value, sub, path, root)
                break
            except _Invalid as exc:
                problems.append(exc)
        else:
            # The deepest problem is the most specific one to show.
            raise max(reversed(problems), key=lambda e: len(e.path))
    if "if" in schema and _matches(value, schema["if"], path, root):
        if "then" in schema:
            try:
                _check(value, schema["then"], path, root)
            except _Invalid as exc:
                why = schema["if"].get("description")
                raise _Invalid(exc.path, f"{exc.problem} ({why})" if why else exc.problem) from None
    elif "if" in schema and "else" in schema:
        _check(value, schema["else"], path, root)


def _check_object(
    value: dict[str, Any], schema: dict[str, Any], path: str, root: dict[str, Any]
) -> None:
    for key in schema.get("required", ()):
        if key not in value:
            raise _Invalid(_child(path, key), "is missing")
    properties = schema.get("properties", {})
    for key, sub in properties.items():
        if key in value:
            _check(value[key], sub, _child(path, key), root)
    extra = schema.get("additionalProperties", True)
    if extra is not True:
        for key in value:
            if key in properties:
                continue
            if extra is False:
                raise _Invalid(_child(path, key), "is not allowed here")
            _check(value[key], extra, _child(path, str(key)), root)


def _matches(value: Any, schema: dict[str, Any], path: str, root: dict[str, Any]) -> bool:
    try:
        _check(value, schema, path, root)
    except _Invalid:
        return False
    return True


def _same(a: Any, b: Any) -> bool:
    # JSON equality: true is not 1.
    return type(a) is type(b) and a == b if isinstance(a, bool) or isinstance(b, bool) else a == b


def check(doc: Any, schema: dict[str, Any]) -> None:
    """Raise _Invalid at the first problem of `doc` under `schema`."""
    _check(doc, schema, "", schema)


def validate_result(doc: Any) -> None:
    """Raise UsageError naming the first bad key when `doc` is not a valid
    etdeploy.result/1 document."""
    _validate(doc, RESULT_SCHEMA, RESULT_SCHEMA_ID)


def validate_farm(doc: Any) -> None:
    """Raise UsageError naming the first bad key when `doc` is not a valid
    etdeploy.farm/1 document, including a summary that disagrees with its results."""
    _validate(doc, FARM_SCHEMA, FARM_SCHEMA_ID)
    expected = summarize(doc["results"])
    for key in ("passed", "failed", "errors", "infrastructure_errors", "total"):
        if key in doc["summary"] and doc["summary"][key] != expected[key]:
            raise UsageError(
                f"not a valid {FARM_SCHEMA_ID} document: summary.{key}: is "
                f"{doc['summary'][key]}, but the results count {expected[key]}",
                "regenerate the summary with etdeploy.report.summarize(results)",
            )


def _validate(doc: Any, schema: dict[str, Any], schema_id: str) -> None:
    if isinstance(doc, dict) and isinstance(doc.get("schema"), str) and doc["schema"] != schema_id:
        raise UsageError(
            f"not a {schema_id} document: schema is {_show(doc['schema'])}",
            f"this etdeploy reads {schema_id}; a newer etdeploy may have written it",
        )
    try:
        check(doc, schema)
    except _Invalid as exc:
        raise UsageError(
            f"not a valid {schema_id} document: {exc}",
            "results are written by `etdeploy run --json` and `etdeploy farm`; "
            "a hand-edited or truncated file fails here",
        ) from None


def summarize(results: list[dict[str, Any]]) -> dict[str, int]:
    """Counts by status. `errors` counts every status "error"; `infrastructure_errors`
    is the part of them that a device, transport or runner caused (exit code 3)."""
    from etdeploy.report.common import is_infrastructure

    summary = {
        "total": len(results),
        "passed": 0,
        "failed": 0,
        "errors": 0,
        "infrastructure_errors": 0,
    }
    for result in results:
        status = result.get("status")
        if status == "passed":
            summary["passed"] += 1
        elif status == "failed":
            summary["failed"] += 1
        else:
            summary["errors"] += 1
            if is_infrastructure(result):
                summary["infrastructure_errors"] += 1
    return summary


def farm_document(
    results: list[dict[str, Any]],
    *,
    started_at: str,
    finished_at: str | None,
    matrix: list[Any] | None = None,
) -> dict[str, Any]:
    """An etdeploy.farm/1 document. `matrix` is the planned jobs (JobKey or dicts
    with model, backend, quantization, device); by default the keys of `results`."""
    import etdeploy
    from etdeploy.report.common import JobKey, job_key, unique

    if matrix is None:
        matrix = unique(job_key(r) for r in results)
    planned = [m.to_json() if isinstance(m, JobKey) else dict(m) for m in matrix]
    return {
        "schema": FARM_SCHEMA_ID,
        "etdeploy": etdeploy.__version__,
        "started_at": started_at,
        "finished_at": finished_at,
        "matrix": planned,
        "results": list(results),
        "summary": summarize(results),
    }
