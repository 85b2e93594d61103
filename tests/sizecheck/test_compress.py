"""The parallel chunked deflate estimate: close to a single `gzip -6` stream on real float
weights and real .pte files, parts that sum to the whole, and bounded memory."""

from __future__ import annotations

import os
import subprocess
import tracemalloc
import zlib
from pathlib import Path

import pytest

from etdeploy.errors import UsageError
from etdeploy.sizecheck.compress import (
    GZIP_FRAMING_BYTES,
    deflate_size,
    gzip_size,
    measure,
)
from tests.support.programs import BuiltPrograms


def _gzip(path: Path, level: int) -> int:
    # Read from stdin so gzip writes no file name into its header.
    with path.open("rb") as fh:
        done = subprocess.run(
            ["gzip", f"-{level}", "-c"], stdin=fh, capture_output=True, check=True, timeout=300
        )
    return len(done.stdout)


def test_level6_estimate_is_within_half_a_percent_of_gzip_on_float_weights(
    programs: BuiltPrograms,
) -> None:
    path = programs.weights
    assert path.stat().st_size > 4_000_000
    reference = _gzip(path, 6)
    # Small chunks, so there are many boundaries to get wrong.
    estimate = gzip_size(path, 6, chunk_bytes=256 * 1024)
    assert abs(estimate - reference) / reference < 0.005
    # gzip's buffers behave like zlib memLevel 9; at that setting only the chunking differs.
    exact = gzip_size(path, 6, chunk_bytes=256 * 1024, mem_level=9)
    assert abs(exact - reference) / reference < 0.0005
    # Float weights barely compress: the estimate must not pretend otherwise.
    assert 0.8 < estimate / path.stat().st_size < 1.0


def test_level6_estimate_is_within_half_a_percent_of_gzip_on_real_pte_files(
    programs: BuiltPrograms,
) -> None:
    for path in (programs.xnnpack, programs.portable):
        reference = _gzip(path, 6)
        estimate = measure(path, levels=(6,), chunk_bytes=64 * 1024).gzip_bytes(6)
        assert abs(estimate - reference) / reference < 0.005


def test_level9_is_measured_in_the_same_pass(programs: BuiltPrograms) -> None:
    m = measure(programs.portable, levels=(6, 9))
    assert set(m.deflate_bytes) == {6, 9}
    reference9 = _gzip(programs.portable, 9)
    assert abs(m.gzip_bytes(9) - reference9) / reference9 < 0.005
    assert m.gzip_bytes(9) <= m.gzip_bytes(6)


def test_chunking_matches_one_stream_on_structured_data(tmp_path: Path) -> None:
    # Text-like data with long-range repeats across chunk boundaries: priming each chunk
    # with the previous 32 KiB keeps the matches a single stream would find.
    line = b"".join(b"tensor %06d: float32[%d, %d]\n" % (i, i % 97, i % 13) for i in range(60000))
    path = tmp_path / "text.bin"
    path.write_bytes(line)
    single = deflate_size(line, 6) + GZIP_FRAMING_BYTES
    chunked = gzip_size(path, 6, chunk_bytes=64 * 1024)
    assert abs(chunked - single) / single < 0.005
    # Without the 32 KiB prefix the loss would be visible: compare with naive chunks.
    naive = sum(
        len(zlib.compress(line[i : i + 64 * 1024], 6, -15)) for i in range(0, len(line), 65536)
    )
    assert naive > chunked - GZIP_FRAMING_BYTES


def test_parts_sum_to_the_whole_and_are_measured_apart(programs: BuiltPrograms) -> None:
    path = programs.portable
    size = path.stat().st_size
    cuts = [8, 40, 3000, size // 2]
    m = measure(path, levels=(6,), boundaries=cuts)
    assert m.part_bounds[0][0] == 0 and m.part_bounds[-1][1] == size
    assert [b for b, _ in m.part_bounds[1:]] == sorted(cuts)
    assert sum(p[6] for p in m.part_deflate_bytes) == m.deflate_bytes[6]
    whole = measure(path, levels=(6,))
    # Cutting costs a few bytes per cut (a final block each), never much.
    assert abs(m.deflate_bytes[6] - whole.deflate_bytes[6]) < 50 * len(cuts)


def test_memory_stays_bounded_by_the_chunks_in_flight(tmp_path: Path) -> None:
    path = tmp_path / "big.bin"
    chunk = 1024 * 1024
    with path.open("wb") as fh:
        for _ in range(48):
            fh.write(os.urandom(chunk))
    tracemalloc.start()
    try:
        m = measure(path, levels=(6,), chunk_bytes=chunk, workers=2, max_in_flight=3)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert m.raw_bytes == 48 * chunk and m.chunks == 48
    # 3 chunks in flight, one being read, plus zlib's state and output slices: a few chunks,
    # far below the 48 MiB a whole-file read would take.
    assert peak < (3 + 3) * chunk


def test_empty_file_is_one_empty_gzip_member(tmp_path: Path) -> None:
    empty = tmp_path / "empty.bin"
    empty.write_bytes(b"")
    assert gzip_size(empty, 6) == _gzip(empty, 6)


def test_bad_arguments_and_paths_are_usage_errors(tmp_path: Path) -> None:
    f = tmp_path / "f.bin"
    f.write_bytes(b"x" * 100)
    with pytest.raises(UsageError, match=r"levels must be 0\.\.9"):
        measure(f, levels=(11,))
    with pytest.raises(UsageError, match="below deflate's 32 KiB window"):
        measure(f, chunk_bytes=1000)
    with pytest.raises(UsageError, match="is a directory"):
        measure(tmp_path)
