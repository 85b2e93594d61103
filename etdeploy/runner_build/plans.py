"""What to build for an ABI: the host, NDK and arm64 plans, the kernel libraries
and backends a runner registers, and the cache key of each choice."""

from __future__ import annotations

import dataclasses
import hashlib
import os
import platform
import re
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from etdeploy.errors import UsageError
from etdeploy.runner_build.runner_bundle import ABIS, KIND_ARM64, KIND_HOST, KIND_NDK
from etdeploy.runner_build.toolchain import (
    compiler_identity,
    executorch_package_dir,
    executorch_version,
    harness_dir,
    host_abi,
)

if TYPE_CHECKING:
    pass


# Android API level the runner targets: 26 (Android 8.0) has every libc call
# the runner makes; ExecuTorch's own Android build uses the NDK default or newer.
ANDROID_PLATFORM = "android-26"

# --- what to build -------------------------------------------------------------------


@dataclass(frozen=True)
class Plan:
    abi: str
    # Extra -D settings and the compiler the cache key names.
    cmake_defines: tuple[str, ...]
    compiler: str
    environment_notes: tuple[str, ...]
    kind: str = KIND_HOST
    # "wheel" (the executorch wheel's CMake package) or "source" (a source install).
    package_kind: str = "wheel"
    kernels: tuple[str, ...] = ()
    backends: tuple[str, ...] = ("xnnpack",)


def plan_for(abi: str) -> Plan:
    """ "host" is this machine (glibc Linux, macOS); x86_64 and arm64-v8a are
    Android ABIs, built with the NDK against bionic: a host binary does not run
    on an Android x86_64 emulator even though the CPU matches. arm64-v8a without
    an NDK build configured, and aarch64 always, is the self-contained arm64
    bundle, which runs on Android and arm64 Linux alike."""
    if abi not in ABIS:
        raise UsageError(f"unknown runner ABI {abi!r}", f"use one of: {', '.join(ABIS)}")
    if abi == "aarch64" or (abi == "arm64-v8a" and not ndk_configured()):
        return arm64_plan()
    if abi != "host":
        return android_plan(abi)
    host = host_abi()
    system = platform.system()
    package = executorch_package_dir()
    cxx = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++") or "c++"
    return Plan(
        abi=host if system == "Linux" else f"{system.lower()}-{host}",
        cmake_defines=(f"-DCMAKE_PREFIX_PATH={package}", f"-DCMAKE_CXX_COMPILER={cxx}"),
        compiler=compiler_identity([cxx]),
        environment_notes=(f"system={system}", f"executorch_package={package}"),
    )


def android_plan(abi: str) -> Plan:
    ndk = os.environ.get("ANDROID_NDK")
    prefix = os.environ.get("EXECUTORCH_ANDROID_PREFIX")
    readme = harness_dir() / "README.md"
    if not ndk or not prefix:
        missing = " and ".join(
            name
            for name, value in (("ANDROID_NDK", ndk), ("EXECUTORCH_ANDROID_PREFIX", prefix))
            if not value
        )
        raise UsageError(
            f"building the {abi} runner needs ANDROID_NDK (the NDK directory) and "
            f"EXECUTORCH_ANDROID_PREFIX (an ExecuTorch built and installed for {abi}); "
            f"{missing} not set",
            f"see {readme} (android_harness/build_android.sh builds both), or pass "
            "--runner PATH to use an executor_runner you built",
        )
    toolchain = Path(ndk) / "build" / "cmake" / "android.toolchain.cmake"
    if not toolchain.is_file():
        raise UsageError(
            f"ANDROID_NDK={ndk} has no build/cmake/android.toolchain.cmake",
            "point ANDROID_NDK at an unpacked NDK (r26 or newer)",
        )
    if not any(Path(prefix).glob("lib*/cmake/**/*onfig.cmake")):
        raise UsageError(
            f"EXECUTORCH_ANDROID_PREFIX={prefix} holds no ExecuTorch CMake package",
            f"install an ExecuTorch source build there (cmake --install); see {readme}",
        )
    revision = "unknown"
    properties = Path(ndk) / "source.properties"
    if properties.is_file():
        match = re.search(r"Pkg\.Revision\s*=\s*(\S+)", properties.read_text())
        if match:
            revision = match.group(1)
    return Plan(
        abi=abi,
        cmake_defines=(
            f"-DCMAKE_TOOLCHAIN_FILE={toolchain}",
            f"-DANDROID_ABI={abi}",
            f"-DANDROID_PLATFORM={ANDROID_PLATFORM}",
            f"-DCMAKE_PREFIX_PATH={prefix}",
            # The NDK toolchain confines find_package to its sysroot otherwise.
            "-DCMAKE_FIND_ROOT_PATH_MODE_PACKAGE=BOTH",
        ),
        compiler=f"android-ndk {revision}",
        environment_notes=(f"ndk={ndk}", f"executorch_prefix={prefix}"),
        package_kind="source",
        kind=KIND_NDK,
    )


def ndk_configured() -> bool:
    """Whether an NDK build is set up (both variables): then it is preferred for Android."""
    return bool(os.environ.get("ANDROID_NDK") and os.environ.get("EXECUTORCH_ANDROID_PREFIX"))


