"""What the farm reads from and writes into a job's result document.

A result is, for now, a dict of the etdeploy.result/1 document that
etdeploy.pipeline makes (run_job for a job that ran, error_result for one that
raised). Every question the farm and its CLI ask of one is a function here, so
this module is the one place to change when results become typed.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from etdeploy.errors import EtdeployError

if TYPE_CHECKING:
    from etdeploy.farm.spec import FarmJob

Result = dict[str, Any]

# The error fields an attempt record keeps: enough to tell why a retry happened.
_ATTEMPT_ERROR_FIELDS = ("kind", "message", "infrastructure", "retryable", "device")


def timestamp(when: float | None = None) -> str:
    """A time as results spell it: UTC, ISO 8601, to the second."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(when))


# -- questions ---------------------------------------------------------------------------


def result_key(result: Mapping[str, Any]) -> str | None:
    """The farm job key the result was recorded under (None outside a farm)."""
    farm = result.get("farm")
    return farm.get("key") if isinstance(farm, dict) else None


def status_of(result: Mapping[str, Any]) -> str | None:
    """passed, failed (a check failed) or error (the run raised)."""
    return result.get("status")


def _error(result: Mapping[str, Any]) -> Mapping[str, Any]:
    return result.get("error") or {}


def error_message(result: Mapping[str, Any]) -> str:
    return str(_error(result).get("message", ""))


def is_infrastructure_error(result: Mapping[str, Any]) -> bool:
    """An error of the device, transport or runner rather than of the job's input."""
    return bool(_error(result).get("infrastructure"))


def is_retryable(result: Mapping[str, Any]) -> bool:
    """Only an infrastructure error its transport marked retryable (a dropped
    connection, a device gone offline): a failed check would fail again."""
    return (
        status_of(result) == "error"
        and is_infrastructure_error(result)
        and bool(_error(result).get("retryable"))
    )


def attempts_of(result: Mapping[str, Any]) -> list[dict[str, Any]]:
    return result.get("attempts") or []


def median_ms(result: Mapping[str, Any]) -> float | None:
    return (result.get("latency_ms") or {}).get("median")


def farm_seconds(result: Mapping[str, Any]) -> float:
    """Every attempt's time: what the job cost the farm, retries included."""
    attempts = attempts_of(result)
    if attempts:
        return sum(a.get("seconds", 0) for a in attempts)
    return result.get("seconds", 0)


# -- records -----------------------------------------------------------------------------


def error_result(job: FarmJob, exc: EtdeployError, started: float, job_id: str | None) -> Result:
    """The result of an attempt that never produced one (a timeout, a crash)."""
    from etdeploy.pipeline import error_result as pipeline_error_result

    return pipeline_error_result(job.run_job(), job.device, exc, started, job_id)


def attempt_record(result: Mapping[str, Any], attempt: int, started: float) -> dict[str, Any]:
    """One attempt as the final result's "attempts" lists it."""
    record: dict[str, Any] = {
        "attempt": attempt,
        "job_id": (result.get("job") or {}).get("id"),
        "status": status_of(result),
        "started_at": timestamp(started),
        "seconds": round(time.time() - started, 3),
    }
    if result.get("error"):
        error = result["error"]
        record["error"] = {k: error.get(k) for k in _ATTEMPT_ERROR_FIELDS}
    return record


def set_attempts(result: Result, attempts: Sequence[Mapping[str, Any]]) -> None:
    result["attempts"] = list(attempts)


def annotate(result: Result, job: FarmJob, shard: tuple[int, int], spec_path: str) -> None:
    """The farm's block (key, shard, spec), and the job's names where the result
    lacks them."""
    # An error result has no artifact block: the job block names what was to be
    # built, so reports (etdeploy.report.job_key) key it like a result that ran.
    block = result.setdefault("job", {})
    block.setdefault("backend", job.backend)
    block.setdefault("quantization", job.quantize)
    result.setdefault("device", {}).setdefault("name", job.device)
    result["farm"] = {
        "key": job.key,
        "shard": {"index": shard[0], "count": shard[1]},
        "spec": spec_path,
    }
