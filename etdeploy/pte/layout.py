"""What the torch-free reader (pte.py) finds in a .pte: its header, segments,
methods, delegates, named data and constants, as plain records."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

# Bytes per element; sub-byte packed types (QUINT4X2, QUINT2X4) count one byte per stored
# element, as PyTorch's element_size() does.
SCALAR_TYPE_BYTES: dict[str, int] = {
    "byte": 1, "char": 1, "short": 2, "int": 4, "long": 8, "half": 2, "float": 4,
    "double": 8, "bool": 1, "qint8": 1, "quint8": 1, "qint32": 4, "bfloat16": 2,
    "quint4x2": 1, "quint2x4": 1, "bits16": 2, "float8e5m2": 1, "float8e4m3fn": 1,
    "float8e5m2fnuz": 1, "float8e4m3fnuz": 1, "uint16": 2, "uint32": 4, "uint64": 8,
}  # fmt: skip


@dataclass(frozen=True)
class ExtendedHeader:
    """The "eh00" header executorch inserts after the file identifier."""

    offset: int  # where the header starts in the file (always 8)
    length: int
    program_size: int
    segment_base_offset: int
    segment_data_size: int  # 0 when the header is the older, 24-byte kind


@dataclass(frozen=True)
class Segment:
    """One DataSegment: `offset` is absolute in the file, `relative_offset` as stored."""

    index: int
    offset: int
    size: int
    relative_offset: int


@dataclass(frozen=True)
class TensorMeta:
    dtype: str
    sizes: tuple[int, ...]
    dim_order: tuple[int, ...]
    shape_dynamism: str  # static | dynamic_bound | dynamic_unbound

    @property
    def numel(self) -> int:
        n = 1
        for s in self.sizes:
            n *= s
        return n

    @property
    def nbytes(self) -> int:
        return self.numel * SCALAR_TYPE_BYTES.get(self.dtype, 1)


@dataclass(frozen=True)
class MethodValue:
    """An input or output of a method: a tensor (with its metadata) or another kind named."""

    index: int
    kind: str  # tensor, int, bool, double, string, int_list, ..., null
    tensor: TensorMeta | None = None


@dataclass(frozen=True)
class MethodSignature:
    """A method's inputs and outputs (reader.read_signatures): what a warm run needs."""

    name: str
    inputs: tuple[MethodValue, ...]
    outputs: tuple[MethodValue, ...]


@dataclass(frozen=True)
class MethodInfo:
    name: str
    inputs: tuple[MethodValue, ...]
    outputs: tuple[MethodValue, ...]
    # Planned memory: ExecutionPlan.non_const_buffer_sizes. Entry 0 is reserved by the
    # schema (the runtime ignores it), so the planned arena is the sum of the rest.
    non_const_buffer_sizes: tuple[int, ...]
    operators: tuple[str, ...]
    num_values: int
    num_instructions: int
    delegate_ids: tuple[str, ...]

    @property
    def planned_arena_bytes(self) -> int:
        return sum(self.non_const_buffer_sizes[1:])


@dataclass(frozen=True)
class DelegateInfo:
    method: str
    index: int  # within the method's delegates
    backend_id: str
    location: str  # inline | segment
    data_index: int  # into Program.backend_delegate_data (inline) or Program.segments
    offset: int | None  # absolute file offset of the blob; None when it is empty
    size: int
    compile_spec_keys: tuple[str, ...]


@dataclass(frozen=True)
class NamedDataEntry:
    key: str
    segment_index: int
    offset: int
    size: int


@dataclass(frozen=True)
class ConstantTensor:
    """A tensor whose initial data the program carries (or, for external, names).

    `name` is what the file says (ExtraTensorInfo.fully_qualified_name); executorch sets it
    only for external and (optionally) mutable tensors, so constants in the constant segment
    are usually unnamed: None.
    """

    name: str | None
    methods: tuple[str, ...]
    dtype: str
    sizes: tuple[int, ...]
    nbytes: int  # from dtype and shape
    stored_bytes: int  # the span the file gives it, alignment padding included
    location: str  # constant_segment | constant_buffer | mutable_segment | external
    buffer_index: int
    offset: int | None  # absolute file offset; None for external data


@dataclass(frozen=True)
class DelegateConstant:
    """A constant a delegate blob refers to (XNNPACK: weights, biases, scales).

    XNNPACK in executorch 1.5.1 serialises each constant into the program's named data map
    under the sha256 of its bytes (backends/xnnpack/operators/node_visitor.py), so `key` is a
    hash, not a parameter name; older blobs keep it inside the blob at `offset`.
    """

    backend_id: str
    method: str
    delegate_index: int
    key: str | None
    dtype: str | None  # XNNPACK datatype (fp32, qcint8, ...); None for untyped data (scales)
    dims: tuple[int, ...] | None
    nbytes: int
    location: str  # named_data | delegate_blob | missing
    offset: int | None  # absolute file offset when known


@dataclass(frozen=True)
class PteLayout:
    path: Path
    file_size: int
    file_identifier: str
    schema_version: int
    header: ExtendedHeader | None
    program_size: int
    segment_base_offset: int
    segments: tuple[Segment, ...]
    methods: tuple[MethodInfo, ...]
    delegates: tuple[DelegateInfo, ...]
    # Legacy inline constants (Program.constant_buffer), deprecated since 2024-09.
    constant_buffer_count: int
    constant_buffer_bytes: int
    constant_buffer_spans: tuple[tuple[int, int], ...]  # (offset, size) of each inline buffer
    # The constant segment (Program.constant_segment); None when the program has none.
    constant_segment_index: int | None
    constant_segment_size: int
    mutable_segment_indices: tuple[int, ...]
    named_data: tuple[NamedDataEntry, ...]
    inline_delegate_spans: tuple[tuple[int, int], ...]  # (offset, size) of inline blobs
    constant_tensors: tuple[ConstantTensor, ...]
    delegate_constants: tuple[DelegateConstant, ...]
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def constants_named(self) -> bool:
        """Whether the file names its constant-segment tensors (it usually does not)."""
        in_segment = [t for t in self.constant_tensors if t.location != "external"]
        return bool(in_segment) and all(t.name for t in in_segment)

    @property
    def external_tensors(self) -> tuple[ConstantTensor, ...]:
        return tuple(t for t in self.constant_tensors if t.location == "external")

    def method(self, name: str) -> MethodInfo:
        for m in self.methods:
            if m.name == name:
                return m
        raise KeyError(name)
