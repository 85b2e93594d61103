"""What a .pte alone tells, read with ExecuTorch's own deserialiser.

(This imports torch through executorch.exir. The torch-free reader for
sizecheck lives in etdeploy/sizecheck/.)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from etdeploy.errors import UsageError


def describe_pte(path: Path) -> dict[str, Any]:
    from executorch.exir._serialize._program import _flatbuffer_to_program, _get_extended_header
    from executorch.exir.schema import Tensor

    from etdeploy.build.lower import _scalar_name

    data = path.read_bytes()
    identifier = data[4:8].decode("ascii", "replace") if len(data) >= 8 else ""
    if not identifier.startswith("ET"):
        raise UsageError(
            f"{path} is not an ExecuTorch program (file identifier {identifier!r}, expected 'ET..')",
            "give a .pte written by to_executorch()",
        )
    header = _get_extended_header(data)
    program_size = header.program_size if header else len(data)
    if header and header.segment_base_offset + header.segment_data_size > len(data):
        raise UsageError(
            f"{path} is truncated: segments end at byte {header.segment_base_offset + header.segment_data_size}, "
            f"the file has {len(data)}",
            "rebuild it, or copy it again",
        )
    try:
        program = _flatbuffer_to_program(data[:program_size])
    except Exception as exc:
        raise UsageError(f"{path} does not parse as an ExecuTorch program: {exc}", "rebuild it") from exc

    def value(plan: Any, index: int) -> str:
        v = plan.values[index].val
        if isinstance(v, Tensor):
            return f"{_scalar_name(v.scalar_type)}{list(v.sizes)}"
        return type(v).__name__

    delegates: dict[str, int] = {}
    for plan in program.execution_plan:
        for d in plan.delegates:
            if d.processed.location.name == "SEGMENT":
                size = program.segments[d.processed.index].size
            else:
                size = len(program.backend_delegate_data[d.processed.index].data)
            delegates[d.id] = delegates.get(d.id, 0) + size
    constant_bytes = 0
    if program.constant_segment.offsets:
        constant_bytes = program.segments[program.constant_segment.segment_index].size
    constant_bytes += sum(len(b.storage) for b in program.constant_buffer)
    # XNNPACK and others keep weights as named data in their own segments.
    named = getattr(program, "named_data", None) or []
    named_bytes = sum(program.segments[n.segment_index].size for n in named)
    return {
        "file_identifier": identifier,
        "schema_version": program.version,
        "file_size": len(data),
        "program_flatbuffer_bytes": program_size,
        "segments": len(program.segments),
        "constant_data_bytes": constant_bytes,
        "named_data": f"{len(named)} entries, {named_bytes} bytes" if named else "none",
        "delegate_blobs": delegates or "none",
        "methods": {
            plan.name: f"({', '.join(value(plan, i) for i in plan.inputs)}) -> "
            f"({', '.join(value(plan, i) for i in plan.outputs)})"
            for plan in program.execution_plan
        },
    }
