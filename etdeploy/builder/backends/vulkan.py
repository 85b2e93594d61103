"""Vulkan: Android GPUs. Lowers here; runs only with the Vulkan delegate linked."""

from __future__ import annotations

from etdeploy.builder.backends import Backend


def _partitioners() -> list[object]:
    from executorch.backends.vulkan.partitioner.vulkan_partitioner import VulkanPartitioner

    return [VulkanPartitioner()]


BACKEND = Backend("vulkan", "VulkanBackend", _partitioners)
