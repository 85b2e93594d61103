"""A torch-free reader of an ExecuTorch .pte file's layout.

Importing executorch.exir imports torch (about 5 s here); this module reads the same
file with the `flatbuffers` package and readers flatc generated from the schemas the
executorch 1.5.1 wheel ships (see _generated/__init__.py). It maps the file but never
loads weights into memory, so multi-GB programs read in milliseconds.

File layout, as executorch/exir/_serialize/_program.py (1.5.1, read 2026-12-02) writes it:

    [0:4)    uint32 LE offset of the flatbuffer root table
    [4:8)    file identifier, "ET12" for this schema (regex ET[0-9a-zA-Z]{2})
    [8:...)  optional extended header: "eh00", uint32 header length, uint64 program size
             (flatbuffer incl. this header), uint64 segment base offset, and, when the
             length is over 24, uint64 segment data size; padded to the schema's largest
             force_align
    ...      the rest of the Program flatbuffer, up to program size
    ...      zero padding up to segment base offset (aligned to 128 by default)
    ...      segments; DataSegment.offset is relative to the segment base offset

Without an extended header the whole file is the flatbuffer (no segments).
"""

from __future__ import annotations

import mmap
import os
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import flatbuffers

from etdeploy.errors import UsageError
from etdeploy.files import check_readable_file
from etdeploy.pte._generated import program_generated as fb
from etdeploy.pte._generated.scalar_type_generated import ScalarType
from etdeploy.pte.layout import (
    SCALAR_TYPE_BYTES,
    ConstantTensor,
    DelegateConstant,
    DelegateInfo,
    ExtendedHeader,
    MethodInfo,
    MethodSignature,
    MethodValue,
    NamedDataEntry,
    PteLayout,
    Segment,
    TensorMeta,
)
from etdeploy.pte.xnnpack import XNN_DTYPE_BYTES, xnnpack_constants

# From _program.py's _ExtendedHeader (executorch 1.5.1, read 2026-12-02).
EXTENDED_HEADER_MAGIC = b"eh00"
EXTENDED_HEADER_MIN_LENGTH = 24  # magic, length, program size, segment base offset
EXTENDED_HEADER_FULL_LENGTH = 32  # ... plus segment data size

_SCALAR_TYPE_NAMES: dict[int, str] = {
    v: k.lower() for k, v in vars(ScalarType).items() if not k.startswith("_")
}
FLOAT_DTYPES = frozenset({"float", "double", "half", "bfloat16"})
_KERNEL_TYPE_NAMES: dict[int, str] = {
    v: k.lower() for k, v in vars(fb.KernelTypes).items() if not k.startswith("_")
}


# --- opening --------------------------------------------------------------------------------


def bad_file(path: Path, message: str, hint: str | None = None) -> UsageError:
    return UsageError(
        f"{path}: {message}",
        hint or "pass a .pte written by ExecuTorch's to_executorch(); --any-file sizes other files",
    )


@contextmanager
def mapped(path: Path, size: int) -> Iterator[mmap.mmap]:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as exc:
        raise bad_file(path, f"cannot be read: {exc.strerror}", "check the path") from None
    try:
        mm = mmap.mmap(fd, size, access=mmap.ACCESS_READ)
    except (OSError, ValueError) as exc:
        raise bad_file(path, f"cannot be mapped: {exc}", "check the path") from None
    finally:
        os.close(fd)
    try:
        yield mm
    finally:
        mm.close()


@contextmanager
def program_root(path: str | os.PathLike[str]) -> Iterator[tuple[str, fb.Program]]:
    """The file identifier and the program flatbuffer of a .pte, memory-mapped, for
    readers that need only the program (its methods and instructions), never its
    segments. A file that is not a program, or is cut short, is a UsageError."""
    p = Path(path)
    size = check_readable_file(p).st_size
    if size < 8:
        raise bad_file(p, f"truncated or not a program: {size} bytes, a .pte has at least 8")
    with mapped(p, size) as mm:
        ident = bytes(mm[4:8]).decode("ascii", errors="replace")
        if not (ident.startswith("ET") and ident[2:4].isalnum()):
            raise bad_file(p, f"not an ExecuTorch program (file identifier {ident!r}, want 'ET..')")
        try:
            yield ident, fb.Program.GetRootAs(mm, 0)
        except (struct.error, IndexError, ValueError, UnicodeDecodeError, OverflowError) as exc:
            raise bad_file(
                p,
                f"truncated or corrupt program flatbuffer ({type(exc).__name__})",
                "the file was cut short or damaged; rebuild or copy it again",
            ) from None


