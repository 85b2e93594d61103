"""Backends: one file each, registered here. A backend turns into the partitioner
list handed to to_edge_transform_and_lower; `portable` hands none."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from etdeploy.errors import UsageError


@dataclass(frozen=True)
class Backend:
    name: str
    # The delegate id the runtime sees in the .pte (empty for portable).
    backend_id: str
    partitioners: Callable[[], list[object]]
    # Why it cannot lower here, or None when it can.
    unavailable: str | None = None
    unavailable_hint: str | None = None


def _registry() -> dict[str, Backend]:
    from etdeploy.builder.backends import coreml, portable, unavailable, vulkan, xnnpack

    backends = [
        xnnpack.BACKEND,
        portable.BACKEND,
        coreml.BACKEND,
        vulkan.BACKEND,
        *unavailable.BACKENDS,
    ]
    return {b.name: b for b in backends}


def names() -> list[str]:
    return list(_registry())


def get_backend(name: str) -> Backend:
    registry = _registry()
    backend = registry.get(name.lower())
    if backend is None:
        raise UsageError(
            f"unknown backend {name!r}",
            f"choose one of: {', '.join(b for b, v in registry.items() if not v.unavailable)}",
        )
    if backend.unavailable:
        raise UsageError(backend.unavailable, backend.unavailable_hint)
    return backend
