"""The constants an XNNPACK delegate blob refers to, read from the blob's own
flatbuffer (the XNNGraph of executorch's backends/xnnpack/serialization) without
torch: each constant's datatype, dims, size and where its bytes are (the named
data map, the blob itself, or missing)."""

from __future__ import annotations

import mmap

from etdeploy.pte._generated import xnnpack_generated as xfb
from etdeploy.pte.layout import DelegateConstant, DelegateInfo, NamedDataEntry

# From backends/xnnpack/serialization/xnnpack_graph_serialize.py's XNNHeader (1.5.1).
XNNPACK_HEADER_MAGIC = b"XH00"
XNNPACK_HEADER_LENGTH = 30
# ConstantDataOffset.offset holds this when the data lives in the named data map.
_UINT64_MAX = 2**64 - 1

XNN_DTYPE_NAMES: dict[int, str] = {
    v: k.removeprefix("xnn_datatype_")
    for k, v in vars(xfb.XNNDatatype).items()
    if k.startswith("xnn_datatype_")
}
XNN_DTYPE_BYTES: dict[str, float] = {
    "fp32": 4, "fp16": 2, "bf16": 2, "qint8": 1, "quint8": 1, "qint32": 4, "qcint8": 1,
    "qcint32": 4, "qcint4": 0.5, "qdint8": 1, "qbint4": 0.5, "qpint8": 1, "int32": 4,
    "pfp32": 4,
}  # fmt: skip
XNN_FLOAT_DTYPES = frozenset({"fp32", "fp16", "bf16", "pfp32"})


def xnnpack_constants(
    buf: mmap.mmap, d: DelegateInfo, named_by_key: dict[str, NamedDataEntry]
) -> list[DelegateConstant] | None:
    """The constants an XNNPACK blob refers to; None when the blob is not XNNPACK's."""
    if d.offset is None or d.size < XNNPACK_HEADER_LENGTH:
        return None
    base = d.offset
    if bytes(buf[base + 4 : base + 8]) != XNNPACK_HEADER_MAGIC:
        return None
    header_len = int.from_bytes(buf[base + 8 : base + 10], "little")
    fb_offset = int.from_bytes(buf[base + 10 : base + 14], "little")
    fb_size = int.from_bytes(buf[base + 14 : base + 18], "little")
    const_offset = int.from_bytes(buf[base + 18 : base + 22], "little")
    if header_len != XNNPACK_HEADER_LENGTH or fb_offset + fb_size > d.size or fb_size < 8:
        return None
    if bytes(buf[base + fb_offset + 4 : base + fb_offset + 6]) != b"XN":
        return None
    graph = xfb.XNNGraph.GetRootAs(buf, base + fb_offset)
    n_data = graph.ConstantDataLength()
    typed: dict[int, tuple[str, tuple[int, ...]]] = {}
    for i in range(graph.XvaluesLength()):
        xv = graph.Xvalues(i)
        table = xv.XvalueUnion()
        if table is None:
            continue
        kind = xv.XvalueUnionType()
        if kind == xfb.XValueUnion.XNNTensorValue:
            tv = xfb.XNNTensorValue()
            tv.Init(table.Bytes, table.Pos)
        elif kind == xfb.XValueUnion.XNNQuantizedTensorValue:
            qv = xfb.XNNQuantizedTensorValue()
            qv.Init(table.Bytes, table.Pos)
            tv = qv.TensorValue()
            if tv is None:
                continue
        else:
            continue
        cidx = tv.ConstantBufferIdx()
        if 0 < cidx < n_data:
            name = XNN_DTYPE_NAMES.get(tv.Datatype(), f"xnn_{tv.Datatype()}")
            typed[cidx] = (name, tuple(int(tv.Dims(j)) for j in range(tv.DimsLength())))
    found: list[DelegateConstant] = []
    # Entry 0 is reserved for non-constant values (runtime_schema.fbs).
    for ci in range(1, n_data):
        cd = graph.ConstantData(ci)
        raw_key = cd.NamedKey()
        key = raw_key.decode("utf-8") if raw_key else None
        size = int(cd.Size())
        dtype: str | None
        dims: tuple[int, ...] | None
        dtype, dims = typed.get(ci, (None, None))
        if key is not None:
            nd = named_by_key.get(key)
            location = "named_data" if nd else "missing"
            offset = nd.offset if nd else None
        elif int(cd.Offset()) != _UINT64_MAX:
            location, offset = "delegate_blob", base + const_offset + int(cd.Offset())
        else:
            location, offset = "missing", None
        found.append(
            DelegateConstant(
                d.backend_id, d.method, d.index, key, dtype, dims, size, location, offset
            )
        )
    return found


def xnnpack_float_elements(c: DelegateConstant) -> int:
    """Number of float elements of an XNNPACK constant (0 if it is not a float tensor)."""
    if c.dtype not in XNN_FLOAT_DTYPES or not c.dims:
        return 0
    n = 1
    for s in c.dims:
        n *= s
    return n
