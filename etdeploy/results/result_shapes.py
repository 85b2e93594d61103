"""`run --shapes`: a dynamic program at points of its range, each judged for parity
and measured for memory. Importable from etdeploy.results.result."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from etdeploy.results.record import Record, omitted_if_none
from etdeploy.results.result_memory import Memory
from etdeploy.units import format_bytes


@dataclass(frozen=True)
class ShapePoint(Record):
    """The run at one point: every sample cut or repeated to the point's sizes along
    its dynamic dims, compared with the eager model at those shapes."""

    point: str  # as asked: "min", "mid", "max", "8", "x:0=3"
    shapes: tuple[tuple[int, ...], ...]  # each input's shape at the point
    passed: bool
    reason: str
    samples: int
    worst_max_abs: float | None = None
    worst_sqnr_db: float | None = None
    latency_median_ms: float | None = None
    load_ms: float | None = None
    memory: Memory | None = omitted_if_none()

    @property
    def peak_bytes(self) -> int | None:
        return self.memory.peak_bytes if self.memory is not None else None

    @property
    def shape_text(self) -> str:
        return " ".join(f"[{', '.join(map(str, shape))}]" for shape in self.shapes)


def smallest_point_cost(points: Sequence[ShapePoint]) -> str | None:
    """What the smallest point costs against the largest: ExecuTorch plans memory for
    the upper bound, so a small input pays for the largest one's buffers."""
    measured = [p for p in points if p.peak_bytes is not None]
    if len(measured) < 2:
        return None
    small, large = min(measured, key=_elements), max(measured, key=_elements)
    if small is large:
        return None
    assert small.peak_bytes is not None and large.peak_bytes is not None
    planned = small.memory.buffers if small.memory is not None else ()
    plan = (
        f"; its planned buffers are {format_bytes(sum(planned))} at every point" if planned else ""
    )
    return (
        f"at {small.point} ({small.shape_text}) the peak is {format_bytes(small.peak_bytes)}, "
        f"{small.peak_bytes / large.peak_bytes:.0%} of {format_bytes(large.peak_bytes)} at "
        f"{large.point} ({large.shape_text}): ExecuTorch plans memory for the upper bound{plan}"
    )


def _elements(point: ShapePoint) -> int:
    return sum(_numel(shape) for shape in point.shapes)


def _numel(shape: tuple[int, ...]) -> int:
    count = 1
    for dim in shape:
        count *= dim
    return count
