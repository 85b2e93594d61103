"""Shared by the registry and `etdeploy devices` tests: one real adb server with
three loopback phones, and a real sshd. Nothing here is autouse but the guard that
no ssh keeper (etdeploy/devices/ssh/keeper.py) started here outlives the session."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator

import pytest

from tests.support.adb_server import AdbTestbed, adb_testbed
from tests.support.processes import processes_naming
from tests.support.sshd import SshServer, start_sshd

# Two phones of one model (a friendly name that is ambiguous) and a tablet (one
# that is not). The tablet is an arm64 phone that keeps 32-bit support.
REGISTRY_PHONES: dict[str, dict[str, object]] = {
    "p8": {},
    "p8-b": {"properties": {"ro.serialno": "SECOND"}},
    "tablet": {
        "properties": {
            "ro.product.model": "Pixel Tablet", "ro.product.name": "tangorpro",
            "ro.product.device": "tangorpro", "ro.soc.model": "", "ro.board.platform": "gs201",
            "ro.build.version.release": "14", "ro.product.cpu.abi": "arm64-v8a",
            "ro.product.cpu.abilist": "arm64-v8a,armeabi-v7a,armeabi",
        },
    },
}  # fmt: skip


@pytest.fixture(scope="module")
def phones(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AdbTestbed]:
    """A real adb server on a free port with REGISTRY_PHONES connected."""
    with adb_testbed(tmp_path_factory.mktemp("adb"), REGISTRY_PHONES) as testbed:
        yield testbed


@pytest.fixture(scope="module")
def sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshServer]:
    with start_sshd(tmp_path_factory.mktemp("sshd")) as server:
        yield server


@pytest.fixture(scope="session", autouse=True)
def no_keeper_outlives_the_session() -> Iterator[None]:
    """Keepers leave when their sshd stops or persist_s after their last command; any
    left when the session ends (their directory is this session's cache's) are killed."""
    from etdeploy.devices.ssh.keeper_ipc import keeper_dir

    yield
    for pid in processes_naming("etdeploy.devices.ssh.keeper", str(keeper_dir())):
        os.kill(pid, signal.SIGKILL)
