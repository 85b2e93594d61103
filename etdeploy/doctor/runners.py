"""The runners etdeploy builds: the host bundle, the arm64 bundle with its
cross compiler and wheel, and the x86_64 bundle made from the host one."""

from __future__ import annotations

import platform
from pathlib import Path
from typing import Any

from etdeploy.doctor.check import FAIL, OK, WARN, Check, devices_table
from etdeploy.errors import EtdeployError
from etdeploy.extras import INSTALL_HINT
from etdeploy.paths import cache_dir
from etdeploy.runner_build import (
    KIND_ARM64,
    bundle_key,
    executorch_version,
    host_abi,
    runner_choice,
    runner_from_path,
)
from etdeploy.runner_build import x86_64 as runner_x86_64

# -- the host runner ---------------------------------------------------------------------------


def host_runner_dir() -> Path | None:
    """Where ensure_runner("host") keeps the bundle this checkout would build, or
    None when etdeploy cannot even work out its key (no executorch, no sources)."""
    system = platform.system()
    abi = host_abi() if system == "Linux" else f"{system.lower()}-{host_abi()}"
    try:
        key = bundle_key("host")
    except EtdeployError:
        return None
    return cache_dir("runners") / f"{abi}-{key[:16]}"


def bundled_runner_check() -> Check:
    """The base install builds no runner: the job bundles it runs carry theirs."""
    return Check(
        "runner", "runners", OK,
        "taken prebuilt from the job bundles this install runs (etdeploy bundle --abi ABI "
        "writes them where the build extra is); none is built here",
        f"to build runners here: {INSTALL_HINT}",
    )  # fmt: skip


def host_runner_checks() -> list[Check]:
    try:
        directory = host_runner_dir()
    except OSError as exc:
        return [Check("runner", "host runner", WARN, f"cannot tell whether it is built: {exc}")]
    if directory is None:
        return [Check("runner", "host runner", FAIL, "cannot be built: the runner sources or executorch's "
                      "CMake package are missing", "run from a source checkout or `pip install -e .`")]  # fmt: skip
    if not (directory / "bundle.json").is_file():
        return [Check("runner", "host runner", WARN, "not built yet; the first run builds it (cmake, a C++ "
                      "compiler, a minute or two)", "build it now: etdeploy runner build")]  # fmt: skip
    try:
        bundle = runner_from_path(directory)
    except EtdeployError as exc:
        return [
            Check(
                "runner",
                "host runner",
                WARN,
                exc.message,
                "rebuild it: etdeploy runner build --rebuild",
            )
        ]
    version = bundle.info.get("executorch_version", "?")
    return [
        Check(
            "runner",
            "host runner",
            OK,
            f"{bundle.abi}, built against executorch {version}: {directory}",
        )
    ]


# -- the arm64 bundle -------------------------------------------------------------------------

_MB = 1024 * 1024


def arm64_runner_checks() -> list[Check]:
    """The cross compiler, the aarch64 wheel and the cached arm64 bundle. Nothing
    is downloaded or built here; a missing piece warns (only an arm64 device
    needs it, and its own runner row says so)."""
    from etdeploy.runner_build import arm64 as runner_arm64

    build = "etdeploy runner build --abi aarch64"
    try:
        cxx = runner_arm64.cross_compiler()
        major, minor = runner_arm64.glibc_version(cxx)
        compiler = runner_arm64.compiler_identity(cxx)
    except EtdeployError as exc:
        return [Check("runner", "arm64 cross compiler", WARN, exc.message, exc.hint or "")]
    checks = [Check("runner", "arm64 cross compiler", OK, f"{compiler}, glibc {major}.{minor}")]
    try:
        release = runner_arm64.release_of(executorch_version())
    except EtdeployError:
        return checks  # the environment rows already say executorch is missing
    wheel = runner_arm64.cached_wheel(release)
    if wheel is None:
        checks.append(Check("runner", "aarch64 wheel", WARN, f"executorch {release}'s aarch64 wheel is not "
                            "downloaded yet; the first arm64 build fetches it from PyPI with pip (about 18 MB) "
                            "and checks its sha256", f"fetch it now: {build}"))  # fmt: skip
    else:
        size = wheel.path.stat().st_size / _MB
        checks.append(Check("runner", "aarch64 wheel", OK, f"{wheel.path.name}, {size:.1f} MB, sha256 "
                            f"{wheel.sha256[:12]}… as published ({wheel.hash_source})"))  # fmt: skip
    try:
        directory = cache_dir("runners") / f"{runner_arm64.ABI}-{bundle_key('aarch64')[:16]}"
        bundle = runner_from_path(directory) if (directory / "bundle.json").is_file() else None
    except (EtdeployError, OSError) as exc:
        return [
            *checks,
            Check("runner", "arm64 runner", WARN, f"cannot tell whether it is built: {exc}"),
        ]
    if bundle is None:
        checks.append(Check("runner", "arm64 runner", WARN, "not built yet; an arm64 device builds it on "
                            "first use (about half a minute)", f"build it now: {build}"))  # fmt: skip
    else:
        size = runner_arm64.bundle_size(directory) / _MB
        version = bundle.info.get("executorch_version", "?")
        checks.append(Check("runner", "arm64 runner", OK, f"{bundle.kind} bundle, {size:.1f} MB, built "
                            f"against executorch {version}: {directory}"))  # fmt: skip
    return checks


def arm64_runner_check(info: Any, name: str) -> Check | None:
    """A device that gets the arm64 bundle: whether it can be built here. None for
    any other device."""
    from etdeploy.runner_build import arm64 as runner_arm64

    try:
        if runner_choice(info).kind != KIND_ARM64:
            return None
    except EtdeployError:
        return None  # no bundle of ours runs there: the caller's rows say so
    if runner_arm64.cross_tool("g++") is None:
        ndk = " or ANDROID_NDK and EXECUTORCH_ANDROID_PREFIX" if info.os == "android" else ""
        return Check(
            "runner", name, FAIL,
            f"no runner for {info.abi}: none configured, and the arm64 bundle needs "
            f"{runner_arm64.cross_prefix()}g++",
            f"apt-get install {runner_arm64.CROSS_PACKAGE}{ndk}, or set runner = \"PATH\" in "
            f"{devices_table(info.name)}",
        )  # fmt: skip
    return Check("runner", name, OK, f"the arm64 bundle ({KIND_ARM64}) runs on {info.os} {info.abi}; "
                 "built on first use from the aarch64 wheel")  # fmt: skip


def x86_64_runner_check(info: Any, name: str) -> Check | None:
    """A device that gets the x86_64 bundle (an Android emulator without an NDK
    build): whether this machine can make it. None for any other device."""
    try:
        if runner_choice(info).kind != runner_x86_64.KIND:
            return None
        runner_x86_64.host_toolchain()
    except EtdeployError as exc:
        return Check(
            "runner", name, FAIL, f"no runner for {info.abi}: {exc.message}",
            f'{exc.hint}; or set runner = "PATH" in {devices_table(info.name)}, or set '
            "ANDROID_NDK and EXECUTORCH_ANDROID_PREFIX",
        )  # fmt: skip
    return Check("runner", name, OK, f"the host build with its own glibc ({runner_x86_64.KIND}) "
                 f"runs on {info.os} {info.abi}; made on first use from the host runner")  # fmt: skip
