"""The loopback ADB device speaks adb's device side well enough for the real client.

These tests drive it with the real `adb` command line and with adbutils (not with
etdeploy), through the real adb server, so a wire-protocol mistake in the double
shows up here and not as a puzzling failure in tests/devices/test_adb.py.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import adbutils
import pytest
from adbutils.errors import AdbError

from tests.support.adb_server import AdbTestbed, adb_testbed
from tests.support.loopback_adb import DEFAULT_FEATURES, LoopbackAdbDevice, LoopbackFaults

MiB = 1 << 20


@pytest.fixture(scope="module")
def bed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AdbTestbed]:
    phones = {"new": {}, "old": {"features": (), "properties": {"ro.product.model": "Nexus 5"}}}
    with adb_testbed(tmp_path_factory.mktemp("loopback"), phones) as testbed:
        yield testbed


def _reset(bed: AdbTestbed, name: str) -> Iterator[LoopbackAdbDevice]:
    phone = bed.phones[name]
    yield phone
    phone.faults = LoopbackFaults()
    phone.on_stream_close = "kill-group"
    bed.server.reconnect(phone)


@pytest.fixture
def phone(bed: AdbTestbed) -> Iterator[LoopbackAdbDevice]:
    yield from _reset(bed, "new")


@pytest.fixture
def old_phone(bed: AdbTestbed) -> Iterator[LoopbackAdbDevice]:
    yield from _reset(bed, "old")


def adb(bed: AdbTestbed, phone: LoopbackAdbDevice, *args: str, check: bool = True) -> str:
    return bed.server.adb("-s", phone.address, *args, check=check)


def client_device(bed: AdbTestbed, phone: LoopbackAdbDevice) -> adbutils.AdbDevice:
    client = adbutils.AdbClient("127.0.0.1", bed.server.port, socket_timeout=10)
    return client.device(phone.address)


def wait_until(predicate: object, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return True
        time.sleep(0.05)
    return bool(predicate())  # type: ignore[operator]


def test_the_server_lists_it_with_the_banners_product_model_and_device(
    bed: AdbTestbed, phone: LoopbackAdbDevice
) -> None:
    listing = bed.server.adb("devices", "-l")
    line = next(x for x in listing.splitlines() if x.startswith(phone.address))
    assert "device product:shiba model:Pixel_8 device:shiba" in " ".join(line.split())


def test_the_server_sees_exactly_the_advertised_features(
    bed: AdbTestbed, phone: LoopbackAdbDevice, old_phone: LoopbackAdbDevice
) -> None:
    assert set(adb(bed, phone, "features").split()) == set(DEFAULT_FEATURES)
    assert adb(bed, old_phone, "features").split() == []


def test_shell_v2_carries_exit_status_and_separate_streams(
    bed: AdbTestbed, phone: LoopbackAdbDevice
) -> None:
    result = client_device(bed, phone).shell2("echo out; echo err >&2; exit 9", v2=True, timeout=10)
    assert (result.returncode, result.stdout, result.stderr) == (9, "out\n", "err\n")
    with pytest.raises(RuntimeError, match="exited 4"):
        adb(bed, phone, "shell", "exit 4")


def test_shell_v1_has_no_exit_status_and_merges_stderr(
    bed: AdbTestbed, old_phone: LoopbackAdbDevice
) -> None:
    # adb without shell_v2 cannot know the status: `adb shell` exits 0, as with old phones.
    assert adb(bed, old_phone, "shell", "echo out; echo err >&2; exit 4") == "out\nerr\n"
    assert client_device(bed, old_phone).shell("echo a; echo b >&2") == "a\nb"


def test_getprop_answers_one_property_or_all_of_them(
    bed: AdbTestbed, phone: LoopbackAdbDevice
) -> None:
    assert adb(bed, phone, "shell", "getprop ro.product.cpu.abi") == "x86_64\n"
    assert adb(bed, phone, "shell", "getprop no.such.prop fallback") == "fallback\n"
    everything = adb(bed, phone, "shell", "getprop")
    assert "[ro.build.version.release]: [15]" in everything.splitlines()


def test_adb_push_and_pull_round_trip_through_the_sandbox(
    bed: AdbTestbed, phone: LoopbackAdbDevice, old_phone: LoopbackAdbDevice, tmp_path: Path
) -> None:
    local = tmp_path / "data.bin"
    local.write_bytes(os.urandom(3 * MiB + 5))
    for target in (phone, old_phone):  # SND2/RCV2/STA2, then SEND/RECV/STAT
        adb(bed, target, "push", str(local), "/data/local/tmp/rt/data.bin")
        assert target.device_path("/data/local/tmp/rt/data.bin").read_bytes() == local.read_bytes()
        back = tmp_path / f"back-{target.port}.bin"
        adb(bed, target, "pull", "/data/local/tmp/rt/data.bin", str(back))
        assert back.read_bytes() == local.read_bytes()
        assert "data.bin" in adb(bed, target, "ls", "/data/local/tmp/rt")


def test_shell_paths_under_data_local_tmp_land_in_the_sandbox(
    bed: AdbTestbed, phone: LoopbackAdbDevice
) -> None:
    adb(bed, phone, "shell", "mkdir -p /data/local/tmp/sb && echo hi > /data/local/tmp/sb/x.txt")
    assert (phone.sandbox / "sb" / "x.txt").read_text() == "hi\n"
    assert client_device(bed, phone).sync.read_text("/data/local/tmp/sb/x.txt") == "hi\n"


def test_stat_v1_wraps_sizes_at_4_gib_as_adbd_does(
    bed: AdbTestbed, phone: LoopbackAdbDevice
) -> None:
    host = phone.device_path("/data/local/tmp/sparse-5g")
    with open(host, "wb") as f:
        f.truncate(5 * (1 << 30) + 7)
    try:
        # adbutils' stat is the v1 STAT request: a 32-bit size.
        assert (
            client_device(bed, phone).sync.stat("/data/local/tmp/sparse-5g").size == (1 << 30) + 7
        )
    finally:
        host.unlink()


def test_kill_sent_through_the_shell_reaches_the_process(
    bed: AdbTestbed, phone: LoopbackAdbDevice
) -> None:
    pid = int(adb(bed, phone, "shell", "sleep 60 >/dev/null 2>&1 & echo $!").strip())
    assert pid in phone.live_processes()
    adb(bed, phone, "shell", f"kill {pid}")
    assert wait_until(lambda: pid not in phone.live_processes())
    other = int(adb(bed, phone, "shell", "sleep 61 >/dev/null 2>&1 & echo $!").strip())
    adb(bed, phone, "shell", "pkill -f 'sleep 6[1]'")
    assert wait_until(lambda: other not in phone.live_processes())


def test_closing_a_shell_stream_kills_its_process_group(
    bed: AdbTestbed, phone: LoopbackAdbDevice
) -> None:
    stream = client_device(bed, phone).shell("sleep 50 & sleep 50", stream=True)
    assert wait_until(lambda: len(phone.live_processes()) >= 2)
    stream.close()
    assert wait_until(lambda: phone.live_processes() == [])


def test_an_unknown_service_is_refused(bed: AdbTestbed, phone: LoopbackAdbDevice) -> None:
    connection = client_device(bed, phone).open_transport(timeout=10)
    try:
        connection.send_command("no-such-service:")
        with pytest.raises(AdbError):
            connection.check_okay()
    finally:
        connection.close()


def test_an_injected_shell_failure_fails_only_matching_commands(
    bed: AdbTestbed, phone: LoopbackAdbDevice
) -> None:
    phone.faults.fail_shell_pattern = r"^sha256sum"
    phone.faults.fail_shell_exit_code = 5
    failed = client_device(bed, phone).shell2("sha256sum /dev/null", v2=True, timeout=10)
    assert failed.returncode == 5 and "injected failure" in failed.stderr
    assert adb(bed, phone, "shell", "echo fine") == "fine\n"


def test_a_full_disk_fails_adb_push_with_no_space_left_and_no_file(
    bed: AdbTestbed, phone: LoopbackAdbDevice, tmp_path: Path
) -> None:
    local = tmp_path / "big.bin"
    local.write_bytes(os.urandom(4 * MiB))
    phone.faults.no_space_after_bytes = MiB
    with pytest.raises(RuntimeError, match="remote write failed: No space left on device"):
        adb(bed, phone, "push", str(local), "/data/local/tmp/full/big.bin")
    assert not phone.device_path("/data/local/tmp/full/big.bin").exists()


def test_a_dropped_connection_fails_the_push_and_the_server_reconnects(
    bed: AdbTestbed, phone: LoopbackAdbDevice, tmp_path: Path
) -> None:
    local = tmp_path / "cut.bin"
    local.write_bytes(os.urandom(8 * MiB))
    phone.faults.drop_after_send_bytes = 2 * MiB
    with pytest.raises(RuntimeError, match="failed to read copy response"):
        adb(bed, phone, "push", str(local), "/data/local/tmp/cut/cut.bin")
    assert phone.faults.drop_after_send_bytes is None  # fired once
    partial = phone.device_path("/data/local/tmp/cut/cut.bin")
    assert partial.stat().st_size < local.stat().st_size  # adbd died mid-write: the stub stays
    bed.server.wait_for_state(phone.address, "device", timeout=15)  # adb's own reconnect


def test_logcat_dumps_by_tag_and_since_a_time(bed: AdbTestbed, phone: LoopbackAdbDevice) -> None:
    now = time.time()
    phone.log("ExecuTorch", "old line", when=now - 100)
    phone.log("ExecuTorch", "new line", when=now - 1)
    phone.log("Other", "not this one", when=now - 1)
    out = adb(bed, phone, "shell", f"logcat -d -v threadtime -T {now - 10:.3f} -s ExecuTorch")
    assert "I ExecuTorch: new line" in out
    assert "old line" not in out and "not this one" not in out
    assert "Other" in adb(bed, phone, "shell", "logcat -d")
