"""What a .pte is made of, and what to cut: a byte-exact breakdown of the file.

Every byte of the file falls in exactly one span (header, program flatbuffer, inline data,
each segment, padding), so the spans sum to the file size. Per span we give how well it
deflates at level 6 (the Play download estimate), and over the file the largest constant
tensors and an estimate of what int8 weight quantization would save.

Where the weights live in executorch 1.5.1 (exir/_serialize/_program.py and
backends/xnnpack/operators/node_visitor.py, read 2026-12-02):
- not delegated: the constant segment, one aligned subsegment per tensor;
- XNNPACK-delegated: one named-data segment per constant, keyed by the sha256 of its bytes;
  the delegate blob holds the XNNPACK graph (shapes, datatypes, keys), not the weights;
- external (.ptd) data: not in this file at all, only named.
"""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from etdeploy.pte.layout import PteLayout
from etdeploy.pte.reader import FLOAT_DTYPES, dtype_bytes, read_pte
from etdeploy.pte.xnnpack import XNN_FLOAT_DTYPES
from etdeploy.sizecheck.compress import PLAY_LEVEL, Measurement, measure

HEADER = "header"
PROGRAM = "program"
INLINE_CONSTANTS = "inline_constants"
INLINE_DELEGATE = "inline_delegate"
CONSTANT_SEGMENT = "constant_segment"
DELEGATE = "delegate"
NAMED_DATA = "named_data"
MUTABLE_DATA = "mutable_data"
UNREFERENCED = "unreferenced_segment"
PADDING = "padding"

# Per-channel symmetric int8 stores one fp32 scale per output channel (XNNPACK's qc8
# weights, backends/xnnpack/serialization/schema.fbs PerChannelQuant: scale [float]).
_SCALE_BYTES = 4


@dataclass(frozen=True)
class Part:
    """One contiguous span of the file."""

    label: str
    kind: str
    offset: int
    size: int
    backend: str | None = None
    download_bytes: int | None = None  # deflate level 6 of this span

    @property
    def ratio(self) -> float | None:
        return _ratio(self.download_bytes, self.size)


def _ratio(download_bytes: int | None, size: int) -> float | None:
    """Compressed over raw; None when not measured or empty."""
    return None if download_bytes is None or size == 0 else download_bytes / size


@dataclass(frozen=True)
class PartGroup:
    """Parts of the same label summed (e.g. all padding, every named-data segment)."""

    label: str
    kind: str
    size: int
    count: int
    download_bytes: int | None

    @property
    def ratio(self) -> float | None:
        return _ratio(self.download_bytes, self.size)


@dataclass(frozen=True)
class TensorRow:
    name: str | None  # as the file names it; None when it does not
    key: str | None  # XNNPACK named-data key (sha256 of the bytes)
    shape: tuple[int, ...] | None
    dtype: str | None
    nbytes: int
    location: str  # constant_segment, constant_buffer, mutable_segment, external, named_data...
    backend: str | None
    float_elements: int  # elements of a float dtype (0 otherwise)
    offset: int | None


@dataclass(frozen=True)
class QuantizationEstimate:
    """An estimate: float weights (rank >= 2) to per-channel symmetric int8."""

    tensors: int
    float_bytes: int
    int8_bytes: int
    scale_bytes: int

    @property
    def quantized_bytes(self) -> int:
        return self.int8_bytes + self.scale_bytes

    @property
    def saved_bytes(self) -> int:
        return self.float_bytes - self.quantized_bytes

    note: str = (
        "estimate: float weights of rank >= 2 to int8 (1 byte each) plus one fp32 scale per "
        "output channel; biases and other 1-D tensors stay float; accuracy not considered"
    )


@dataclass(frozen=True)
class Breakdown:
    path: str
    file_size: int
    parts: tuple[Part, ...]
    tensors: tuple[TensorRow, ...]  # largest first
    quantization: QuantizationEstimate
    external_bytes: int  # tensors the file names but keeps in external data
    notes: tuple[str, ...]

    @property
    def total_bytes(self) -> int:
        return sum(p.size for p in self.parts)

    def groups(self) -> list[PartGroup]:
        """Parts summed by label, largest first."""
        sizes: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0, 0, 1])
        for p in self.parts:
            g = sizes[(p.label, p.kind)]
            g[0] += p.size
            g[1] += 1
            if p.download_bytes is None:
                g[3] = 0
            else:
                g[2] += p.download_bytes
        out = [
            PartGroup(label, kind, s, n, d if known else None)
            for (label, kind), (s, n, d, known) in sizes.items()
        ]
        return sorted(out, key=lambda g: g.size, reverse=True)

    def largest(self, n: int) -> tuple[TensorRow, ...]:
        return self.tensors[:n]


