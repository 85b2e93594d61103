"""Program-data separation: a .pte whose weights live in an external data file (.ptd),
read without torch.

A program built with `--external-weights` names its weights instead of holding them: a
tensor the portable kernels read is an external tensor (its fully qualified name), an
XNNPACK constant is a named-data key (the sha256 of its bytes). The runtime resolves those
names against the .ptd it is given (`--data_path`) when the method loads; a missing one is
an error there, or, for XNNPACK in executorch 1.5.1, a crash of the runner. So a run checks
the pair here first, before anything is pushed.

The .ptd is a FlatTensor flatbuffer (extension/flat_tensor/serialize/flat_tensor.fbs in the
executorch 1.5.1 wheel, read 2026-12-03): file identifier "FT01"; root table FlatTensor
{version: uint32, segments: [DataSegment], named_data: [NamedData]}; NamedData {key: string,
segment_index: uint32, tensor_layout}. Only the keys are read, through the mapped file, so
a multi-GB .ptd costs what its table of names does.
"""

from __future__ import annotations

import mmap
import struct
from pathlib import Path

from etdeploy.errors import InputError
from etdeploy.files import check_readable_file
from etdeploy.pte.layout import PteLayout

FILE_IDENTIFIER = b"FT01"
# Field slots in a table's vtable: 4 + 2 * field id.
_FLAT_TENSOR_NAMED_DATA = 8  # FlatTensor.named_data, field 2
_NAMED_DATA_KEY = 4  # NamedData.key, field 0


def program_data_keys(layout: PteLayout) -> frozenset[str]:
    """The names a program needs from external data: its external tensors' names and the
    named-data keys its delegates refer to that the .pte does not hold."""
    names = {t.name for t in layout.external_tensors if t.name}
    keys = {c.key for c in layout.delegate_constants if c.location == "missing" and c.key}
    return frozenset(names | keys)


def read_data_keys(path: Path) -> frozenset[str]:
    """The keys of the .ptd at `path`; InputError (exit 2) if it is not one."""
    size = check_readable_file(path).st_size
    if size < 8:
        raise _not_data(path, f"{size} bytes")
    with open(path, "rb") as fh, mmap.mmap(fh.fileno(), size, access=mmap.ACCESS_READ) as buf:
        if buf[4:8] != FILE_IDENTIFIER:
            ident = bytes(buf[4:8]).decode("ascii", errors="replace")
            raise _not_data(path, f"file identifier {ident!r}")
        try:
            return frozenset(_keys(buf))
        except (struct.error, IndexError, ValueError, UnicodeDecodeError) as exc:
            raise InputError(
                f"{path}: a truncated or corrupt .ptd ({type(exc).__name__})",
                "the file was cut short or damaged; copy it again from the build",
            ) from None


def _keys(buf: mmap.mmap) -> list[str]:
    def u32(at: int) -> int:
        if at < 0 or at + 4 > len(buf):
            raise IndexError("offset outside the file")
        return int.from_bytes(buf[at : at + 4], "little")

    def field(table: int, slot: int) -> int:
        """Absolute position of a table's field, 0 when absent."""
        vtable = table - struct.unpack("<i", buf[table : table + 4])[0]
        if vtable < 0 or vtable + 4 > len(buf):
            raise IndexError("vtable outside the file")
        vtable_size = int.from_bytes(buf[vtable : vtable + 2], "little")
        if slot >= vtable_size:
            return 0
        offset = int.from_bytes(buf[vtable + slot : vtable + slot + 2], "little")
        return table + offset if offset else 0

    root = u32(0)
    at = field(root, _FLAT_TENSOR_NAMED_DATA)
    if not at:
        return []
    vector = at + u32(at)
    keys = []
    for i in range(u32(vector)):
        element = vector + 4 + 4 * i
        entry = element + u32(element)
        key_at = field(entry, _NAMED_DATA_KEY)
        if not key_at:
            continue
        string = key_at + u32(key_at)
        length = u32(string)
        if string + 4 + length > len(buf):
            raise IndexError("key outside the file")
        keys.append(bytes(buf[string + 4 : string + 4 + length]).decode("utf-8"))
    return keys


def _not_data(path: Path, what: str) -> InputError:
    return InputError(
        f"{path} is not an ExecuTorch data file (.ptd): {what}, want {FILE_IDENTIFIER.decode()}",
        "give --data the .ptd written beside the .pte by `etdeploy build --external-weights`",
    )


def check_pair(pte: Path, layout: PteLayout, data: Path | None) -> None:
    """Raise InputError when the program needs external data that `data` does not hold
    (or none is given). A .ptd given to a program that keeps its weights is not an error:
    the caller drops it with a warning."""
    needed = program_data_keys(layout)
    if not needed:
        return
    if data is None:
        raise InputError(
            f"{pte.name} keeps {len(needed)} weight(s) in external data (.ptd) and none was given",
            f"give --data with the .ptd it was built with (e.g. {pte.with_suffix('.ptd')})",
        )
    missing = needed - read_data_keys(data)
    if missing:
        raise InputError(
            f"{data.name} lacks {len(missing)} of the {len(needed)} weight(s) {pte.name} needs "
            f"(e.g. {sorted(missing)[0][:64]}): it belongs to another build",
            "give --data the .ptd built together with this .pte",
        )