def arm64_plan() -> Plan:
    # The wheel is fetched at build time; its version and this Python's tag name
    # it (a PyPI file never changes), so the key needs no download.
    from etdeploy.runner_build import arm64 as runner_arm64

    cxx = runner_arm64.cross_compiler()
    return Plan(
        abi=runner_arm64.ABI,
        cmake_defines=runner_arm64.toolchain_defines(harness_dir()),
        compiler=runner_arm64.compiler_identity(cxx),
        environment_notes=(f"kind={KIND_ARM64}", f"wheel={runner_arm64.python_tag()}-aarch64"),
        kind=KIND_ARM64,
    )


def source_files(harness: Path) -> list[Path]:
    # What compiles into the binary; README and the Android script do not.
    suffixes = {".cpp", ".h", ".hpp", ".cc", ".cmake"}
    files = [p for p in harness.rglob("*") if p.is_file() and p.suffix in suffixes]
    files.append(harness / "CMakeLists.txt")
    return sorted(set(files))


# --- what the runner registers (`--kernels`, `--backends`) ------------------------------

# Kernel libraries by name (anything else in `kernels` is a library's path); the
# optimized and quantized kernels are always linked, so "quantized" is accepted
# for a runner that must surely carry them. "llm": ExecuTorch's LLM custom ops
# (llama::custom_sdpa, update_cache, ...), which only a source install links.
KERNEL_LIBRARIES = ("quantized", "llm")
DEFAULT_BACKENDS = ("xnnpack",)
BACKENDS = ("xnnpack", "openvino", "qnn", "coreml", "mlx", "vulkan")
_KERNEL_SUFFIXES = (".so", ".a", ".dylib")


def with_components(plan: Plan, kernels: Sequence[str], backends: Sequence[str]) -> Plan:
    """The plan plus CMake's ETDEPLOY_KERNELS and ETDEPLOY_BACKENDS. A library
    given by path is keyed by its bytes, so a rebuilt kernel library rebuilds
    the runner."""
    chosen: list[str] = []
    notes: list[str] = []
    for entry in kernels:
        if entry in KERNEL_LIBRARIES:
            if entry == "llm" and plan.package_kind == "wheel":
                # executorch 1.5.1 wheel, read 2026-12-03: the LLM custom ops ship
                # only in extension/llm/custom_ops/libcustom_ops_aot_lib.so, which
                # needs libtorch and the Python extension _C (NEEDED entries).
                raise UsageError(
                    "the installed executorch wheel has no LLM custom ops a runner can "
                    "link: it ships them only as the export-time plugin "
                    "libcustom_ops_aot_lib.so, which needs libtorch and Python",
                    "build ExecuTorch from source with -DEXECUTORCH_BUILD_KERNELS_LLM=ON "
                    "(its custom_ops library), then pass that library: --kernels PATH; an "
                    "Android or arm64 source install takes --kernels llm",
                )
            chosen.append(entry)
            continue
        path = Path(entry).expanduser().resolve()
        if not path.is_file() or not path.name.endswith(_KERNEL_SUFFIXES):
            raise UsageError(
                f"--kernels {entry}: not a kernel library name or a library file",
                f"name one of {', '.join(KERNEL_LIBRARIES)}, or give the path of a .so, .dylib "
                "or .a built against the same ExecuTorch",
            )
        chosen.append(str(path))
        notes.append(f"kernels:{path.name}={hashlib.sha256(path.read_bytes()).hexdigest()}")
    unknown = [b for b in backends if b not in BACKENDS]
    if unknown:
        raise UsageError(
            f"unknown backend(s) {', '.join(unknown)}", f"use any of: {', '.join(BACKENDS)}"
        )
    chosen = list(dict.fromkeys(chosen))
    wanted = list(dict.fromkeys(backends))
    return dataclasses.replace(
        plan,
        cmake_defines=(
            *plan.cmake_defines,
            f"-DETDEPLOY_KERNELS={';'.join(chosen)}",
            f"-DETDEPLOY_BACKENDS={';'.join(wanted)}",
            f"-DETDEPLOY_BUNDLE_ABI={plan.abi}",
            # The kind the bundle records in bundle.json, so --describe says the same.
            f"-DETDEPLOY_BUNDLE_KIND={plan.kind}",
        ),
        environment_notes=(
            *plan.environment_notes,
            f"kernels={','.join(chosen)}",
            f"backends={','.join(wanted)}",
            *notes,
        ),
        kernels=tuple(chosen),
        backends=tuple(wanted),
    )


def bundle_key(
    abi: str, *, kernels: Sequence[str] = (), backends: Sequence[str] = DEFAULT_BACKENDS
) -> str:
    """The cache key of the bundle `ensure_runner(abi, ...)` would build."""
    plan = with_components(plan_for(abi), kernels, backends)
    return plan_key(plan, harness_dir())


def plan_key(plan: Plan, harness: Path) -> str:
    digest = hashlib.sha256()
    for path in source_files(harness):
        digest.update(path.relative_to(harness).as_posix().encode())
        digest.update(b"\0")
        digest.update(path.read_bytes())
        digest.update(b"\0")
    for part in (
        f"executorch={executorch_version()}",
        f"compiler={plan.compiler}",
        f"abi={plan.abi}",
        *plan.environment_notes,
    ):
        digest.update(part.encode())
        digest.update(b"\0")
    return digest.hexdigest()
