"""`etdeploy doctor` on the arm64 bundle: the cross compiler, the aarch64 wheel,
the cached bundle, and the runner row of an arm64 phone with no runner of its
own. Nothing here downloads or builds; the cached rows read what the arm64
build tests left in the session's cache (or build it once when run alone)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from etdeploy.cli import app
from etdeploy.doctor import FAIL, OK, WARN
from tests.support.adb_server import adb_testbed, free_port
from tests.support.arm64 import require_arm64
from tests.support.device_config import write_config

ARM64_PHONE = {
    "properties": {"ro.product.cpu.abi": "arm64-v8a", "ro.product.cpu.abilist": "arm64-v8a"}
}


@pytest.fixture(autouse=True)
def quiet_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    # Never a user's adb server; never an NDK build that would be preferred.
    monkeypatch.setenv("ANDROID_ADB_SERVER_HOST", "127.0.0.2")
    monkeypatch.setenv("ANDROID_ADB_SERVER_PORT", str(free_port()))
    for name in ("ANDROID_SERIAL", "ANDROID_NDK", "EXECUTORCH_ANDROID_PREFIX"):
        monkeypatch.delenv(name, raising=False)


def doctor(*args: str | Path) -> dict[tuple[str, str], dict[str, str]]:
    done = CliRunner().invoke(
        app, ["doctor", "--json", "-", *map(str, args)], catch_exceptions=False
    )
    return {(c["area"], c["name"]): c for c in json.loads(done.stdout)["checks"]}


@pytest.mark.slow
def test_the_cached_bundle_its_wheel_and_the_cross_compiler_are_reported() -> None:
    require_arm64()
    from etdeploy.runner_build import ensure_runner

    bundle = ensure_runner("aarch64")  # a cache hit after the arm64 build tests
    rows = doctor("--no-devices")
    compiler = rows[("runner", "arm64 cross compiler")]
    assert compiler["status"] == OK and "aarch64-linux-gnu-g++" in compiler["detail"]
    assert "glibc 2." in compiler["detail"]
    wheel = rows[("runner", "aarch64 wheel")]
    assert wheel["status"] == OK and "manylinux_2_28_aarch64.whl" in wheel["detail"]
    assert "pypi.org" in wheel["detail"]
    runner = rows[("runner", "arm64 runner")]
    assert runner["status"] == OK and str(bundle.directory) in runner["detail"]
    assert "arm64-glibc" in runner["detail"]


def test_an_empty_cache_warns_that_the_wheel_and_bundle_come_on_first_use(
    fresh_cache: Path,
) -> None:
    require_arm64()
    rows = doctor("--no-devices")
    assert rows[("runner", "arm64 cross compiler")]["status"] == OK
    for name in ("aarch64 wheel", "arm64 runner"):
        row = rows[("runner", name)]
        assert row["status"] == WARN and "--abi aarch64" in row["hint"], row
    assert "PyPI" in rows[("runner", "aarch64 wheel")]["detail"]


def test_without_the_cross_compiler_doctor_warns_with_the_package_to_install(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("ETDEPLOY_CROSS_PREFIX", str(tmp_path / "nowhere" / "aarch64-linux-gnu-"))
    rows = doctor("--no-devices")
    row = rows[("runner", "arm64 cross compiler")]
    assert row["status"] == WARN and "g++-aarch64-linux-gnu" in row["hint"]
    assert ("runner", "arm64 runner") not in rows


@pytest.mark.slow
@pytest.mark.parametrize("compiler", ["present", "missing"])
def test_an_arm64_phone_without_a_runner_gets_the_arm64_bundle_if_it_can_be_built(
    compiler: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    if compiler == "present":
        require_arm64()
    else:
        monkeypatch.setenv(
            "ETDEPLOY_CROSS_PREFIX", str(tmp_path / "nowhere" / "aarch64-linux-gnu-")
        )
    with adb_testbed(tmp_path / "adb", {"arm": ARM64_PHONE}) as bed:
        table: dict[str, Any] = {
            "serial": bed.serial("arm"),
            "adb_host": "127.0.0.1",
            "adb_port": bed.server.port,
        }
        config = write_config(tmp_path / "etdeploy.toml", {"pixel8": table})
        rows = doctor("--config", config)
    row = rows[("runner", "runner for pixel8")]
    if compiler == "present":
        assert row["status"] == OK and "arm64 bundle" in row["detail"], row
    else:
        assert row["status"] == FAIL and "aarch64-linux-gnu-g++" in row["detail"], row
        assert "g++-aarch64-linux-gnu" in row["hint"] and "ANDROID_NDK" in row["hint"]
