"""The self-contained arm64 bundle (etdeploy/runner_build/arm64.py) and which bundle a
device gets (runner_build.runner_choice).

The build is real: Debian's aarch64 cross compiler, the executorch wheel for
manylinux aarch64 downloaded by pip and checked against PyPI's sha256, cmake.
The bundle runs as ARM code under qemu-aarch64 with an empty sysroot
(tests/support/arm64.py); its outputs are compared with this machine's runner.
"""

from __future__ import annotations

import json
import shutil
import zipfile
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from etdeploy.devices.base import DeviceInfo
from etdeploy.errors import RunnerError, UsageError
from etdeploy.numerics import FP32_ATOL, FP32_RTOL
from etdeploy.runner_build import (
    EXECUTABLE,
    KIND_ARM64,
    KIND_HOST,
    KIND_NDK,
    KIND_X86_64,
    RunnerBundle,
    binary_abi,
    ensure_runner,
    runner_choice,
    runner_from_path,
)
from etdeploy.runner_build.arm64 import (
    LOADER,
    PINNED_SHA256,
    PROGRAM,
    Wheel,
    _fits,
    cached_wheel,
    fetch_wheel,
    python_tag,
)
from tests.support.arm64 import Arm64Emulation, arm64_emulation

WHEEL_1_5_1 = f"executorch-1.5.1-{python_tag()}-{python_tag()}-manylinux_2_28_aarch64.whl"


def cli(*args: str) -> object:
    import etdeploy.cli.runner  # noqa: F401  registers `runner` on the app
    from etdeploy.cli import app

    return CliRunner().invoke(app, list(args))


