"""Planted regressions in a real int8 digits program: its classifier's int8 weights
edited in the XNNPACK payload, as a broken kernel or a bad conversion would leave
them. The copy keeps its build's manifest and quantized program beside it, so a run
judges it exactly as it would judge the build that produced it."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

from etdeploy.builder import quantized_program_path
from etdeploy.pte import read_pte


def _classifier_weights(pte: Path) -> tuple[int, int]:
    """Offset and size of the fully connected layer's [10, 512] int8 weights."""
    layout = read_pte(pte)
    weights = [c for c in layout.delegate_constants if c.dtype == "qcint8" and c.offset]
    fc = weights[-1]
    return fc.offset, fc.nbytes


def _written(pte: Path, data: bytes, into: Path, name: str) -> Path:
    broken = into / name
    broken.write_bytes(data)
    manifest = json.loads(Path(f"{pte}.json").read_text())
    manifest["sha256"] = hashlib.sha256(data).hexdigest()
    Path(f"{broken}.json").write_text(json.dumps(manifest))
    shutil.copyfile(quantized_program_path(pte), quantized_program_path(broken))
    return broken


def flip_one_int8_weight(pte: Path, into: Path) -> Path:
    """One classifier weight sign-flipped (-127 -> 127): a kernel that computes the
    wrong thing by a few quantization steps, invisible to an accuracy budget."""
    offset, size = _classifier_weights(pte)
    data = bytearray(pte.read_bytes())
    at = offset + bytes(data[offset : offset + size]).index(b"\x81")
    data[at] = 0x7F
    return _written(pte, bytes(data), into, "broken.pte")


def negate_a_class(pte: Path, into: Path, label: int) -> Path:
    """The classifier's weights for one class sign-flipped: that class's score turns
    against its own evidence, so its samples are lost and others are taken for it (a
    drop of about a third of the held-out digits for class 3)."""
    offset, size = _classifier_weights(pte)
    row = size // 10
    data = bytearray(pte.read_bytes())
    start = offset + label * row
    for at in range(start, start + row):
        value = data[at] - 256 if data[at] > 127 else data[at]
        data[at] = max(-127, min(127, -value)) & 0xFF
    return _written(pte, bytes(data), into, f"class{label}-negated.pte")
