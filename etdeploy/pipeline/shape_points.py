"""--shapes points (pipeline/shapes.py runs them): a point as written, parsed from
the flag's text when the job is made, and resolved against the program's dynamic
dims (their exported ranges) before anything runs."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from etdeploy.errors import UsageError

if TYPE_CHECKING:
    from etdeploy.program import Program

_NAMED = ("min", "mid", "max")
_DIM = re.compile(r"^(?P<input>[^:=+]+):(?P<dim>\d+)=(?P<size>\d+)$")
_HINT = "points are min, mid, max, a size (8), or INPUT:DIM=SIZE (x:0=8), comma-separated"


@dataclass(frozen=True)
class PointSpec:
    """A point as written: a named one, a size for every dynamic dim, or sizes of
    named dims."""

    text: str
    named: str | None = None
    size: int | None = None
    dims: tuple[tuple[str, int, int], ...] = ()  # (input, dim, size)


@dataclass(frozen=True)
class DynamicDim:
    input: int
    name: str
    dim: int
    low: int
    high: int


@dataclass(frozen=True)
class Point:
    """A point resolved against the program: the size of each dynamic dim."""

    label: str
    sizes: tuple[tuple[DynamicDim, int], ...]


def parse_points(texts: Sequence[str]) -> tuple[PointSpec, ...]:
    """--shapes values (each may hold several points, comma-separated); a malformed
    one is a UsageError (exit 2)."""
    points: list[PointSpec] = []
    for text in (part.strip() for item in texts for part in item.split(",")):
        if not text:
            raise UsageError("--shapes has an empty point", _HINT)
        if text in _NAMED:
            points.append(PointSpec(text, named=text))
        elif text.isdigit():
            points.append(PointSpec(text, size=int(text)))
        else:
            dims = []
            for part in text.split("+"):
                match = _DIM.match(part.strip())
                if match is None:
                    raise UsageError(f"--shapes: cannot read the point {text!r}", _HINT)
                dims.append((match["input"], int(match["dim"]), int(match["size"])))
            points.append(PointSpec(text, dims=tuple(dims)))
    return tuple(points)


def dynamic_dims(program: Program) -> list[DynamicDim]:
    """Every dynamic dim of the method's inputs with its exported range."""
    found = []
    for index, value in enumerate(program.inputs):
        for dim, bounds in sorted(value.dynamic.items(), key=lambda item: int(item[0])):
            low, high = int(bounds[0]), int(bounds[1])
            found.append(DynamicDim(index, value.name, int(dim), low, high))
    return found


def resolve_points(specs: Sequence[PointSpec], program: Program) -> tuple[Point, ...]:
    """Each point as sizes of the program's dynamic dims. A point outside a dim's
    range, a dim that is not dynamic, or a program with none: UsageError (exit 2),
    before anything runs."""
    dims = dynamic_dims(program)
    if not dims:
        raise UsageError(
            f"--shapes: {program.pte.name} has no dynamic dims recorded (its {program.method} "
            "takes fixed shapes)",
            "build the model with dynamic dims (--dynamic x:0=1..16, or ModelSpec.dynamic), "
            "or drop --shapes",
        )
    ranges = ", ".join(f"{d.name}:{d.dim}={d.low}..{d.high}" for d in dims)
    points = []
    for spec in specs:
        sizes: dict[DynamicDim, int] = {}
        for d in dims:
            if spec.named is not None:
                sizes[d] = {"min": d.low, "mid": (d.low + d.high) // 2, "max": d.high}[spec.named]
            else:
                sizes[d] = spec.size if spec.size is not None else d.high
        for name, dim, size in spec.dims:
            wanted = next((d for d in dims if d.name == name and d.dim == dim), None)
            if wanted is None:
                raise UsageError(
                    f"--shapes {spec.text}: {name}:{dim} is not a dynamic dim of {program.pte.name}",
                    f"its dynamic dims are {ranges}",
                )
            sizes[wanted] = size
        for d, size in sizes.items():
            if not d.low <= size <= d.high:
                raise UsageError(
                    f"--shapes {spec.text}: {d.name}:{d.dim}={size} is outside the exported range "
                    f"{d.low}..{d.high}",
                    f"give points within {ranges} (min, mid and max name its ends and middle)",
                )
        points.append(Point(spec.text, tuple(sizes.items())))
    return tuple(points)
