"""Which bundle a device gets, from what it reports."""

from __future__ import annotations

import platform
from dataclasses import dataclass
from typing import TYPE_CHECKING

from etdeploy.devices.registry import split_abi
from etdeploy.errors import UsageError
from etdeploy.runner_build.plans import ndk_configured
from etdeploy.runner_build.runner_bundle import (
    KIND_ARM64,
    KIND_HOST,
    KIND_NDK,
    Progress,
    RunnerBundle,
)
from etdeploy.runner_build.runner_cache import ensure_runner
from etdeploy.runner_build.toolchain import host_abi
from etdeploy.runner_build.x86_64 import KIND as KIND_X86_64

if TYPE_CHECKING:
    from etdeploy.devices.base import DeviceInfo

# --- which bundle a device gets ------------------------------------------------------------


@dataclass(frozen=True)
class RunnerChoice:
    """The bundle etdeploy builds for a device: `ensure_runner(abi)`, of `kind`."""

    abi: str
    kind: str
    reason: str


def runner_choice(info: DeviceInfo) -> RunnerChoice:
    """Which bundle a device gets, decided from what it reports, without building.

    This machine, or one like it over SSH: the host build. An arm64 or x86_64
    Android phone or emulator: the NDK build when ANDROID_NDK and
    EXECUTORCH_ANDROID_PREFIX are set, else the self-contained arm64 bundle or the
    host build made self-contained (x86_64.py); another Android ABI: the NDK build. An arm64 Linux
    host (a Raspberry Pi, a Jetson, a Graviton machine): the arm64 bundle.
    Anything else is a UsageError saying how to bring a runner.
    """
    arch = split_abi(info.abi)[1]
    system = platform.system().lower()
    if info.os == "android":
        if arch == "arm64" and not ndk_configured():
            return RunnerChoice(
                "arm64-v8a", KIND_ARM64, "the arm64 bundle with its own glibc (no NDK build set up)"
            )
        if arch == "x86_64" and not ndk_configured():
            return RunnerChoice(
                "x86_64", KIND_X86_64, "the host build with its own glibc (no NDK build set up)"
            )
        return RunnerChoice(info.abi, KIND_NDK, "the Android NDK build")
    if info.os == system and arch == split_abi(host_abi())[1]:
        return RunnerChoice("host", KIND_HOST, f"the host build ({info.os} {host_abi()})")
    if info.os == "linux" and arch == "arm64":
        return RunnerChoice("aarch64", KIND_ARM64, "the arm64 bundle with its own glibc")
    raise UsageError(
        f"no runner for {info.name} ({info.os} {info.abi}); etdeploy builds runners for "
        f"this machine ({system} {host_abi()}), for arm64 Linux and Android, and, with "
        "the NDK, for other Android ABIs",
        "build the runner on that machine (see ios_harness/README.md for macOS and iOS) "
        'and pass it with --runner PATH or `runner = "PATH"` in its [devices] table',
    )


def runner_for_device(info: DeviceInfo, progress: Progress | None = None) -> RunnerBundle:
    """The bundle `runner_choice` names for the device, built if the cache lacks it."""
    # Here, not above: the build and its locks are imported by those who build.

    choice = runner_choice(info)
    if progress is not None:
        progress(f"runner for {info.name}: {choice.reason}")
    return ensure_runner(choice.abi, progress=progress)