def read_extended_header(head: bytes) -> ExtendedHeader | None:
    """Parse the "eh00" header from the file's first bytes, or None when absent."""
    if len(head) < 8 + EXTENDED_HEADER_MIN_LENGTH or head[8:12] != EXTENDED_HEADER_MAGIC:
        return None
    length = int.from_bytes(head[12:16], "little")
    if length < EXTENDED_HEADER_MIN_LENGTH:
        return None
    program_size = int.from_bytes(head[16:24], "little")
    segment_base = int.from_bytes(head[24:32], "little")
    segment_data = (
        int.from_bytes(head[32:40], "little")
        if length > EXTENDED_HEADER_MIN_LENGTH and len(head) >= 40
        else 0
    )
    return ExtendedHeader(8, length, program_size, segment_base, segment_data)


def read_pte(path: str | os.PathLike[str]) -> PteLayout:
    """Read the layout of the .pte at `path`; UsageError (exit 2) if it is not one."""
    p = Path(path)
    st = check_readable_file(p)
    file_size = st.st_size
    if file_size < 8:
        raise bad_file(p, f"truncated or not a program: {file_size} bytes, a .pte has at least 8")
    with mapped(p, file_size) as mm:
        ident_raw = bytes(mm[4:8])
        ident = ident_raw.decode("ascii", errors="replace")
        if not (ident_raw[:2] == b"ET" and ident_raw[2:4].isalnum()):
            raise bad_file(p, f"not an ExecuTorch program (file identifier {ident!r}, want 'ET..')")
        header = read_extended_header(bytes(mm[:64]))
        if header is not None:
            program_size = header.program_size
            if program_size > file_size:
                raise bad_file(
                    p,
                    f"truncated: the header says the program is {program_size} bytes, "
                    f"the file has {file_size}",
                    "the file was cut short; rebuild or copy it again",
                )
            segment_base = header.segment_base_offset
        else:
            program_size = file_size
            segment_base = 0
        try:
            return _parse(p, mm, file_size, ident, header, program_size, segment_base)
        except (struct.error, IndexError, ValueError, UnicodeDecodeError, OverflowError) as exc:
            raise bad_file(
                p,
                f"truncated or corrupt program flatbuffer ({type(exc).__name__})",
                "the file was cut short or damaged; rebuild or copy it again",
            ) from None


# --- parsing --------------------------------------------------------------------------------


def read_signatures(path: str | os.PathLike[str]) -> tuple[MethodSignature, ...]:
    """Each method's inputs and outputs, from the program flatbuffer alone: no segment,
    constant or delegate blob is read or parsed (what a warm run needs of a program it
    built; read_pte's full layout is for sizing and inspecting it). UsageError if the
    file is not a program."""
    with program_root(path) as (_ident, program):
        signatures = []
        for pi in range(program.ExecutionPlanLength()):
            plan = program.ExecutionPlan(pi)
            signatures.append(
                MethodSignature(
                    fb_str(plan.Name()),
                    tuple(method_value(plan, plan.Inputs(j)) for j in range(plan.InputsLength())),
                    tuple(method_value(plan, plan.Outputs(j)) for j in range(plan.OutputsLength())),
                )
            )  # fmt: skip
        return tuple(signatures)


def _vector_span(table: Any, vtable_offset: int) -> tuple[int, int] | None:
    """(absolute position, length) of a vector field of a generated table, None if absent."""
    tab: flatbuffers.table.Table = table._tab
    o = tab.Offset(vtable_offset)
    if o == 0:
        return None
    return tab.Vector(o), tab.VectorLen(o)


def fb_str(raw: bytes | None) -> str:
    return raw.decode("utf-8") if raw else ""


def _tensor_meta(t: fb.Tensor) -> TensorMeta:
    dtype = _SCALAR_TYPE_NAMES.get(t.ScalarType(), f"scalar_type_{t.ScalarType()}")
    sizes = tuple(int(t.Sizes(j)) for j in range(t.SizesLength()))
    dim_order = tuple(int(t.DimOrder(j)) for j in range(t.DimOrderLength()))
    dyn = {0: "static", 1: "dynamic_bound", 2: "dynamic_unbound"}.get(t.ShapeDynamism(), "?")
    return TensorMeta(dtype, sizes, dim_order, dyn)


def evalue_tensor(ev: fb.EValue) -> fb.Tensor | None:
    if ev.ValType() != fb.KernelTypes.Tensor:
        return None
    table = ev.Val()
    if table is None:
        return None
    t = fb.Tensor()
    t.Init(table.Bytes, table.Pos)
    return t


