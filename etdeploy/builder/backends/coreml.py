"""Core ML: Apple's Neural Engine/GPU/CPU. Lowers on Linux (coremltools converts);
the resulting .pte runs only where the Core ML delegate is linked (Apple OSes)."""

from __future__ import annotations

from etdeploy.builder.backends import Backend


def _partitioners() -> list[object]:
    from executorch.backends.apple.coreml.partition import CoreMLPartitioner

    return [CoreMLPartitioner()]


BACKEND = Backend("coreml", "CoreMLBackend", _partitioners)
