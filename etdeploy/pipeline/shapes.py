"""--shapes: a dynamic program run at points of its range, besides the samples' own
shapes, each judged for parity and measured for memory.

ExecuTorch plans a dynamic program's memory for the upper bound of each dynamic
dim, and a kernel can be right at the bound and wrong below it (upstream's
executor_runner took `--input_shapes` for exactly that); so a point is run as a
run of its own: load, first execution, steady state, every sample.

A point (`--shapes min,mid,max`, `--shapes 1,8,16`):
  - `min`, `mid`, `max`: every dynamic dim at its lower bound, its middle, its
    upper bound (as exported: the manifest's ranges);
  - `N`: every dynamic dim at N;
  - `INPUT:DIM=N` (several joined by `+`): those dims at those sizes, the other
    dynamic dims at their upper bound.
At a point every sample is cut to its first N entries along each dynamic dim, or
repeated cyclically up to N: the real values, never noise. The reference is the
eager model at those shapes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from etdeploy.errors import UsageError
from etdeploy.pipeline.shape_points import Point, parse_points, resolve_points
from etdeploy.results.result_shapes import ShapePoint

if TYPE_CHECKING:
    import numpy as np

    from etdeploy.devices.base import ProgressCallback
    from etdeploy.pipeline.deploy import Target
    from etdeploy.pipeline.execute import ExecuteSettings
    from etdeploy.pipeline.job import StatusCallback
    from etdeploy.pipeline.verify import VerifySettings
    from etdeploy.program import Program
    from etdeploy.results.result_shapes import ShapePoint
    from etdeploy.staged import Staged


@dataclass(frozen=True)
class ShapesRequest:
    """What --shapes takes: its points, MODEL (the eager reference at each point), and
    how each point is run and judged, as the run's own samples are."""

    points: tuple[str, ...]
    model: str | None
    use_cache: bool
    execute: ExecuteSettings
    verify: VerifySettings


def check_points(points: tuple[str, ...], program: Program) -> tuple[Point, ...]:
    """--shapes' points against the built program (exit 2 before anything runs)."""
    return resolve_points(parse_points(points), program) if points else ()


def samples_at(
    point: Point, samples: Sequence[tuple[np.ndarray, ...]]
) -> tuple[tuple[np.ndarray, ...], ...]:
    """Every sample at the point: cut, or repeated cyclically, along each dynamic dim."""
    import numpy as np

    out = []
    for sample in samples:
        arrays = list(sample)
        for d, size in point.sizes:
            array = arrays[d.input]
            have = array.shape[d.dim]
            if have == 0:
                raise UsageError(
                    f"--shapes {point.label}: a sample's {d.name} is empty along dim {d.dim}, "
                    "so it cannot be repeated",
                    "give samples with at least one entry along each dynamic dim",
                )
            arrays[d.input] = np.ascontiguousarray(
                np.take(array, np.arange(size) % have, axis=d.dim)
            )
        out.append(tuple(arrays))
    return tuple(out)


def stage_at(point: Point, request: ShapesRequest, program: Program, staged: Staged) -> Staged:
    """The staged samples at the point, with the eager (and quantized eager)
    references at those shapes."""
    from etdeploy.pipeline.references import eager_reference, quantized_reference
    from etdeploy.pipeline.stage import _table
    from etdeploy.staged import Staged

    assert request.model is not None  # RunJob refuses --shapes without MODEL
    arrays = samples_at(point, staged.samples)
    references, _ = eager_reference(request.model, list(arrays), use_cache=request.use_cache)
    quantized = None
    if program.quantized_program is not None:
        quantized = _table(
            quantized_reference(
                program.quantized_program, list(arrays), use_cache=request.use_cache
            )
        )
    return Staged(
        sample_names=staged.sample_names,
        samples=arrays,
        references=_table(references),
        reference_kind="eager",
        on_noise=staged.on_noise,
        quantized=quantized,
    )


def run_points(
    request: ShapesRequest,
    target: Target,
    program: Program,
    staged: Staged,
    *,
    job_id: str,
    local_dir: Path,
    say: StatusCallback,
    progress: ProgressCallback | None = None,
) -> tuple[ShapePoint, ...]:
    """Each point as a run of its own on the device (inputs pushed, runner and program
    already there), judged and measured. Called with the device locked."""
    from etdeploy.pipeline.deploy import deploy
    from etdeploy.pipeline.execute import execute, latency_of, memory_of
    from etdeploy.pipeline.verify import judge

    found = []
    for index, point in enumerate(check_points(request.points, program)):
        say(f"running at shapes {point.label}")
        at = stage_at(point, request, program, staged)
        deployed = deploy(target, program, at, job_id, progress)
        here = local_dir / f"shapes{index}"
        here.mkdir(parents=True, exist_ok=True)
        executed = execute(target, deployed, program, at, request.execute, here)
        verdict = judge(request.verify, program, at, executed.outputs).verdict
        worst = verdict.worst
        found.append(
            ShapePoint(
                point=point.label,
                shapes=tuple(tuple(int(d) for d in a.shape) for a in at.samples[0]),
                passed=verdict.passed,
                reason=verdict.reason,
                samples=len(at.samples),
                worst_max_abs=worst.max_abs if worst is not None else None,
                worst_sqnr_db=worst.sqnr_db if worst is not None else None,
                latency_median_ms=latency_of(executed.load_ms, executed.iterations_ms).median,
                load_ms=executed.load_ms,
                memory=memory_of(program, executed),
            )
        )
    return tuple(found)
