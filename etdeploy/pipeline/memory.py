"""The memory stage of a run: the runner's readings turned into the account
(etdeploy.memory.account), the limit applied (etdeploy.memory.limit), and the
--shapes points' verdicts folded into the run's status.
"""

from __future__ import annotations

from dataclasses import replace

from etdeploy.errors import EXIT_CHECK_FAILED
from etdeploy.memory.account import account
from etdeploy.memory.limit import MaxMemory, judge_limit
from etdeploy.pipeline.execute import Executed
from etdeploy.pipeline.job import RunJob
from etdeploy.program import Program
from etdeploy.results.result import RunResult
from etdeploy.results.result_memory import Memory
from etdeploy.results.result_shapes import ShapePoint


def memory_of(program: Program, executed: Executed) -> Memory:
    """The memory block of one runner call: the manifest's planned arena, the
    runner's peak RSS and, from our runner, the account per phase."""
    reading = executed.memory
    phases = account(reading) if reading is not None else ()
    return Memory(
        planned_bytes=program.planned_bytes,
        peak_rss_bytes=executed.peak_rss_bytes,
        peak_bytes=max((p.peak_bytes for p in phases), default=None),
        phases=phases if reading is not None else None,
        planned_buffers=reading.planned_buffers if reading is not None else None,
        measured_by=reading.source if reading is not None else None,
        heap_source=reading.heap_source if reading is not None else None,
    )


def with_memory(
    result: RunResult, memory: Memory, points: tuple[ShapePoint, ...], job: RunJob
) -> RunResult:
    """`result` with its memory account, the limit judged on it and on every shape
    point, and the points; a passing run that passes the limit or fails at a point
    fails (exit 1)."""
    warnings = result.warnings
    if job.max_memory_bytes is not None:
        limit = MaxMemory(job.max_memory_bytes, job.max_memory_source or "--max-memory")
        accounts = [("", memory)] + [
            (f"at shapes {p.point}", p.memory) for p in points if p.memory is not None
        ]
        judged = judge_limit(limit, accounts)
        memory = replace(memory, limit=judged)
        if judged.peak_bytes is None:
            warnings = (*warnings, f"{limit.source} was not checked: {judged.message}")
    failed = (memory.limit is not None and not memory.limit.passed) or any(
        not p.passed for p in points
    )
    status, code = result.status, result.exit_code
    if failed and status == "passed":
        status, code = "failed", EXIT_CHECK_FAILED
    return replace(
        result, memory=memory, shapes=points or None, status=status, exit_code=code,
        warnings=warnings,
    )  # fmt: skip
