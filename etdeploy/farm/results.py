"""What the farm adds to a job's result: its attempts and its place in the farm.

A result is the typed RunResult (etdeploy.results.result) that the pipeline makes
(run_job for a job that ran, error_result for one that raised); the farm reads
it by attribute and adds the blocks below before it goes to the results log.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from etdeploy.errors import EtdeployError
from etdeploy.results.result import (
    Attempt,
    AttemptError,
    FarmPlacement,
    JobInfo,
    RunResult,
    Shard,
)

if TYPE_CHECKING:
    from etdeploy.farm.spec import FarmJob

Result = RunResult


def timestamp(when: float | None = None) -> str:
    """A time as results spell it: UTC, ISO 8601, to the second."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(when))


def result_key(result: RunResult) -> str | None:
    """The farm job key the result was recorded under (None outside a farm)."""
    return result.farm.key if result.farm is not None else None


def farm_seconds(result: RunResult) -> float:
    """Every attempt's time: what the job cost the farm, retries included."""
    if result.attempts:
        return sum(a.seconds for a in result.attempts)
    return result.seconds


def error_result(job: FarmJob, exc: EtdeployError, started: float, job_id: str | None) -> RunResult:
    """The result of an attempt that never produced one (a timeout, a crash)."""
    from etdeploy.pipeline import error_result as pipeline_error_result

    return pipeline_error_result(job.run_job(), job.device, exc, started, job_id)


def attempt_record(result: RunResult, attempt: int, started: float) -> Attempt:
    """One attempt as the final result's "attempts" lists it."""
    error = result.error
    return Attempt(
        attempt=attempt,
        job_id=result.job.id,
        status=result.status,
        started_at=timestamp(started),
        seconds=round(time.time() - started, 3),
        error=AttemptError(
            kind=error.kind,
            message=error.message,
            infrastructure=error.infrastructure,
            retryable=error.retryable,
            device=error.device,
        )
        if error is not None
        else None,
    )


def with_attempts(result: RunResult, attempts: Sequence[Attempt]) -> RunResult:
    return dataclasses.replace(result, attempts=tuple(attempts))


def annotate(result: RunResult, job: FarmJob, shard: tuple[int, int], spec_path: str) -> RunResult:
    """The farm's block (key, shard, spec), and the job's names where the result
    lacks them."""
    # An error result has no artifact block: the job block names what was to be
    # built, so reports (etdeploy.results.job_key) key it like a result that ran.
    block: JobInfo = result.job
    job_block = dataclasses.replace(
        block,
        backend=block.backend or job.backend,
        quantization=block.quantization if block.quantization is not None else job.quantize,
    )
    device = (
        result.device if result.device.name else dataclasses.replace(result.device, name=job.device)
    )
    return dataclasses.replace(
        result,
        job=job_block,
        device=device,
        farm=FarmPlacement(
            key=job.key, shard=Shard(index=shard[0], count=shard[1]), spec=spec_path
        ),
    )
