"""torch.export, with the common failures turned into a short message that names
the user's line and the usual fix."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

from etdeploy.errors import ModelError, UsageError
from etdeploy.model.loader import find_user_line
from etdeploy.model.spec import ModelSpec

if TYPE_CHECKING:  # imported where torch is
    from torch.export import ExportedProgram

# (pattern in the exception text or type, what it means, the usual fix)
_KNOWN_FAILURES: list[tuple[str, str, str]] = [
    (
        r"data.dependent|GuardOnDataDependentSymNode|Could not guard on data-dependent",
        "control flow depends on a tensor's value",
        "replace the Python `if` on tensor data with torch.where, or hoist the branch "
        "into __init__; a loop whose length depends on the input becomes a masked "
        "fixed-length loop",
    ),
    (
        r"Constraints violated|ConstraintViolation|specialized|guard.*(dim|size)|Dim\(",
        "a shape guard: the model constrains a dimension marked dynamic",
        "narrow the --dynamic range to what the model allows, or make that dimension static",
    ),
    (
        r"Unsupported|not supported|has no attribute|NotImplementedError|Cannot export",
        "an operation torch.export cannot capture",
        "move Python-side work (prints, numpy, .item(), list building) out of forward, "
        "or replace the op with a supported one",
    ),
]


def export_model(spec: ModelSpec, source_files: tuple[Path, ...]) -> ExportedProgram:
    """Return a torch.export.ExportedProgram for the spec (a .pt2 passes through)."""
    import torch

    if isinstance(spec.module, torch.export.ExportedProgram):
        if spec.dynamic:
            raise UsageError(
                "--dynamic cannot change a saved .pt2: its shapes were fixed when it was exported",
                "export it again with dynamic_shapes, or load the model from its factory",
            )
        return spec.module
    dynamic_shapes = dynamic_shapes_for(spec)
    try:
        return torch.export.export(spec.module, spec.example_inputs, dynamic_shapes=dynamic_shapes)
    except Exception as exc:
        raise explain_export_failure(exc, source_files) from exc


def dynamic_shapes_for(spec: ModelSpec) -> tuple[dict[int, object] | None, ...] | None:
    from torch.export import Dim

    if not spec.dynamic:
        return None
    names = spec.input_names or []
    unknown = [n for n in spec.dynamic if n not in names]
    if unknown:
        raise UsageError(
            f"--dynamic names input {unknown[0]!r}, which the model does not have",
            f"inputs are: {', '.join(names)}",
        )
    shapes: list[dict[int, object] | None] = []
    for index, name in enumerate(names):
        dims = spec.dynamic.get(name)
        if not dims:
            shapes.append(None)
            continue
        rank = spec.example_inputs[index].dim()
        per_input: dict[int, object] = {}
        for dim, (low, high) in dims.items():
            if not 0 <= dim < rank:
                raise UsageError(
                    f"--dynamic {name}:{dim}: input {name!r} has {rank} dimension(s)",
                    f"use a dimension index from 0 to {rank - 1}",
                )
            size = spec.example_inputs[index].shape[dim]
            if not low <= size <= high:
                raise UsageError(
                    f"--dynamic {name}:{dim}={low}..{high} excludes the example input's size {size}",
                    "widen the range or change the example input",
                )
            per_input[dim] = Dim(f"{name}_d{dim}", min=low, max=high)
        shapes.append(per_input)
    return tuple(shapes)


def explain_export_failure(exc: BaseException, source_files: tuple[Path, ...]) -> ModelError:
    text = f"{type(exc).__name__}: {exc}"
    where = _user_line(exc, source_files)
    for pattern, meaning, fix in _KNOWN_FAILURES:
        if re.search(pattern, text, re.IGNORECASE):
            return ModelError(f"torch.export failed: {meaning}{where}", fix, log=text)
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return ModelError(
        f"torch.export failed{where}: {first[:200]}",
        "--verbose shows the full trace",
        log=text,
    )


def _user_line(exc: BaseException, source_files: tuple[Path, ...]) -> str:
    """' at file.py:12 `code`' for the user's line the failure points at."""
    where = find_user_line(exc, source_files)
    if where is None:
        return ""
    return f" at {where.file}:{where.line}" + (f" `{where.code}`" if where.code else "")
