"""Tables of arrays in .npz files (a test set's samples and their references), and the
one call that reads an .npz or a .npy: numpy.load.

etdeploy had its own .npy reader here, for speed; measured against numpy.load
(2026-12-05, issue 36), it saved under 0.5 ms on a job bundle's .npz files (a few
stacked members each) and 0.02-0.09 s on a test set of a thousand .npy files: not a
difference anyone feels, so numpy reads them. No pickles are loaded.
"""

from __future__ import annotations

import os
import zipfile
from collections.abc import Mapping, Sequence

import numpy as np


def read_npz(path: str | os.PathLike[str]) -> dict[str, np.ndarray]:
    """Every array of the .npz at `path` by its name. A file that is not an .npz, or a
    member that is not an array numpy wrote, is a ValueError; a missing file an OSError."""
    try:
        loaded = np.load(path, allow_pickle=False)
    except (zipfile.BadZipFile, EOFError) as exc:
        raise ValueError(f"not an .npz: {exc}") from None
    if not isinstance(loaded, np.lib.npyio.NpzFile):
        raise ValueError(f"{os.fspath(path)} is not an .npz")
    with loaded as archive:
        return {name: archive[name] for name in archive.files}


def read_npy(path: str | os.PathLike[str]) -> np.ndarray:
    """The array of one .npy file (numpy.load, no pickles)."""
    array = np.load(path, allow_pickle=False)
    if not isinstance(array, np.ndarray):
        array.close()
        raise ValueError(f"{os.fspath(path)} is not an .npy")
    return array


# -- tables: rows of arrays, one row a sample ------------------------------------------
#
# A static model's rows all hold the same arrays in dtype and shape, so array K of every
# row is kept as one array <letter>K of shape (samples, ...): a thousand samples are a
# few .npz members, not a thousand (each costs its zip directory entry and .npy header).
# Rows that differ (a dynamic dim) keep each sample's arrays as s<S>_<letter>K, which is
# also how job bundles of schema /1 and earlier reference caches stored every table;
# both are read.

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
            f"{letter}{k}": np.stack([row[k] for row in rows])  # a C-order copy
            for k in range(len(first))
        }
    return {
        # asarray, not ascontiguousarray: that makes a scalar output a 1-element array.
        f"s{s}_{letter}{k}": np.asarray(array, order="C")
        for s, row in enumerate(rows)
        for k, array in enumerate(row)
    }


def table_rows(
    arrays: Mapping[str, np.ndarray], letter: str, samples: int, width: int | None
) -> tuple[tuple[np.ndarray, ...], ...]:
    """The rows the members hold; `width` arrays a row (None: as many as there are). A
    missing member is a KeyError, a stacked array of the wrong length a ValueError."""
    if f"s0_{letter}0" not in arrays and f"{letter}0" in arrays:
        count = width if width is not None else sum(1 for k in arrays if _is_member(k, letter))
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
        if _is_member(rest, letter):
            counts[sample] = counts.get(sample, 0) + 1
    return tuple(
        tuple(
            arrays[f"s{s}_{letter}{k}"]
            for k in range(width if width is not None else counts.get(f"s{s}", 0))
        )
        for s in range(samples)
    )


def _is_member(key: str, letter: str) -> bool:
    """`key` is <letter><K>: one of a table's arrays (not a count beside them)."""
    return key.startswith(letter) and key[len(letter) :].isdigit()
