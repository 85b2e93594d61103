"""The reference cache (etdeploy.pipeline.references): what is written is what a
later run reads, whether every sample's outputs stack into one array an output or
each sample's differ in shape; a damaged entry is computed again."""

from __future__ import annotations

import numpy as np
import pytest

from etdeploy.paths import cache_dir
from etdeploy.pipeline.references import Table, _cached


def _same(a: Table, b: Table) -> bool:
    return len(a) == len(b) and all(
        len(x) == len(y)
        and all(
            u.dtype == v.dtype and u.shape == v.shape and np.array_equal(u, v)
            for u, v in zip(x, y, strict=True)
        )
        for x, y in zip(a, b, strict=True)
    )


STATIC = [[np.full((1, 10), i, np.float32), np.array(i, np.int64)] for i in range(300)]
DYNAMIC = [[np.arange(i + 1, dtype=np.float32)] for i in range(5)]


@pytest.mark.parametrize("table", [STATIC, DYNAMIC], ids=["same-shapes", "shapes-differ"])
def test_a_cached_table_reads_back_as_written(table: Table, fresh_cache: object) -> None:
    hits = [i == 0 for i in range(len(table))]
    computed: list[int] = []

    def compute() -> tuple[Table, list[bool]]:
        computed.append(1)
        return table, hits

    first, _ = _cached("float-test", compute, use_cache=True)
    again, again_hits = _cached("float-test", compute, use_cache=True)
    assert computed == [1]
    assert _same(first, table) and _same(again, table)
    assert again_hits == hits
    assert all(isinstance(v, np.ndarray) for row in again for v in row)


def test_a_damaged_table_is_computed_again(fresh_cache: object) -> None:
    computed: list[int] = []

    def compute() -> tuple[Table, list[bool]]:
        computed.append(1)
        return STATIC, [False] * len(STATIC)

    _cached("float-damaged", compute, use_cache=True)
    path = cache_dir("references") / "float-damaged.npz"
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    again, _ = _cached("float-damaged", compute, use_cache=True)
    assert computed == [1, 1]
    assert _same(again, STATIC)
