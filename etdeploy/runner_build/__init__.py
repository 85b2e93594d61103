"""Building the C++ runner (android_harness/) into a cached, relocatable bundle.

A bundle is one directory: the runner executable and every shared library it
loads (found through RUNPATH $ORIGIN), so a device can take the directory as it
is. Its kind says how it was built (KINDS): for this machine, with the Android
NDK, or cross-compiled for arm64 Linux with its own glibc (arm64.py). Bundles
are cached under cache_dir("runners")/<abi>-<key>/, the key hashing everything
that changes the binary: the harness sources, the ExecuTorch version, the
compiler, the ABI and the kernel libraries and backends it registers. A hit
costs a stat and a small JSON read.

    runner_bundle.py  what a bundle is (RunnerBundle, kinds, bundle.json)
    toolchain.py  finding the harness, the executorch package, CMake, the compiler
    plans.py      what to build for an ABI (host, NDK, arm64) and its cache key
    runner_cache.py   building a plan into the cache (ensure_runner, cached_runner)
    arm64.py      the arm64 bundle's wheel, cross compiler and bundled glibc
    x86_64.py     the x86_64 bundle: the host build with its glibc, for Android emulators
    glibc_bundle.py  making a bundle self-contained with its glibc and loader
    choice.py     which bundle a device gets (runner_choice, runner_for_device)
    external.py   a runner etdeploy did not build (--runner)
"""

from typing import TYPE_CHECKING

from etdeploy.lazy import lazy_exports

if TYPE_CHECKING:
    from etdeploy.runner_build.choice import RunnerChoice, runner_choice, runner_for_device
    from etdeploy.runner_build.external import binary_abi, external_runner, runner_from_path
    from etdeploy.runner_build.plans import (
        BACKENDS,
        DEFAULT_BACKENDS,
        KERNEL_LIBRARIES,
        bundle_key,
        ndk_configured,
    )
    from etdeploy.runner_build.runner_bundle import (
        ABIS,
        BUNDLE_MANIFEST,
        BUNDLE_SCHEMA,
        EXECUTABLE,
        KIND_ARM64,
        KIND_EXTERNAL,
        KIND_HOST,
        KIND_NDK,
        KINDS,
        Progress,
        RunnerBundle,
    )
    from etdeploy.runner_build.runner_cache import cached_runner, ensure_runner
    from etdeploy.runner_build.toolchain import (
        executorch_package_dir,
        executorch_version,
        find_tool,
        harness_dir,
        host_abi,
    )
    from etdeploy.runner_build.x86_64 import KIND as KIND_X86_64

# Each name's module: importing the package imports none of them (etdeploy.lazy).
_AT = "etdeploy.runner_build."
_EXPORTS = {
    **dict.fromkeys(("cached_runner", "ensure_runner"), _AT + "runner_cache"),
    **dict.fromkeys(("ABIS", "BUNDLE_MANIFEST", "BUNDLE_SCHEMA", "EXECUTABLE", "KIND_ARM64",
                     "KIND_EXTERNAL", "KIND_HOST", "KIND_NDK", "KINDS", "Progress",
                     "RunnerBundle"), _AT + "runner_bundle"),
    **dict.fromkeys(("RunnerChoice", "runner_choice", "runner_for_device"), _AT + "choice"),
    **dict.fromkeys(("binary_abi", "external_runner", "runner_from_path"), _AT + "external"),
    **dict.fromkeys(("BACKENDS", "DEFAULT_BACKENDS", "KERNEL_LIBRARIES", "bundle_key",
                     "ndk_configured"), _AT + "plans"),
    **dict.fromkeys(("executorch_package_dir", "executorch_version", "find_tool", "harness_dir",
                     "host_abi"), _AT + "toolchain"),
    "KIND_X86_64": _AT + "x86_64:KIND",
}  # fmt: skip
__getattr__ = lazy_exports(__name__, _EXPORTS)

__all__ = [
    "ABIS", "BACKENDS", "BUNDLE_MANIFEST", "BUNDLE_SCHEMA", "DEFAULT_BACKENDS", "EXECUTABLE",
    "KERNEL_LIBRARIES", "KINDS", "KIND_ARM64", "KIND_EXTERNAL", "KIND_HOST", "KIND_NDK", "KIND_X86_64",
    "Progress", "RunnerBundle", "RunnerChoice", "binary_abi", "bundle_key", "cached_runner",
    "ensure_runner", "executorch_package_dir", "executorch_version", "external_runner",
    "find_tool", "harness_dir", "host_abi", "ndk_configured", "runner_choice",
    "runner_for_device", "runner_from_path",
]  # fmt: skip
