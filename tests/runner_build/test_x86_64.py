"""The x86_64 bundle (etdeploy/runner_build/x86_64.py): this machine's runner with
its own glibc, what an Android x86_64 emulator gets without an NDK build.

Real: the host runner built against the installed wheel, this machine's glibc and
loader copied beside it, the launcher run by /bin/sh. Android's bionic is not here,
so "independent of the device's libc" is shown with the loader's own account of
what it loaded (LD_DEBUG=libs): every library after the shell's exec comes from the
bundle. `run digits` on an x86_64 loopback phone with it is in
tests/devices/test_run_over_adb.py.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
from pathlib import Path

import pytest

from etdeploy.devices.base import DeviceInfo
from etdeploy.runner_build import (
    BUNDLE_MANIFEST,
    EXECUTABLE,
    KIND_X86_64,
    RunnerBundle,
    ensure_runner,
    runner_choice,
)
from etdeploy.runner_build.x86_64 import LOADER, PROGRAM

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        platform.system() != "Linux" or platform.machine() != "x86_64",
        reason="the x86_64 bundle is made from an x86_64 Linux host's runner",
    ),
]


@pytest.fixture(autouse=True)
def no_ndk_build(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANDROID_NDK", raising=False)
    monkeypatch.delenv("EXECUTORCH_ANDROID_PREFIX", raising=False)


@pytest.fixture(scope="module")
def bundle() -> RunnerBundle:
    # What `etdeploy runner build --abi x86_64` and an x86_64 emulator get.
    return ensure_runner("x86_64")


def test_an_x86_64_phone_gets_the_host_build_with_its_glibc_and_no_ndk() -> None:
    info = DeviceInfo(name="emulator", transport="adb", serial="s", os="android", abi="x86_64")
    choice = runner_choice(info)
    assert (choice.abi, choice.kind) == ("x86_64", KIND_X86_64)
    assert "NDK" not in choice.reason.replace("no NDK build set up", "")


def test_the_bundle_is_the_host_program_with_glibc_and_its_loader_beside_it(
    bundle: RunnerBundle,
) -> None:
    host = ensure_runner("host")
    assert (bundle.kind, bundle.abi) == (KIND_X86_64, "x86_64")
    names = {path.name for path in bundle.files}
    assert {EXECUTABLE, PROGRAM, LOADER, "libc.so.6", "libstdc++.so.6"} <= names
    # The program is the host build's, byte for byte: no second compile.
    assert (bundle.directory / PROGRAM).read_bytes() == host.executable_path.read_bytes()
    manifest = json.loads((bundle.directory / BUNDLE_MANIFEST).read_text())
    assert manifest["host_bundle_key"] == host.key and manifest["loader"] == LOADER
    assert manifest["build_id"] != host.info["build_id"]  # its own --describe cache entry
    # Built once: the next call is a cache hit on the same directory.
    again = ensure_runner("x86_64")
    assert again.directory == bundle.directory and not again.fresh


def test_the_launcher_loads_nothing_from_the_system(bundle: RunnerBundle) -> None:
    done = subprocess.run(
        [str(bundle.executable_path), "--describe"],
        capture_output=True, text=True, timeout=60, check=False,
        env={**os.environ, "LD_DEBUG": "libs"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout)["bundle"]["abi"] == "x86_64"
    loaded = [line.split("calling init:")[1].strip() for line in done.stderr.splitlines()
              if "calling init:" in line]  # fmt: skip
    # /bin/sh's own libraries come first; from the exec on, everything is the bundle's.
    first = next(i for i, path in enumerate(loaded) if Path(path).name == LOADER
                 and Path(path).resolve().parent == bundle.directory.resolve())  # fmt: skip
    after = [Path(path).resolve().parent for path in loaded[first:]]
    assert after and all(parent == bundle.directory.resolve() for parent in after), loaded
    assert any(Path(path).name == "libc.so.6" for path in loaded[first:])


def test_a_cached_bundle_passes_its_check_and_is_not_made_again(bundle: RunnerBundle) -> None:
    """Its bundle.json records its own files' digests (its program is patched, so the
    host build's would fail the cache check and remake it on every run)."""
    from etdeploy.digests import file_sha256
    from etdeploy.quarantine import noticed_damage

    recorded = bundle.info["sha256"]
    assert recorded == {p.name: file_sha256(p) for p in bundle.files}
    with noticed_damage() as damage:
        again = ensure_runner("x86_64")
    assert damage == [] and again.info["build_id"] == bundle.info["build_id"]
