"""Backends that cannot lower on this kind of machine, with what they need."""

from __future__ import annotations

from etdeploy.builder.backends import Backend


def _never() -> list[object]:
    raise AssertionError("unavailable backend lowered")


BACKENDS = [
    Backend(
        "qnn",
        "QnnBackend",
        _never,
        unavailable="backend 'qnn' needs the Qualcomm AI Engine Direct (QNN) SDK, which is not installed",
        unavailable_hint="install the QNN SDK and set QNN_SDK_ROOT, or use --backend xnnpack",
    ),
    Backend(
        "mps",
        "MPSBackend",
        _never,
        unavailable="backend 'mps' lowers only on macOS with Metal (an Apple Silicon Mac)",
        unavailable_hint="build on a Mac, or use --backend coreml for Apple devices",
    ),
]
