"""A bundle's tables (samples, references): rows of arrays, one row a sample, as .npz.

A static model's rows all hold the same arrays in dtype and shape, so array K of
every row is stored as one array `<letter>K` of shape (samples, ...): a bundle of a
thousand samples is read as a few .npz members, not a thousand (each member costs its
zip directory entry and its .npy header). Rows that differ (a dynamic dim) keep each
sample's arrays as `s<S>_<letter>K`, which is also how bundles of schema /1 stored
every table; both are read.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

Rows = Sequence[Sequence[np.ndarray]]


def table_arrays(rows: Rows, letter: str) -> dict[str, np.ndarray]:
    """The .npz members for `rows`: stacked when every row is alike, else one a sample's array."""
    first = rows[0] if rows else ()
    alike = bool(rows) and all(
        len(row) == len(first)
        and all(a.dtype == b.dtype and a.shape == b.shape for a, b in zip(row, first, strict=True))
        for row in rows
    )
    if alike:
        return {
            f"{letter}{k}": np.stack([np.ascontiguousarray(row[k]) for row in rows])
            for k in range(len(first))
        }
    return {
        f"s{s}_{letter}{k}": np.ascontiguousarray(array)
        for s, row in enumerate(rows)
        for k, array in enumerate(row)
    }


def table_rows(
    arrays: Mapping[str, np.ndarray], letter: str, samples: int, width: int | None
) -> tuple[tuple[np.ndarray, ...], ...]:
    """The rows the members hold; `width` arrays a row (None: as many as there are). A
    missing member is a KeyError, a stacked array of the wrong length a ValueError."""
    if f"s0_{letter}0" not in arrays and f"{letter}0" in arrays:
        count = width if width is not None else sum(1 for k in arrays if k.startswith(letter))
        stacked = [arrays[f"{letter}{k}"] for k in range(count)]
        for k, array in enumerate(stacked):
            if len(array) != samples:
                raise ValueError(
                    f"{letter}{k} holds {len(array)} samples, the bundle lists {samples}"
                )
        # array[s, ...]: a view, and an array even where a sample's value is a scalar.
        return tuple(tuple(array[s, ...] for array in stacked) for s in range(samples))
    counts: dict[str, int] = {}
    for key in arrays:
        sample, _, rest = key.partition("_")
        if rest.startswith(letter):
            counts[sample] = counts.get(sample, 0) + 1
    return tuple(
        tuple(
            arrays[f"s{s}_{letter}{k}"]
            for k in range(width if width is not None else counts.get(f"s{s}", 0))
        )
        for s in range(samples)
    )
