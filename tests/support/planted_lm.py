"""Planted regressions in a real 8da4w language-model program.

XNNPACK keeps a 4-bit linear's weights and its per-group scales as separate entries of
the program's named data (executorch 1.5.1: the scales under a `scale_<sha256>` key,
bf16, one per group of each output row; backends/xnnpack/operators/node_visitor.py);
etdeploy.pte's reader gives their file offsets. Editing one scale is what a broken
conversion or a bad kernel would leave: the device then computes another program.
"""

from __future__ import annotations

from pathlib import Path

from etdeploy.pte import read_pte


def scale_entries(pte: Path) -> list[tuple[int, int]]:
    """(file offset, bytes) of every 4-bit linear's scales, in program order."""
    layout = read_pte(pte)
    return [
        (c.offset, c.nbytes)
        for c in layout.delegate_constants
        if c.key is not None and c.key.startswith("scale_") and c.offset is not None
    ]


def alter_one_group_scale(
    pte: Path, into: Path, *, entry: int = 0, factor_exponent: int = 4
) -> Path:
    """A copy of `pte` with one group's scale multiplied by 2**factor_exponent (XNNPACK
    refuses a negative scale when it loads the program): the largest scale of the `entry`-th 4-bit linear (the first
    layer's attention projection by default), so the damage starts in the first block."""
    offset, size = scale_entries(pte)[entry]
    data = bytearray(pte.read_bytes())
    words = [int.from_bytes(data[offset + i : offset + i + 2], "little") for i in range(0, size, 2)]
    # bf16: sign bit 15, exponent bits 7-14; scales are positive.
    at = max(range(len(words)), key=lambda i: words[i] & 0x7FFF)
    word = words[at]
    exponent = ((word >> 7) & 0xFF) + factor_exponent
    altered = word & ~(0xFF << 7) | (min(exponent, 0xFE) << 7)
    data[offset + 2 * at : offset + 2 * at + 2] = altered.to_bytes(2, "little")
    out = into / "scale-altered.pte"
    out.write_bytes(bytes(data))
    return out