def method_value(plan: fb.ExecutionPlan, index: int) -> MethodValue:
    if not 0 <= index < plan.ValuesLength():
        raise IndexError(f"value index {index} out of range")
    ev = plan.Values(index)
    kind = _KERNEL_TYPE_NAMES.get(ev.ValType(), f"kind_{ev.ValType()}")
    t = evalue_tensor(ev)
    if t is not None:
        return MethodValue(index, "tensor", _tensor_meta(t))
    # Name the other kinds the way the schema does, snake_cased (IntList -> int_list).
    snake = {"intlist": "int_list", "doublelist": "double_list", "boollist": "bool_list",
             "tensorlist": "tensor_list", "optionaltensorlist": "optional_tensor_list"}  # fmt: skip
    return MethodValue(index, snake.get(kind, kind))


def _subsegment_offsets(sub: fb.SubsegmentOffsets) -> tuple[int, tuple[int, ...]]:
    return sub.SegmentIndex(), tuple(int(sub.Offsets(j)) for j in range(sub.OffsetsLength()))


@dataclass(frozen=True)
class _ProgramData:
    """Where the program keeps data, read before its methods: its segments, inline
    buffers, the constant segment's and mutable segments' offsets, named data."""

    segments: tuple[Segment, ...]
    # (absolute offset, size) of each inline constant buffer and inline delegate blob.
    constant_spans: tuple[tuple[int, int], ...]
    inline_delegate: tuple[tuple[int, int], ...]
    constant_segment_index: int | None
    constant_offsets: tuple[int, ...]
    # (segment index, offsets of its sub-spans) of each mutable data segment.
    mutable: tuple[tuple[int, tuple[int, ...]], ...]
    named: tuple[NamedDataEntry, ...]


# A tensor's data is one entry however many methods use it: keyed by where it lives.
_ConstantKey = tuple[str, int, int | str | None]


@dataclass
class _ConstantEntry:
    """A tensor with data while the methods are read: the methods using it grow."""

    name: str | None
    methods: list[str]
    meta: TensorMeta
    stored: int
    location: str
    buffer_index: int
    offset: int | None

    def tensor(self) -> ConstantTensor:
        return ConstantTensor(
            name=self.name,
            methods=tuple(self.methods),
            dtype=self.meta.dtype,
            sizes=self.meta.sizes,
            nbytes=self.meta.nbytes,
            stored_bytes=self.stored,
            location=self.location,
            buffer_index=self.buffer_index,
            offset=self.offset,
        )


def _parse(
    path: Path,
    buf: mmap.mmap,
    file_size: int,
    ident: str,
    header: ExtendedHeader | None,
    program_size: int,
    segment_base: int,
) -> PteLayout:
    program = fb.Program.GetRootAs(buf, 0)
    root_pos = int.from_bytes(buf[0:4], "little")
    if root_pos >= program_size:
        raise ValueError("root table outside the program")
    data = _program_data(path, program, file_size, header, segment_base)

    methods: list[MethodInfo] = []
    delegates: list[DelegateInfo] = []
    constants: dict[_ConstantKey, _ConstantEntry] = {}
    for pi in range(program.ExecutionPlanLength()):
        plan = program.ExecutionPlan(pi)
        name = fb_str(plan.Name())
        method_delegates = _method_delegates(plan, name, data)
        methods.append(_method_info(plan, name, method_delegates))
        delegates.extend(method_delegates)
        _collect_constants(plan, name, constants, data)

    constant_tensors = tuple(entry.tensor() for entry in constants.values())
    delegate_constants, notes = _delegate_constants(buf, delegates, data.named)
    if constant_tensors and not any(t.name for t in constant_tensors):
        notes.append(
            "the program does not name its constant tensors (executorch stores names only for "
            "external and mutable data); they are listed by shape and dtype"
        )
    segments = data.segments
    return PteLayout(
        path=path,
        file_size=file_size,
        file_identifier=ident,
        schema_version=int(program.Version()),
        header=header,
        program_size=program_size,
        segment_base_offset=segment_base,
        segments=segments,
        methods=tuple(methods),
        delegates=tuple(delegates),
        constant_buffer_count=len(data.constant_spans),
        constant_buffer_bytes=sum(s for _, s in data.constant_spans),
        constant_buffer_spans=data.constant_spans,
        constant_segment_index=data.constant_segment_index,
        constant_segment_size=(
            segments[data.constant_segment_index].size
            if data.constant_segment_index is not None
            else 0
        ),
        mutable_segment_indices=tuple(i for i, _ in data.mutable),
        named_data=data.named,
        inline_delegate_spans=data.inline_delegate,
        constant_tensors=constant_tensors,
        delegate_constants=tuple(delegate_constants),
        notes=tuple(notes),
    )


