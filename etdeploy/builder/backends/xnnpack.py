"""XNNPACK: Arm and x86 CPUs; the portable default."""

from __future__ import annotations

from etdeploy.builder.backends import Backend


def _partitioners() -> list[object]:
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner

    return [XnnpackPartitioner()]


BACKEND = Backend("xnnpack", "XnnpackBackend", _partitioners)