@pytest.fixture(autouse=True)
def no_ndk_build(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANDROID_NDK", raising=False)
    monkeypatch.delenv("EXECUTORCH_ANDROID_PREFIX", raising=False)


@pytest.fixture(scope="module")
def emulation(tmp_path_factory: pytest.TempPathFactory) -> Arm64Emulation:
    return arm64_emulation(tmp_path_factory.mktemp("arm64"))


@pytest.fixture(scope="module")
def bundle(emulation: Arm64Emulation) -> RunnerBundle:
    # As `etdeploy runner build --abi arm64-v8a` does without an NDK build set up.
    return ensure_runner("aarch64")


# -- the bundle --------------------------------------------------------------------------


@pytest.mark.slow
def test_runner_build_for_arm64_prints_a_self_contained_aarch64_bundle(
    bundle: RunnerBundle,
) -> None:
    done = cli("runner", "build", "--abi", "arm64-v8a")
    assert done.exit_code == 0, done.output  # type: ignore[attr-defined]
    directory = Path(done.stdout.strip().splitlines()[-1])  # type: ignore[attr-defined]
    assert directory == bundle.directory
    manifest = json.loads((directory / "bundle.json").read_text())
    assert manifest["kind"] == KIND_ARM64 and manifest["abi"] == "arm64-v8a"
    assert manifest["wheel"] == WHEEL_1_5_1
    assert manifest["wheel_sha256"] == PINNED_SHA256["1.5.1"][WHEEL_1_5_1]
    # The launcher is a script; everything else a device receives is aarch64 code.
    assert (directory / EXECUTABLE).read_text().startswith("#!/bin/sh\n")
    elves = [directory / name for name in manifest["files"] if name != EXECUTABLE]
    assert {binary_abi(path) for path in elves} == {"arm64-v8a"}
    names = set(manifest["files"])
    assert {PROGRAM, LOADER, "libc.so.6", "libstdc++.so.6", "libexecutorch.so"} <= names
    # aarch64 is the same bundle, from the cache.
    again = cli("runner", "build", "--abi", "aarch64")
    assert Path(again.stdout.strip().splitlines()[-1]) == directory  # type: ignore[attr-defined]
    assert runner_from_path(directory).kind == KIND_ARM64


@pytest.mark.slow
def test_digits_runs_as_arm_code_with_an_empty_sysroot_and_matches_the_host_runner(
    bundle: RunnerBundle, emulation: Arm64Emulation, tmp_path: Path
) -> None:
    from etdeploy.pipeline import RunJob
    from etdeploy.pipeline.build import build_program
    from etdeploy.pipeline.deploy import staged_input_file
    from etdeploy.pipeline.plan import plan_of
    from etdeploy.pipeline.stage import stage

    plan = plan_of(RunJob(model="digits"))
    program = build_program(plan.build)
    staged = stage(plan.stage, program)
    host = ensure_runner("host")
    assert list(emulation.sysroot.iterdir()) == []
    for s, sample in enumerate(staged.samples[:4]):
        outputs = []
        for name, launch in (("host", host.executable_path), ("arm", bundle.executable_path)):
            argv = [launch, f"--model_path={program.pte}", f"--inputs={staged_input_file(sample[0])}",
                    f"--output_file={tmp_path / f'{name}{s}'}", f"--result_json={tmp_path / f'{name}{s}.json'}"]  # fmt: skip
            done = emulation.run(argv)
            assert done.returncode == 0, done.stderr
            outputs.append(np.fromfile(tmp_path / f"{name}{s}-0.bin", dtype=np.float32))
        ran, arm = (json.loads((tmp_path / f"{n}{s}.json").read_text()) for n in ("host", "arm"))
        assert ran["outputs"][0]["shape"] == arm["outputs"][0]["shape"] == [1, 10]
        np.testing.assert_allclose(outputs[1], outputs[0], atol=FP32_ATOL, rtol=FP32_RTOL)


@pytest.mark.slow
def test_the_launcher_repairs_a_loader_pushed_without_its_execute_bit(
    bundle: RunnerBundle, emulation: Arm64Emulation, tmp_path: Path
) -> None:
    copy = Path(shutil.copytree(bundle.directory, tmp_path / "pushed"))
    (copy / LOADER).chmod(0o644)  # as a transport that pushes libraries 0644 leaves it
    done = emulation.run([copy / EXECUTABLE, "--version"])
    assert done.returncode == 0, done.stderr
    assert "etdeploy_runner" in done.stdout and (copy / LOADER).stat().st_mode & 0o111


@pytest.mark.slow
def test_a_library_missing_from_the_bundle_fails_naming_it_the_device_lends_none(
    bundle: RunnerBundle, emulation: Arm64Emulation, tmp_path: Path
) -> None:
    copy = Path(shutil.copytree(bundle.directory, tmp_path / "pushed"))
    (copy / "libstdc++.so.6").unlink()
    done = emulation.run([copy / EXECUTABLE, "--version"])
    assert done.returncode != 0
    assert "libstdc++.so.6" in done.stderr


# -- the cross compiler and the wheel -------------------------------------------------------


def test_without_the_cross_compiler_the_build_is_exit_2_naming_the_package(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("ETDEPLOY_CROSS_PREFIX", str(tmp_path / "nowhere" / "aarch64-linux-gnu-"))
    with pytest.raises(UsageError) as caught:
        ensure_runner("aarch64")
    assert "g++-aarch64-linux-gnu" in (caught.value.hint or "")
    done = cli("runner", "build", "--abi", "arm64-v8a")
    assert done.exit_code == 2  # type: ignore[attr-defined]
    assert "aarch64-linux-gnu-g++" in done.output  # type: ignore[attr-defined]


def _fake_wheel(path: Path) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("executorch/lib/libexecutorch.so", b"not the real library")
    return path


@pytest.mark.slow
def test_a_wheel_that_is_not_the_one_pypi_publishes_is_refused(
    fresh_cache: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # A planted file under the real name, where pip looks first (a bad mirror).
    planted = tmp_path / "links"
    planted.mkdir()
    _fake_wheel(planted / WHEEL_1_5_1)
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(planted))
    with pytest.raises(RunnerError) as caught:
        fetch_wheel("1.5.1", (2, 36), lambda _message: None)
    assert "could not download" in caught.value.message
    assert "hash" in (caught.value.log or "").lower()
    assert not list((fresh_cache / "wheels").glob("*.whl"))


def test_a_cached_wheel_is_used_only_while_its_bytes_match_the_verified_hash(
    fresh_cache: Path,
) -> None:
    import hashlib

    wheels = fresh_cache / "wheels"
    wheels.mkdir(parents=True)
    wheel = _fake_wheel(wheels / WHEEL_1_5_1)
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    record = {"sha256": digest, "hash_source": "test"}
    (wheels / f"{WHEEL_1_5_1}.json").write_text(json.dumps(record))
    assert cached_wheel("1.5.1") == Wheel(wheel, digest, "test")
    wheel.write_bytes(wheel.read_bytes() + b"\0")  # damaged on disk
    assert cached_wheel("1.5.1") is None


@pytest.mark.parametrize(
    ("filename", "glibc", "fits"),
    [
        (WHEEL_1_5_1, (2, 36), True),
        (WHEEL_1_5_1, (2, 27), False),  # the bundled glibc is older than the wheel needs
        (WHEEL_1_5_1.replace("1.5.1", "1.5.0"), (2, 36), False),
        (WHEEL_1_5_1.replace("aarch64", "x86_64"), (2, 36), False),
        (WHEEL_1_5_1.replace("manylinux_2_28", "manylinux2014"), (2, 36), True),
        (WHEEL_1_5_1.replace(python_tag(), "cp39"), (2, 36), False),
    ],
)
def test_the_wheel_is_this_pythons_aarch64_one_that_the_bundled_glibc_can_load(
    filename: str, glibc: tuple[int, int], fits: bool
) -> None:
    assert _fits(filename, "1.5.1", glibc) is fits


# -- which bundle a device gets ----------------------------------------------------------------


def _info(os: str, abi: str, transport: str = "adb") -> DeviceInfo:
    return DeviceInfo(name="dut", transport=transport, serial="s", os=os, abi=abi)


@pytest.mark.parametrize(
    ("info", "abi", "kind"),
    [
        (_info("android", "arm64-v8a"), "arm64-v8a", KIND_ARM64),
        (_info("android", "x86_64"), "x86_64", KIND_X86_64),
        (_info("linux", "linux-arm64", "ssh"), "aarch64", KIND_ARM64),
        (_info("linux", "linux-x86_64", "ssh"), "host", KIND_HOST),
        (_info("linux", "x86_64", "local"), "host", KIND_HOST),
    ],
)
def test_each_device_gets_the_bundle_its_cpu_and_os_run(
    info: DeviceInfo, abi: str, kind: str
) -> None:
    choice = runner_choice(info)
    assert (choice.abi, choice.kind) == (abi, kind)


def test_an_ndk_build_when_set_up_is_preferred_for_an_arm64_phone(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("ANDROID_NDK", str(tmp_path / "ndk"))
    monkeypatch.setenv("EXECUTORCH_ANDROID_PREFIX", str(tmp_path / "et-android"))
    assert runner_choice(_info("android", "arm64-v8a")).kind == KIND_NDK
    assert runner_choice(_info("android", "x86_64")).kind == KIND_NDK
    # An arm64 Linux host cannot run bionic: it keeps the arm64 bundle.
    assert runner_choice(_info("linux", "linux-arm64", "ssh")).kind == KIND_ARM64
    with pytest.raises(UsageError, match=r"android\.toolchain\.cmake"):
        ensure_runner("arm64-v8a")  # the NDK route was taken, and this NDK is not one


def test_a_device_no_bundle_runs_on_is_a_usage_error_with_the_way_out() -> None:
    with pytest.raises(UsageError) as caught:
        runner_choice(_info("darwin", "darwin-arm64", "ssh"))
    assert "no runner for dut" in caught.value.message and "--runner" in (caught.value.hint or "")