def _segments(
    path: Path,
    program: fb.Program,
    file_size: int,
    header: ExtendedHeader | None,
    segment_base: int,
) -> tuple[Segment, ...]:
    """The program's segments at their absolute offsets; a segment past the end of
    the file is a truncated file."""
    segments: list[Segment] = []
    for i in range(program.SegmentsLength()):
        s = program.Segments(i)
        rel, size = int(s.Offset()), int(s.Size())
        absolute = segment_base + rel
        if absolute + size > file_size:
            raise bad_file(
                path,
                f"truncated: segment {i} ends at byte {absolute + size}, the file has {file_size}",
                "the file was cut short; rebuild or copy it again",
            )
        segments.append(Segment(i, absolute, size, rel))
    # executorch omits the header when the segment data is empty, yet may still list an
    # empty constant segment; only non-empty segments need the header to be found.
    if header is None and any(seg.size for seg in segments):
        raise bad_file(path, "corrupt: segments listed but no extended header locates them")
    return tuple(segments)


def _program_data(
    path: Path,
    program: fb.Program,
    file_size: int,
    header: ExtendedHeader | None,
    segment_base: int,
) -> _ProgramData:
    segments = _segments(path, program, file_size, header, segment_base)
    # Inline buffers (legacy constants, and inline delegate data).
    constant_spans = tuple(
        _vector_span(program.ConstantBuffer(i), 4) or (0, 0)
        for i in range(program.ConstantBufferLength())
    )
    inline_delegate = tuple(
        _vector_span(program.BackendDelegateData(i), 4) or (0, 0)
        for i in range(program.BackendDelegateDataLength())
    )
    cseg = program.ConstantSegment()
    constant_segment_index: int | None = None
    constant_offsets: tuple[int, ...] = ()
    if cseg is not None:
        idx, constant_offsets = _subsegment_offsets(cseg)
        if constant_offsets:
            constant_segment_index = idx
            if idx >= len(segments):
                raise ValueError("constant segment index out of range")
    mutable = tuple(
        _subsegment_offsets(program.MutableDataSegments(i))
        for i in range(program.MutableDataSegmentsLength())
    )
    named: list[NamedDataEntry] = []
    for i in range(program.NamedDataLength()):
        nd = program.NamedData(i)
        si = int(nd.SegmentIndex())
        if si >= len(segments):
            raise ValueError("named data segment index out of range")
        named.append(NamedDataEntry(fb_str(nd.Key()), si, segments[si].offset, segments[si].size))
    return _ProgramData(
        segments=segments,
        constant_spans=constant_spans,
        inline_delegate=inline_delegate,
        constant_segment_index=constant_segment_index,
        constant_offsets=constant_offsets,
        mutable=mutable,
        named=tuple(named),
    )


def _method_info(plan: fb.ExecutionPlan, name: str, delegates: list[DelegateInfo]) -> MethodInfo:
    ops = []
    for j in range(plan.OperatorsLength()):
        op = plan.Operators(j)
        overload = fb_str(op.Overload())
        ops.append(fb_str(op.Name()) + (f".{overload}" if overload else ""))
    return MethodInfo(
        name=name,
        inputs=tuple(method_value(plan, plan.Inputs(j)) for j in range(plan.InputsLength())),
        outputs=tuple(method_value(plan, plan.Outputs(j)) for j in range(plan.OutputsLength())),
        non_const_buffer_sizes=tuple(
            int(plan.NonConstBufferSizes(j)) for j in range(plan.NonConstBufferSizesLength())
        ),
        operators=tuple(ops),
        num_values=int(plan.ValuesLength()),
        num_instructions=sum(
            int(plan.Chains(j).InstructionsLength()) for j in range(plan.ChainsLength())
        ),
        delegate_ids=tuple(d.backend_id for d in delegates),
    )


