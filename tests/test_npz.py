"""etdeploy.npz: tables of arrays kept as .npz members, read back with numpy.load (no
reader of etdeploy's own; issue 36), and what is not an array refused."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from etdeploy.npz import read_npy, read_npz, table_arrays, table_rows


def test_a_table_written_and_read_back_is_the_same_rows(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    rows = [(rng.random((2, 3), dtype=np.float32), np.int64(i)) for i in range(5)]
    np.savez(tmp_path / "t.npz", **table_arrays([tuple(map(np.asarray, r)) for r in rows], "x"))
    back = table_rows(read_npz(tmp_path / "t.npz"), "x", 5, None)
    for row, read in zip(rows, back, strict=True):
        assert all(np.array_equal(a, b) for a, b in zip(row, read, strict=True))


def test_an_npy_reads_as_numpy_reads_it(tmp_path: Path) -> None:
    array = np.arange(12, dtype=np.float32).reshape(3, 4).T  # Fortran order on disk
    np.save(tmp_path / "a.npy", array)
    assert np.array_equal(read_npy(tmp_path / "a.npy"), array)


@pytest.mark.parametrize("content", [b"not an archive at all", b"PK\x03\x04broken"])
def test_what_is_not_an_npz_is_a_value_error(tmp_path: Path, content: bytes) -> None:
    (tmp_path / "bad.npz").write_bytes(content)
    with pytest.raises(ValueError):
        read_npz(tmp_path / "bad.npz")


def test_an_npy_is_not_an_npz_nor_an_npz_an_npy(tmp_path: Path) -> None:
    np.save(tmp_path / "a.npy", np.zeros(3))
    np.savez(tmp_path / "b.npz", a=np.zeros(3))
    with pytest.raises(ValueError):
        read_npz(tmp_path / "a.npy")
    with pytest.raises(ValueError):
        read_npy(tmp_path / "b.npz")
