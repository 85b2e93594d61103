"""XNNPACK: Arm and x86 CPUs; the portable default."""

from __future__ import annotations

from typing import Any

from etdeploy.builder.backends import Backend


def _partitioners() -> list[Any]:
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner

    return [XnnpackPartitioner()]


BACKEND = Backend("xnnpack", "XnnpackBackend", _partitioners)
