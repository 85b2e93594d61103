"""What a .pte alone tells: its header, segments, weights, delegate blobs and method
signatures.

Read with sizecheck's torch-free reader (etdeploy.pte.reader), not executorch's own
deserialiser, which imports torch (about 5 s) and loads the whole file; so `etdeploy
inspect` starts fast and maps multi-GB programs without reading their weights.
"""

from __future__ import annotations

from pathlib import Path

from etdeploy.builder.lower import _scalar_name
from etdeploy.builder.manifest_records import JsonObject
from etdeploy.errors import UsageError
from etdeploy.pte.layout import MethodValue
from etdeploy.pte.reader import read_pte


def _value(v: MethodValue) -> str:
    if v.tensor is None:
        return v.kind
    # The reader names ScalarType members (FLOAT -> "float"); show torch's names (float32).
    return f"{_scalar_name(v.tensor.dtype.upper())}{list(v.tensor.sizes)}"


def describe_pte(path: Path) -> JsonObject:
    """A JSON-ready description of the .pte at `path`; UsageError (exit 2) if it is not one.

    Sizes are bytes. `named_data` and `delegate_blobs` are "none" when the program has none.
    """
    try:
        layout = read_pte(path)
    except UsageError as exc:
        # read_pte's own hint is sizecheck's (--any-file), an option inspect does not have.
        raise UsageError(
            exc.message,
            "give a program written by `etdeploy build` or ExecuTorch's to_executorch()",
        ) from None
    # Weights kept by a delegate (XNNPACK) live as named data, one segment per constant.
    named_segments = {n.segment_index for n in layout.named_data}
    named_bytes = sum(layout.segments[i].size for i in named_segments)
    delegates: dict[str, int] = {}
    seen: set[tuple[str, int]] = set()
    for d in layout.delegates:
        if (d.location, d.data_index) in seen:  # a blob shared by methods is stored once
            continue
        seen.add((d.location, d.data_index))
        delegates[d.backend_id] = delegates.get(d.backend_id, 0) + d.size
    return {
        "file_identifier": layout.file_identifier,
        "schema_version": layout.schema_version,
        "file_size": layout.file_size,
        "program_flatbuffer_bytes": layout.program_size,
        "segments": len(layout.segments),
        "constant_data_bytes": layout.constant_segment_size + layout.constant_buffer_bytes,
        "named_data": (
            {"entries": len(layout.named_data), "bytes": named_bytes}
            if layout.named_data
            else "none"
        ),
        "delegate_blobs": delegates or "none",
        "methods": {
            m.name: f"({', '.join(_value(v) for v in m.inputs)}) -> "
            f"({', '.join(_value(v) for v in m.outputs)})"
            for m in layout.methods
        },
        "planned_arena_bytes": {m.name: m.planned_arena_bytes for m in layout.methods},
    }
