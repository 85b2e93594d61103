"""Shared by the registry and `etdeploy devices` tests: one real adb server with
three loopback phones, and a real sshd. Nothing here is autouse."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.adb_server import AdbTestbed, adb_testbed
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
