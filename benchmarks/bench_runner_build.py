"""The arm64 bundle against the host bundle: cold build time and size, as ratios.

What a user pays for `etdeploy runner build --abi arm64-v8a` (no NDK) next to the
host build every run already needs: each build runs in a new process with an
empty cache (ETDEPLOY_CACHE_DIR), so nothing is reused, and is timed wall clock
from start to the printed bundle directory. The arm64 build is timed twice: from
nothing (pip downloads the aarch64 wheel from PyPI and it is hash-checked), and
with only the wheel already downloaded (the cross build alone). Size is every
file a device receives, with the part of the arm64 bundle that is its glibc and
C++ runtime shown apart.

Per-iteration latency of the arm64 bundle is deliberately absent: here it can only
run under qemu-user, and an emulated time says nothing about an ARM device.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MB = 1024 * 1024


def _cold_build(abi: str, cache: Path) -> tuple[float, Path]:
    env = {**os.environ, "ETDEPLOY_CACHE_DIR": str(cache)}
    for variable in ("ANDROID_NDK", "EXECUTORCH_ANDROID_PREFIX"):
        env.pop(variable, None)  # the arm64 bundle, not an NDK build
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "etdeploy", "runner", "build", "--abi", abi],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"runner build --abi {abi} failed:\n{done.stderr[-3000:]}")
    return seconds, Path(done.stdout.strip().splitlines()[-1])


def _sizes(directory: Path) -> tuple[int, int]:
    """(all files a device receives, the bundled system libraries among them)."""
    manifest = json.loads((directory / "bundle.json").read_text())
    total = sum((directory / name).stat().st_size for name in manifest["files"])
    system = [
        *manifest.get("system_libraries", ()),
        *([manifest["loader"]] if "loader" in manifest else []),
    ]
    return total, sum((directory / name).stat().st_size for name in set(system))


def main() -> None:
    from tests.support.arm64 import arm64_missing_reason

    reason = arm64_missing_reason()
    if reason:
        print(f"   skipped: {reason}")
        return
    with tempfile.TemporaryDirectory(prefix="bench-runner-build-") as tmp:
        root = Path(tmp)
        host_s, host_dir = _cold_build("host", root / "host")
        arm_s, arm_dir = _cold_build("arm64-v8a", root / "arm64")
        # Only the verified wheel carried over: the build without the download.
        (root / "arm64-wheel" / "wheels").mkdir(parents=True)
        for wheel in (root / "arm64" / "wheels").glob("*.whl*"):
            shutil.copy2(wheel, root / "arm64-wheel" / "wheels" / wheel.name)
        arm_build_s, _ = _cold_build("arm64-v8a", root / "arm64-wheel")
        host_bytes, _ = _sizes(host_dir)
        arm_bytes, system_bytes = _sizes(arm_dir)
    print(f"   host bundle:  cold build {host_s:.1f} s, {host_bytes / MB:.1f} MB")
    print(
        f"   arm64 bundle: cold build {arm_s:.1f} s with the wheel download, {arm_build_s:.1f} s "
        f"with the wheel cached; {arm_bytes / MB:.1f} MB, of which glibc, loader and C++ "
        f"runtime {system_bytes / MB:.1f} MB"
    )
    print(
        f"   arm64 / host: cold build x{arm_s / host_s:.2f} (x{arm_build_s / host_s:.2f} with "
        f"the wheel cached), size x{arm_bytes / host_bytes:.2f}"
    )
    print("   (no latency figure: under qemu-user it is not a device's)")


if __name__ == "__main__":
    main()