def _method_delegates(
    plan: fb.ExecutionPlan, method: str, data: _ProgramData
) -> list[DelegateInfo]:
    """Each delegate call of a method, with where its blob is (a segment or inline)."""
    delegates: list[DelegateInfo] = []
    for j in range(plan.DelegatesLength()):
        d = plan.Delegates(j)
        backend = fb_str(d.Id())
        ref = d.Processed()
        loc_code = ref.Location() if ref is not None else fb.DataLocation.INLINE
        data_index = int(ref.Index()) if ref is not None else 0
        offset: int | None
        if loc_code == fb.DataLocation.SEGMENT:
            if data_index >= len(data.segments):
                raise ValueError("delegate segment index out of range")
            seg = data.segments[data_index]
            offset, size, location = seg.offset, seg.size, "segment"
        else:
            if data_index >= len(data.inline_delegate):
                raise ValueError("inline delegate index out of range")
            offset, size = data.inline_delegate[data_index]
            location = "inline"
        keys = tuple(fb_str(d.CompileSpecs(k).Key()) for k in range(d.CompileSpecsLength()))
        delegates.append(DelegateInfo(method, j, backend, location, data_index, offset, size, keys))
    return delegates


def _delegate_constants(
    buf: mmap.mmap, delegates: list[DelegateInfo], named: tuple[NamedDataEntry, ...]
) -> tuple[list[DelegateConstant], list[str]]:
    """The constants of every delegate blob this reader understands (XNNPACK's), and
    a note for each non-empty blob it does not."""
    named_by_key = {n.key: n for n in named}
    found: list[DelegateConstant] = []
    notes: list[str] = []
    for d in delegates:
        constants = xnnpack_constants(buf, d, named_by_key)
        if constants is None:
            if d.size:
                notes.append(
                    f"{d.backend_id} blob of method {d.method} is opaque to this reader; "
                    "its weights are counted in the blob's bytes"
                )
            continue
        found.extend(constants)
    return found, notes


def _collect_constants(
    plan: fb.ExecutionPlan,
    method: str,
    out: dict[_ConstantKey, _ConstantEntry],
    data: _ProgramData,
) -> None:
    """Tensors with data (data_buffer_idx > 0, or external), deduplicated across methods by
    where the data is.

    The rules are the schema's comment on Tensor.data_buffer_idx (program.fbs, 1.5.1).
    """
    for vi in range(plan.ValuesLength()):
        t = evalue_tensor(plan.Values(vi))
        if t is None:
            continue
        idx = int(t.DataBufferIdx())
        extra = t.ExtraTensorInfo()
        external = extra is not None and extra.Location() == fb.TensorDataLocation.EXTERNAL
        # External tensors index their own table, so index 0 is a real tensor there.
        if idx == 0 and not external:
            continue
        meta = _tensor_meta(t)
        name = (fb_str(extra.FullyQualifiedName()) or None) if extra is not None else None
        offset: int | None
        key: _ConstantKey
        if external:
            key = ("external", 0, name)
            location, offset, stored = "external", None, meta.nbytes
        elif t.AllocationInfo() is not None:
            which = int(extra.MutableDataSegmentsIdx()) if extra is not None else 0
            if which >= len(data.mutable):
                raise ValueError("mutable data segment index out of range")
            seg_index, offsets = data.mutable[which]
            offset, stored = _sub_span(offsets, idx, data.segments[seg_index])
            key, location = ("mutable", which, idx), "mutable_segment"
        elif data.constant_segment_index is not None:
            seg = data.segments[data.constant_segment_index]
            offset, stored = _sub_span(data.constant_offsets, idx, seg)
            key, location = ("constant", 0, idx), "constant_segment"
        else:
            if idx >= len(data.constant_spans):
                raise ValueError("constant buffer index out of range")
            offset, stored = data.constant_spans[idx]
            key, location = ("inline", 0, idx), "constant_buffer"
        entry = out.get(key)
        if entry is None:
            out[key] = _ConstantEntry(name, [method], meta, stored, location, idx, offset)
        else:
            if method not in entry.methods:
                entry.methods.append(method)
            entry.name = entry.name or name


def _sub_span(offsets: tuple[int, ...], idx: int, seg: Segment) -> tuple[int, int]:
    if idx >= len(offsets):
        raise ValueError("subsegment index out of range")
    start = offsets[idx]
    end = offsets[idx + 1] if idx + 1 < len(offsets) else seg.size
    if start > seg.size or end > seg.size or end < start:
        raise ValueError("subsegment offset outside its segment")
    return seg.offset + start, end - start


def dtype_bytes(dtype: str) -> float:
    """Bytes per element of an ExecuTorch ScalarType or XNNPACK datatype name."""
    if dtype in SCALAR_TYPE_BYTES:
        return SCALAR_TYPE_BYTES[dtype]
    return XNN_DTYPE_BYTES.get(dtype, 1)


def scalar_type_name(code: int) -> str:
    """The schema's name of a ScalarType code ("float" for 6)."""
    return _SCALAR_TYPE_NAMES.get(code, f"scalar_type_{code}")
