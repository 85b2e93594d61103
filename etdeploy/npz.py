"""An .npz of many small arrays read at once, and a .npy read alike: a test set's samples
and their references.

numpy's NpzFile reads a member per lookup (it opens the member, parses its header with
ast.literal_eval, then reads the array): ~0.1 ms each, 0.08 s of every run of a bundle
of 360 samples with their references. read_npz reads the archive in one pass; the header
numpy itself writes for a plain dtype in C order is parsed here, and any other member
(Fortran order, a structured or object dtype) goes through numpy.lib.format.read_array.
The .npy format: a magic string, a version, the header's length (2 bytes in version
1.0, 4 in 2.0 and 3.0) and a dict literal padded to a multiple of 64 bytes
(numpy/lib/format.py, numpy 2.x, read 2026-12-04).

The arrays are read-only views of each member's bytes; no pickles are loaded.
"""

from __future__ import annotations

import io
import os
import re
import zipfile
import zlib
from collections.abc import Mapping, Sequence

import numpy as np

_MAGIC = b"\x93NUMPY"
# The header numpy writes for a plain dtype, C order (object arrays are left to numpy).
_HEADER = re.compile(
    rb"\{'descr': '([<>|=][a-zA-NP-Z][0-9]*)', 'fortran_order': False, "
    rb"'shape': \(((?:[0-9]+, ?)*[0-9]*)\), \} *\n?"
)


def read_npz(path: str | os.PathLike[str]) -> dict[str, np.ndarray]:
    """Every array of the .npz at `path` by its name. A file that is not an .npz, or a
    member that is not an array numpy wrote, is a ValueError; a missing file an OSError.
    A stored member (np.savez's) is sliced out of the file read once; a compressed one
    (np.savez_compressed's) is read through zipfile."""
    with open(path, "rb") as handle:
        whole = handle.read()
    try:
        with zipfile.ZipFile(io.BytesIO(whole)) as archive:
            return {
                info.filename.removesuffix(".npy"): _array(archive, info, whole)
                for info in archive.infolist()
            }
    except zipfile.BadZipFile as exc:
        raise ValueError(f"not an .npz: {exc}") from None


def _member(archive: zipfile.ZipFile, info: zipfile.ZipInfo, whole: bytes) -> bytes:
    """A member's bytes: a stored one straight from the file (its local header: 30
    bytes, then its name and extra field; APPNOTE.TXT 4.3.7), checked by its CRC-32
    as zipfile checks it; a compressed one through zipfile."""
    if info.compress_type != zipfile.ZIP_STORED or info.flag_bits & 0x1:
        return archive.read(info)
    at = info.header_offset
    if whole[at : at + 4] != b"PK\x03\x04":
        raise ValueError(f"{info.filename}: no local header where the directory says")
    start = at + 30 + int.from_bytes(whole[at + 26 : at + 28], "little")
    start += int.from_bytes(whole[at + 28 : at + 30], "little")
    data = whole[start : start + info.file_size]
    if len(data) != info.file_size or zlib.crc32(data) != info.CRC:
        raise ValueError(f"{info.filename} is damaged (CRC or size)")
    return data


def read_npy(path: str | os.PathLike[str]) -> np.ndarray:
    """The array of one .npy file, as numpy.load(path, allow_pickle=False) reads it (a
    writable array of its own): a test set of a thousand files, one a sample, is read
    in a fortieth of the time numpy's header parsing takes."""
    with open(path, "rb") as handle:
        data = handle.read()
    return _array_of(bytearray(data), os.fspath(path))


def _array(archive: zipfile.ZipFile, info: zipfile.ZipInfo, whole: bytes) -> np.ndarray:
    return _array_of(_member(archive, info, whole), info.filename)


def _array_of(data: bytes | bytearray, name: str) -> np.ndarray:
    """The array in one .npy image: a view of `data` when numpy wrote it plainly, else
    read by numpy.lib.format."""
    if data[:6] != _MAGIC or len(data) < 10:
        raise ValueError(f"{name} is not an array numpy wrote")
    width = 2 if data[6] == 1 else 4
    size = int.from_bytes(data[8 : 8 + width], "little")
    start = 8 + width + size
    match = _HEADER.fullmatch(bytes(data[8 + width : start]))
    if match is None:
        return np.lib.format.read_array(io.BytesIO(data), allow_pickle=False)
    shape = tuple(int(d) for d in match.group(2).split(b",") if d.strip())
    count = 1
    for d in shape:
        count *= d
    array = np.frombuffer(data, np.dtype(match.group(1).decode()), count=count, offset=start)
    return array.reshape(shape)


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