def layout_parts(layout: PteLayout) -> list[Part]:
    """Spans that tile [0, file_size) exactly, labelled by what refers to them."""
    spans: list[Part] = []
    h = layout.header
    if h is not None:
        spans.append(Part("extended header (eh00)", HEADER, h.offset, h.length))
    for off, size in layout.constant_buffer_spans:
        if size:
            spans.append(Part("inline constants (legacy)", INLINE_CONSTANTS, off, size))
    backend_of_inline = {
        d.data_index: d.backend_id for d in layout.delegates if d.location == "inline"
    }
    for i, (off, size) in enumerate(layout.inline_delegate_spans):
        if size:
            inline_backend = backend_of_inline.get(i, "?")
            spans.append(
                Part(
                    f"delegate blob inline: {inline_backend}",
                    INLINE_DELEGATE, off, size, inline_backend,
                )
            )  # fmt: skip

    seg_label: dict[int, tuple[str, str, str | None]] = {}
    if layout.constant_segment_index is not None:
        seg_label[layout.constant_segment_index] = ("constant segment", CONSTANT_SEGMENT, None)
    for i in layout.mutable_segment_indices:
        seg_label[i] = ("mutable data segment", MUTABLE_DATA, None)
    key_backend = {c.key: c.backend_id for c in layout.delegate_constants if c.key}
    for nd in layout.named_data:
        backend = key_backend.get(nd.key)
        label = f"named data: {backend} constants" if backend else "named data"
        seg_label.setdefault(nd.segment_index, (label, NAMED_DATA, backend))
    for d in layout.delegates:
        if d.location == "segment":
            seg_label[d.data_index] = (f"delegate blob: {d.backend_id}", DELEGATE, d.backend_id)
    for seg in layout.segments:
        if seg.size:
            label, kind, backend = seg_label.get(
                seg.index, ("unreferenced segment", UNREFERENCED, None)
            )
            spans.append(Part(label, kind, seg.offset, seg.size, backend))

    # The program flatbuffer is everything in [0, program_size) not carved out above;
    # whatever else is left between spans is padding.
    spans.sort(key=lambda p: (p.offset, -p.size))
    out: list[Part] = []
    cursor = 0

    def fill(upto: int) -> None:
        nonlocal cursor
        while cursor < upto:
            if cursor < layout.program_size:
                end = min(upto, layout.program_size)
                out.append(Part("program flatbuffer", PROGRAM, cursor, end - cursor))
            else:
                end = upto
                out.append(Part("padding", PADDING, cursor, end - cursor))
            cursor = end

    for span in spans:
        start = max(span.offset, cursor)  # a malformed overlap is counted once
        end = span.offset + span.size
        if end <= start:
            continue
        fill(start)
        out.append(Part(span.label, span.kind, start, end - start, span.backend))
        cursor = end
    fill(layout.file_size)
    return out


def _with_compression(parts: list[Part], m: Measurement) -> list[Part]:
    by_bounds = {
        b: d.get(PLAY_LEVEL) for b, d in zip(m.part_bounds, m.part_deflate_bytes, strict=True)
    }
    out = []
    for p in parts:
        d = by_bounds.get((p.offset, p.offset + p.size))
        out.append(Part(p.label, p.kind, p.offset, p.size, p.backend, d if p.size else 0))
    return out


def _tensor_rows(layout: PteLayout) -> list[TensorRow]:
    rows: list[TensorRow] = []
    for t in layout.constant_tensors:
        numel = 1
        for s in t.sizes:
            numel *= s
        rows.append(
            TensorRow(
                name=t.name, key=None, shape=t.sizes, dtype=t.dtype, nbytes=t.nbytes,
                location=t.location, backend=None,
                float_elements=numel if t.dtype in FLOAT_DTYPES else 0, offset=t.offset,
            )
        )  # fmt: skip
    seen: set[str] = set()
    for c in layout.delegate_constants:
        if c.key is not None:
            if c.key in seen:  # the same bytes shared by several delegates are stored once
                continue
            seen.add(c.key)
        numel = 1
        for s in c.dims or ():
            numel *= s
        rows.append(
            TensorRow(
                name=None, key=c.key, shape=c.dims, dtype=c.dtype, nbytes=c.nbytes,
                location=c.location, backend=c.backend_id,
                float_elements=numel if c.dtype in XNN_FLOAT_DTYPES and c.dims else 0,
                offset=c.offset,
            )
        )  # fmt: skip
    rows.sort(key=lambda r: r.nbytes, reverse=True)
    return rows


def _quantization(rows: Sequence[TensorRow]) -> QuantizationEstimate:
    n = float_bytes = int8 = scales = 0
    for r in rows:
        if r.location == "external" or not r.float_elements or not r.shape or len(r.shape) < 2:
            continue
        n += 1
        float_bytes += int(r.float_elements * dtype_bytes(r.dtype or "float"))
        int8 += r.float_elements
        scales += r.shape[0] * _SCALE_BYTES
    return QuantizationEstimate(n, float_bytes, int8, scales)


def build_breakdown(layout: PteLayout, measurement: Measurement | None = None) -> Breakdown:
    """The breakdown of `layout`; with a measurement taken with `boundaries` from
    layout_parts(layout), each part also gets its level-6 compressed size."""
    parts = layout_parts(layout)
    if measurement is not None:
        parts = _with_compression(parts, measurement)
    rows = _tensor_rows(layout)
    external = sum(r.nbytes for r in rows if r.location == "external")
    notes = list(layout.notes)
    if external:
        n_ext = sum(1 for r in rows if r.location == "external")
        notes.append(
            f"{n_ext} tensors ({external} bytes) are external data (.ptd), not in this file; "
            "ship and size that file too"
        )
    if any(r.key for r in rows):
        notes.append(
            "XNNPACK stores each constant under the sha256 of its bytes, not a parameter name; "
            "tensors are listed by shape and dtype"
        )
    return Breakdown(
        path=str(layout.path),
        file_size=layout.file_size,
        parts=tuple(parts),
        tensors=tuple(rows),
        quantization=_quantization(rows),
        external_bytes=external,
        notes=tuple(notes),
    )


def breakdown(path: str | os.PathLike[str], *, compress: bool = True) -> Breakdown:
    """Read the .pte at `path` and break it down (measuring each part's compression)."""
    layout = read_pte(path)
    if not compress:
        return build_breakdown(layout)
    parts = layout_parts(layout)
    m = measure(path, levels=(PLAY_LEVEL,), boundaries=[p.offset for p in parts])
    return build_breakdown(layout, m)
