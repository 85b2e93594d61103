"""The breakdown: every byte in exactly one part, weights found where executorch put them,
per-part compression, and the int8 estimate's arithmetic."""

from __future__ import annotations

from pathlib import Path

from etdeploy.pte.reader import read_pte
from etdeploy.sizecheck.breakdown import (
    CONSTANT_SEGMENT,
    DELEGATE,
    HEADER,
    NAMED_DATA,
    PADDING,
    PROGRAM,
    breakdown,
    build_breakdown,
    layout_parts,
)
from tests.support.programs import BuiltPrograms


def _assert_tiles(parts, size: int) -> None:  # type: ignore[no-untyped-def]
    cursor = 0
    for p in parts:
        assert p.offset == cursor and p.size > 0
        cursor += p.size
    assert cursor == size


def test_the_breakdown_sums_exactly_to_the_file_size(programs: BuiltPrograms) -> None:
    for path in (programs.xnnpack, programs.portable, programs.external):
        b = breakdown(path)
        assert b.total_bytes == b.file_size == path.stat().st_size
        _assert_tiles(b.parts, b.file_size)
        assert sum(g.size for g in b.groups()) == b.file_size


def test_unlowered_weights_are_the_constant_segment(programs: BuiltPrograms) -> None:
    b = breakdown(programs.portable)
    kinds = {g.kind: g for g in b.groups()}
    assert set(kinds) == {HEADER, PROGRAM, PADDING, CONSTANT_SEGMENT}
    weights = sum(n for _, n in programs.params.values())
    # The segment holds the weights plus alignment padding between them.
    assert weights <= kinds[CONSTANT_SEGMENT].size < weights + 64 * len(programs.params)
    assert kinds[HEADER].size == 32
    assert b.groups()[0].kind == CONSTANT_SEGMENT  # largest first


def test_xnnpack_weights_are_named_data_and_the_blob_is_the_graph(
    programs: BuiltPrograms,
) -> None:
    b = breakdown(programs.xnnpack)
    by_kind = {g.kind: g for g in b.groups()}
    weights = sum(n for _, n in programs.params.values())
    assert by_kind[NAMED_DATA].size == weights
    assert by_kind[NAMED_DATA].count == len(programs.params)
    assert by_kind[NAMED_DATA].label == "named data: XnnpackBackend constants"
    assert by_kind[DELEGATE].label == "delegate blob: XnnpackBackend"
    assert by_kind[DELEGATE].size < 10_000  # the graph, not the weights
    top = b.largest(1)[0]
    assert top.backend == "XnnpackBackend" and top.key and len(top.key) == 64
    assert top.nbytes == max(n for _, n in programs.params.values())


def test_each_part_gets_its_own_level6_ratio(programs: BuiltPrograms) -> None:
    b = breakdown(programs.portable)
    by_kind = {g.kind: g for g in b.groups()}
    assert all(p.download_bytes is not None for p in b.parts)
    # Float weights barely compress, zero padding compresses to almost nothing.
    assert 0.85 < (by_kind[CONSTANT_SEGMENT].ratio or 0) < 1.0
    assert (by_kind[PADDING].ratio or 1) < 0.2
    assert breakdown(programs.portable, compress=False).parts[0].download_bytes is None


def test_the_int8_estimate_is_a_quarter_of_float_weights_plus_scales(
    programs: BuiltPrograms,
) -> None:
    for path in (programs.portable, programs.xnnpack):
        q = breakdown(path, compress=False).quantization
        matrices = {k: v for k, v in programs.params.items() if len(v[0]) >= 2}
        assert q.tensors == len(matrices)
        assert q.float_bytes == sum(n for _, n in matrices.values())
        assert q.int8_bytes == q.float_bytes // 4
        assert q.scale_bytes == 4 * sum(shape[0] for shape, _ in matrices.values())
        assert q.saved_bytes == q.float_bytes - q.int8_bytes - q.scale_bytes
        assert "estimate" in q.note


def test_external_data_is_named_but_not_counted_in_the_file(programs: BuiltPrograms) -> None:
    b = breakdown(programs.external)
    assert b.external_bytes == sum(n for _, n in programs.params.values())
    assert {t.name for t in b.tensors} == set(programs.params)
    assert b.quantization.tensors == 0  # nothing to shrink inside this file
    assert any(".ptd" in n for n in b.notes)


def test_trailing_bytes_after_the_segments_are_padding(
    programs: BuiltPrograms, tmp_path: Path
) -> None:
    # Trailing bytes after the last segment (e.g. an appended signature) become padding.
    raw = programs.portable.read_bytes() + b"\x00" * 100
    padded = tmp_path / "trailing.pte"
    padded.write_bytes(raw)
    layout = read_pte(padded)
    parts = layout_parts(layout)
    _assert_tiles(parts, len(raw))
    assert parts[-1].kind == PADDING and parts[-1].size == 100
    assert build_breakdown(layout).total_bytes == len(raw)
