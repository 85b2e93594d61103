"""The Device protocol and what every transport inherits from DeviceBase."""

from __future__ import annotations

import inspect
import sys
from pathlib import Path

import pytest

from etdeploy.devices.adb import AdbDevice
from etdeploy.devices.base import Device, DeviceBase, job_dir
from etdeploy.devices.local import LocalDevice
from etdeploy.devices.simulator import SimulatorDevice
from etdeploy.devices.ssh import SshDevice
from etdeploy.errors import UsageError


@pytest.mark.parametrize("transport", [LocalDevice, AdbDevice, SshDevice, SimulatorDevice])
def test_every_transport_implements_the_whole_device_contract(transport: type) -> None:
    assert issubclass(transport, DeviceBase) and not inspect.isabstract(transport)
    assert transport.transport


def test_a_device_is_a_device(tmp_path: Path) -> None:
    device = LocalDevice(workdir=tmp_path)
    assert isinstance(device, Device)
    assert job_dir(device, "j1") == f"{tmp_path}/j1"


def test_an_empty_command_is_a_usage_error_on_every_device(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="nothing to run"):
        LocalDevice(workdir=tmp_path).run([], deadline_s=5)


def test_an_environment_a_shell_cannot_take_is_refused_before_anything_runs(
    tmp_path: Path,
) -> None:
    marker = tmp_path / "ran"
    with pytest.raises(UsageError, match="environment variable"):
        LocalDevice(workdir=tmp_path).run(
            [sys.executable, "-c", f"open({str(marker)!r}, 'w')"],
            deadline_s=30,
            env={"NOT A NAME": "x"},
        )
    assert not marker.exists()


def test_the_protocol_is_the_transports_core_and_optional_abilities_are_services() -> None:
    members = {
        name for name in (*vars(Device), *Device.__annotations__) if not name.startswith("_")
    }
    assert members == {
        "name", "transport", "lock_timeout_s", "info", "lock_key", "workdir",
        "push", "push_many", "pull", "pull_files", "run", "listing", "makedirs", "remove", "close",
    }  # fmt: skip
    # Mutable state and configuration are not the transport's.
    for gone in ("verify_remote", "runner_path", "lock", "stored_files", "remove_stored"):
        assert not hasattr(DeviceBase, gone), gone


def test_listing_and_remove_serve_clean_the_same_way_on_every_transport(tmp_path: Path) -> None:
    device = LocalDevice(workdir=tmp_path / "work")
    (tmp_path / "work" / "runners" / "k").mkdir(parents=True)
    (tmp_path / "work" / "runners" / "k" / "etdeploy_runner").write_bytes(b"x" * 10)
    (tmp_path / "work" / "job1").mkdir()
    (tmp_path / "work" / "job1" / "out.bin").write_bytes(b"y")
    listed = {f.path: f.size for f in device.listing().files}
    assert listed == {"runners/k/etdeploy_runner": 10, "job1/out.bin": 1}
    device.remove("job1", "runners/k", recursive=True)
    assert device.listing().files == ()
    with pytest.raises(UsageError, match="below the work dir"):
        device.remove("../outside", recursive=True)


def test_the_device_lock_is_a_service_over_lock_key(tmp_path: Path) -> None:
    from etdeploy.devices.lock import device_lock
    from etdeploy.errors import DeviceError

    first = LocalDevice(workdir=tmp_path / "a", lock_timeout_s=0.2)
    second = LocalDevice(workdir=tmp_path / "b", lock_timeout_s=0.2)
    assert first.lock_key() == second.lock_key()  # one machine, whatever its work dir
    with device_lock(first) as waited, pytest.raises(DeviceError, match="busy"):
        assert waited < 0.2
        with device_lock(second):
            pass
    with device_lock(second):
        pass
