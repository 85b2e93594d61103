"""The torch-free .pte reader: agrees with executorch's own deserialiser, finds every
weight, and turns bad input into a one-line UsageError (exit 2)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from etdeploy.errors import EXIT_BAD_INPUT, UsageError
from etdeploy.pte.reader import read_pte
from tests.support.programs import BuiltPrograms

# ScalarType enum value -> our dtype name, from executorch's own enum (exir/scalar_type.py).
_KINDS = {
    "Tensor": "tensor", "Int": "int", "Bool": "bool", "Double": "double", "String": "string",
    "IntList": "int_list", "DoubleList": "double_list", "BoolList": "bool_list",
    "TensorList": "tensor_list", "OptionalTensorList": "optional_tensor_list", "Null": "null",
}  # fmt: skip


def _reference(path: Path):  # type: ignore[no-untyped-def]
    from executorch.exir._serialize._program import deserialize_pte_binary

    return deserialize_pte_binary(path.read_bytes())


def _all(programs: BuiltPrograms) -> list[Path]:
    return [programs.xnnpack, programs.portable, programs.external]


def test_methods_inputs_and_outputs_match_executorchs_deserialiser(
    programs: BuiltPrograms,
) -> None:
    for path in _all(programs):
        ours = read_pte(path)
        ref = _reference(path).program
        assert ours.schema_version == ref.version
        assert [m.name for m in ours.methods] == [p.name for p in ref.execution_plan]
        for m, plan in zip(ours.methods, ref.execution_plan, strict=True):
            for values, indices in ((m.inputs, plan.inputs), (m.outputs, plan.outputs)):
                assert [v.index for v in values] == list(indices)
                for v in values:
                    val = plan.values[v.index].val
                    assert v.kind == _KINDS[type(val).__name__]
                    if v.tensor is not None:
                        assert v.tensor.dtype == val.scalar_type.name.lower()
                        assert list(v.tensor.sizes) == list(val.sizes)
                        assert list(v.tensor.dim_order) == list(val.dim_order)
            assert list(m.non_const_buffer_sizes) == list(plan.non_const_buffer_sizes)
            assert m.planned_arena_bytes == sum(plan.non_const_buffer_sizes[1:])
            assert m.operators == tuple(
                op.name + (f".{op.overload}" if op.overload else "") for op in plan.operators
            )
            assert m.num_values == len(plan.values)


def test_delegates_match_executorchs_deserialiser_blob_for_blob(programs: BuiltPrograms) -> None:
    ours = read_pte(programs.xnnpack)
    ref = _reference(programs.xnnpack).program
    ref_delegates = [(p.name, d) for p in ref.execution_plan for d in p.delegates]
    assert len(ours.delegates) == len(ref_delegates) >= 1
    data = programs.xnnpack.read_bytes()
    for d, (method, rd) in zip(ours.delegates, ref_delegates, strict=True):
        assert d.method == method
        assert d.backend_id == rd.id == "XnnpackBackend"
        assert d.location == "segment"  # to_executorch moves delegate blobs out of the program
        # The deserialiser inlines the blob again; the bytes at our offset are that blob.
        blob = ref.backend_delegate_data[rd.processed.index].data
        assert d.size == len(blob)
        assert data[d.offset : d.offset + d.size] == blob
        assert d.compile_spec_keys == tuple(cs.key for cs in rd.compile_specs)


def test_header_and_segments_are_where_the_bytes_are(programs: BuiltPrograms) -> None:
    for path in (programs.xnnpack, programs.portable):
        layout = read_pte(path)
        raw = path.read_bytes()
        assert layout.file_identifier == "ET12" == raw[4:8].decode()
        assert layout.header is not None and raw[8:12] == b"eh00"
        assert layout.program_size == layout.header.program_size < layout.file_size
        assert layout.segment_base_offset % 128 == 0  # executorch's default segment alignment
        end = max(s.offset + s.size for s in layout.segments)
        assert end == layout.file_size
        assert layout.header.segment_data_size == end - layout.segment_base_offset


def test_constant_segment_tensors_match_the_deserialised_buffers(programs: BuiltPrograms) -> None:
    layout = read_pte(programs.portable)
    ref = _reference(programs.portable).program
    raw = programs.portable.read_bytes()
    assert layout.constant_segment_index is not None
    # Four parameters, shared by both methods, stored once.
    assert sorted(t.sizes for t in layout.constant_tensors) == sorted(
        s for s, _ in programs.params.values()
    )
    for t in layout.constant_tensors:
        assert t.location == "constant_segment"
        assert t.name is None  # executorch does not name constant-segment tensors
        stored = ref.constant_buffer[t.buffer_index].storage
        assert t.stored_bytes == len(stored)
        assert raw[t.offset : t.offset + t.nbytes] == stored[: t.nbytes]
    shared = [t for t in layout.constant_tensors if t.sizes == programs.params["conv.weight"][0]]
    assert len(shared) == 1 and set(shared[0].methods) == {"forward", "features"}
    assert any("does not name" in n for n in layout.notes)


def test_xnnpack_weights_are_found_in_named_data_with_shapes(programs: BuiltPrograms) -> None:
    layout = read_pte(programs.xnnpack)
    ref = _reference(programs.xnnpack)
    raw = programs.xnnpack.read_bytes()
    store = ref.named_data
    assert store is not None
    assert {n.key for n in layout.named_data} == set(store.pte_data)
    for n in layout.named_data:
        entry = store.pte_data[n.key]
        assert raw[n.offset : n.offset + n.size] == bytes(store.buffers[entry.buffer_index])
    consts = layout.delegate_constants
    assert {c.location for c in consts} == {"named_data"}
    assert all(c.dtype == "fp32" and c.dims for c in consts)
    # XNNPACK may permute a weight (NHWC convs), never change its size.
    assert sum(c.nbytes for c in consts) == sum(n for _, n in programs.params.values())
    assert sorted(c.nbytes for c in consts) == sorted(n for _, n in programs.params.values())


def test_external_constants_are_named_and_not_in_the_file(programs: BuiltPrograms) -> None:
    layout = read_pte(programs.external)
    assert layout.header is None  # no segment data, so executorch writes no extended header
    assert layout.program_size == layout.file_size
    names = {t.name: t for t in layout.external_tensors}
    assert set(names) == set(programs.params)
    for name, (shape, nbytes) in programs.params.items():
        assert names[name].sizes == shape and names[name].nbytes == nbytes
        assert names[name].offset is None


def test_reading_a_pte_does_not_import_torch(programs: BuiltPrograms) -> None:
    code = (
        "import sys\nfrom etdeploy.pte.reader import read_pte\n"
        f"read_pte({str(programs.xnnpack)!r})\n"
        "print('torch' in sys.modules, 'executorch' in sys.modules)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.split() == ["False", "False"]


# --- bad input --------------------------------------------------------------------------


def _assert_usage_error(path: Path, expected: str) -> None:
    with pytest.raises(UsageError) as info:
        read_pte(path)
    err = info.value
    assert err.exit_code == EXIT_BAD_INPUT
    assert expected in err.message
    assert "\n" not in err.message and err.hint


def test_a_file_with_another_identifier_is_not_a_pte(
    programs: BuiltPrograms, tmp_path: Path
) -> None:
    raw = bytearray(programs.portable.read_bytes())
    raw[4:8] = b"XN01"
    bad = tmp_path / "other.pte"
    bad.write_bytes(bytes(raw))
    _assert_usage_error(bad, "not an ExecuTorch program (file identifier 'XN01'")
    png = tmp_path / "image.pte"
    png.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(64))
    _assert_usage_error(png, "not an ExecuTorch program")


def test_truncated_files_are_reported_as_truncated(programs: BuiltPrograms, tmp_path: Path) -> None:
    raw = programs.portable.read_bytes()
    layout = read_pte(programs.portable)
    cut_in_segments = tmp_path / "cut-segments.pte"
    cut_in_segments.write_bytes(raw[: layout.file_size - 1])  # one byte short
    _assert_usage_error(cut_in_segments, "truncated: segment 0 ends at byte")
    cut_in_program = tmp_path / "cut-program.pte"
    cut_in_program.write_bytes(raw[: layout.program_size // 2])
    _assert_usage_error(cut_in_program, "truncated: the header says the program is")
    stub = tmp_path / "stub.pte"
    stub.write_bytes(raw[:5])
    _assert_usage_error(stub, "truncated or not a program: 5 bytes")
    # Without an extended header there is no size to check against: the parse fails.
    ext = programs.external.read_bytes()
    cut_flat = tmp_path / "cut-flat.pte"
    cut_flat.write_bytes(ext[: len(ext) // 3])
    _assert_usage_error(cut_flat, "truncated or corrupt program flatbuffer")


def test_a_directory_is_not_a_pte(tmp_path: Path) -> None:
    _assert_usage_error(tmp_path, "is a directory")


def test_unreadable_paths_fail_without_blocking(tmp_path: Path) -> None:
    # chmod 000 does not stop root, so unreadable is made two other ways: a FIFO (open()
    # would block forever; we must refuse it from stat alone) and a broken symlink.
    fifo = tmp_path / "pipe.pte"
    os.mkfifo(fifo)
    _assert_usage_error(fifo, "is not a regular file")
    link = tmp_path / "gone.pte"
    link.symlink_to(tmp_path / "deleted.pte")
    _assert_usage_error(link, "broken symbolic link")
    _assert_usage_error(tmp_path / "missing.pte", "no such file")
