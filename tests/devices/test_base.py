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
