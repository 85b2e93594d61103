"""AdbDevice against the real adb server (adbutils' binary) and loopback phones.

Three phones share one server: "p8" (a Pixel 8 with shell v2 and the v2 sync
requests), "p8-old" (also a Pixel 8, advertising none of them: shell v1 and
STAT/SEND/RECV v1 only), and "tablet" (a Pixel Tablet, for a friendly name that
only one phone has).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from etdeploy.devices.adb import (
    WORKDIR,
    AdbDevice,
    AdbSettings,
    connect_server,
    list_attached,
    resolve_serial,
)
from etdeploy.devices.digest_records import record_path
from etdeploy.devices.lock import device_lock
from etdeploy.devices.transfer import temporary_name
from etdeploy.digests import RACY_MARGIN_NS, sha256_file
from etdeploy.errors import DeviceError, TransportError, UsageError
from tests.support.adb_server import AdbServer, AdbTestbed, adb_server_pids, adb_testbed, free_port
from tests.support.loopback_adb import LoopbackAdbDevice, LoopbackFaults
from tests.support.processes import processes_naming

PHONES: dict[str, dict[str, object]] = {
    "p8": {},
    "p8-old": {"features": ("fixed_push_mkdir",), "properties": {"ro.serialno": "OLD"}},
    "tablet": {
        "properties": {
            "ro.product.model": "Pixel Tablet",
            "ro.product.name": "tangorpro",
            "ro.product.device": "tangorpro",
            "ro.soc.model": "",
            "ro.board.platform": "gs201",
            "ro.build.version.release": "14",
            "ro.product.cpu.abi": "arm64-v8a",
        },
    },
}
MiB = 1 << 20


@pytest.fixture(scope="module")
def bed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AdbTestbed]:
    with adb_testbed(tmp_path_factory.mktemp("adb"), PHONES) as testbed:
        yield testbed


@pytest.fixture
def settings(bed: AdbTestbed) -> AdbSettings:
    return AdbSettings(port=bed.server.port, connect_timeout_s=5, transfer_idle_timeout_s=10)


def _healthy(bed: AdbTestbed, name: str) -> Iterator[LoopbackAdbDevice]:
    phone = bed.phones[name]
    yield phone
    # Whatever a test broke, the next one gets a clean, connected phone.
    phone.faults = LoopbackFaults()
    phone.on_stream_close = "kill-group"
    phone.offline = False
    phone.release_stall()
    bed.server.reconnect(phone)


@pytest.fixture
def phone(bed: AdbTestbed) -> Iterator[LoopbackAdbDevice]:
    yield from _healthy(bed, "p8")


@pytest.fixture
def old_phone(bed: AdbTestbed) -> Iterator[LoopbackAdbDevice]:
    yield from _healthy(bed, "p8-old")


@pytest.fixture
def device(phone: LoopbackAdbDevice, settings: AdbSettings) -> AdbDevice:
    return AdbDevice("pixel8", dataclasses.replace(settings, serial=phone.address))


@pytest.fixture
def old_device(old_phone: LoopbackAdbDevice, settings: AdbSettings) -> AdbDevice:
    return AdbDevice("old-pixel8", dataclasses.replace(settings, serial=old_phone.address))


@pytest.fixture(params=["shell_v2", "shell_v1"])
def any_device(
    request: pytest.FixtureRequest, bed: AdbTestbed, settings: AdbSettings
) -> Iterator[AdbDevice]:
    name = "p8" if request.param == "shell_v2" else "p8-old"
    for phone in _healthy(bed, name):
        yield AdbDevice(name, dataclasses.replace(settings, serial=phone.address))


def random_file(path: Path, size: int) -> Path:
    path.write_bytes(os.urandom(size))
    return path


def partials(phone: LoopbackAdbDevice, remote: str) -> list[str]:
    host = phone.device_path(remote)
    return sorted(p.name for p in host.parent.glob(f".{host.name}.etdeploy-partial-*"))


def wait_until(predicate: object, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return True
        time.sleep(0.05)
    return bool(predicate())  # type: ignore[operator]


# -- settings ---------------------------------------------------------------------------


def test_settings_take_the_server_from_the_environment_unless_given(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("ANDROID_ADB_SERVER_HOST", raising=False)
    monkeypatch.delenv("ANDROID_ADB_SERVER_PORT", raising=False)
    assert (AdbSettings().host, AdbSettings().port) == ("127.0.0.1", 5037)
    monkeypatch.setenv("ANDROID_ADB_SERVER_HOST", "10.1.2.3")
    monkeypatch.setenv("ANDROID_ADB_SERVER_PORT", "6000")
    assert (AdbSettings().host, AdbSettings().port) == ("10.1.2.3", 6000)
    assert (AdbSettings(host="127.0.0.1", port=7000).host, AdbSettings(port=7000).port) == (
        "127.0.0.1",
        7000,
    )


def test_a_server_port_that_is_not_a_number_is_a_usage_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ANDROID_ADB_SERVER_PORT", "fivethousand")
    with pytest.raises(UsageError, match="ANDROID_ADB_SERVER_PORT"):
        AdbSettings()


def test_settings_from_a_config_table_map_keys_and_reject_wrong_types() -> None:
    settings = AdbSettings.from_config(
        {"serial": "X1", "adb_port": 5999, "transfer_idle_timeout_s": 3}
    )
    assert (settings.serial, settings.port, settings.transfer_idle_timeout_s) == ("X1", 5999, 3)
    with pytest.raises(UsageError, match=r"devices\.pixel8\.adb_port"):
        AdbSettings.from_config({"adb_port": "5999"}, where="devices.pixel8")
    with pytest.raises(UsageError, match="start_server"):
        AdbSettings.from_config({"start_server": 1})


# -- the server --------------------------------------------------------------------------


def test_an_answering_server_is_used_as_it_is(bed: AdbTestbed, settings: AdbSettings) -> None:
    before = adb_server_pids(bed.server.port)
    client = connect_server(settings)
    assert client.server_version() >= 39
    assert adb_server_pids(bed.server.port) == before


def test_a_server_is_started_on_the_configured_port_when_none_answers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    port = free_port()
    # The server we start inherits these: its own key and log, no USB/mDNS/emulator scans.
    for key, value in {
        "HOME": tmp_path,
        "TMPDIR": tmp_path,
        "ADB_MDNS": 0,
        "ADB_USB": 0,
        "ADB_EMU": 0,
    }.items():
        monkeypatch.setenv(key, str(value))
    owner = AdbServer(port, tmp_path)
    try:
        assert adb_server_pids(port) == []
        client = connect_server(AdbSettings(port=port))
        assert client.server_version() >= 39
        assert len(adb_server_pids(port)) == 1
        assert owner.answering()
    finally:
        owner.stop()
    assert adb_server_pids(port) == []


def test_no_server_on_a_remote_host_is_a_device_error_and_nothing_is_started() -> None:
    # 127.0.0.2 stands for another machine: etdeploy starts servers only on local hosts.
    port = free_port()
    with pytest.raises(DeviceError, match=r"no adb server answers at 127\.0\.0\.2"):
        connect_server(AdbSettings(host="127.0.0.2", port=port, connect_timeout_s=1))
    assert adb_server_pids(port) == []


@contextlib.contextmanager
def fake_server(answer: bytes) -> Iterator[tuple[int, list[bytes]]]:
    """A listener that answers every request with `answer` (a stand-in for an old
    adb server, or for something else that owns the port); records requests."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)
    requests: list[bytes] = []

    def serve() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn, contextlib.suppress(OSError):
                length = int(conn.recv(4), 16)
                requests.append(conn.recv(length))
                conn.sendall(answer)

    threading.Thread(target=serve, daemon=True).start()
    try:
        yield listener.getsockname()[1], requests
    finally:
        listener.close()


def test_a_server_too_old_for_this_client_is_a_device_error_and_is_left_running() -> None:
    with fake_server(b"OKAY0004001f") as (port, requests):
        with pytest.raises(DeviceError, match=r"1\.0\.31.*needs 1\.0\.39") as caught:
            connect_server(AdbSettings(port=port))
        assert "never kills" in (caught.value.hint or "")
        assert requests == [b"host:version"]  # asked its version; never host:kill


def test_something_else_on_the_port_is_a_device_error() -> None:
    with (
        fake_server(b"HTTP/1.1 400 Bad Request\r\n\r\n") as (port, _),
        pytest.raises(DeviceError, match="not an adb server"),
    ):
        connect_server(AdbSettings(port=port))


# -- finding phones ------------------------------------------------------------------------


def test_list_attached_shows_every_phone_with_its_properties(
    bed: AdbTestbed, settings: AdbSettings
) -> None:
    infos = {info.serial: info for info in list_attached(settings)}
    assert set(infos) == {bed.serial(name) for name in PHONES}
    p8 = infos[bed.serial("p8")]
    assert (p8.model, p8.os_version, p8.abi, p8.soc, p8.state) == (
        "Pixel 8",
        "15",
        "x86_64",
        "Tensor G3",
        "device",
    )
    tablet = infos[bed.serial("tablet")]
    # No ro.soc.model (Android 11 and older): the board platform stands in.
    assert (tablet.model, tablet.abi, tablet.soc, tablet.os_version) == (
        "Pixel Tablet",
        "arm64-v8a",
        "gs201",
        "14",
    )


def test_info_reads_the_phone_through_adb(device: AdbDevice, phone: LoopbackAdbDevice) -> None:
    info = device.info()
    assert (info.name, info.transport, info.serial, info.os) == (
        "pixel8",
        "adb",
        phone.address,
        "android",
    )
    assert (info.model, info.os_version, info.abi, info.soc) == (
        "Pixel 8",
        "15",
        "x86_64",
        "Tensor G3",
    )
    assert info.extra["product"] == "shiba"
    assert {"shell_v2", "stat_v2", "sendrecv_v2"} <= device.features


def test_resolve_serial_takes_an_alias_first(bed: AdbTestbed, settings: AdbSettings) -> None:
    assert resolve_serial(
        "desk-phone", settings, {"desk-phone": bed.serial("p8-old")}
    ) == bed.serial("p8-old")


def test_resolve_serial_takes_an_exact_serial(bed: AdbTestbed, settings: AdbSettings) -> None:
    assert resolve_serial(bed.serial("p8"), settings, {}) == bed.serial("p8")


@pytest.mark.parametrize("name", ["pixeltablet", "Pixel Tablet", "PIXEL_TABLET", "tangorpro"])
def test_resolve_serial_matches_model_product_or_device_ignoring_case_and_spaces(
    bed: AdbTestbed, settings: AdbSettings, name: str
) -> None:
    assert resolve_serial(name, settings, {}) == bed.serial("tablet")


def test_resolve_serial_uses_android_serial_when_no_name_is_given(
    bed: AdbTestbed, settings: AdbSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANDROID_SERIAL", bed.serial("tablet"))
    assert resolve_serial(None, settings, {}) == bed.serial("tablet")


def test_no_name_with_several_phones_attached_is_a_usage_error(
    settings: AdbSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ANDROID_SERIAL", raising=False)
    with pytest.raises(UsageError, match="3 are attached"):
        resolve_serial(None, settings, {})


def test_no_match_is_a_usage_error_listing_what_is_attached(
    bed: AdbTestbed, settings: AdbSettings
) -> None:
    with pytest.raises(UsageError, match="no attached device matches 'pixel9'") as caught:
        resolve_serial("pixel9", settings, {})
    hint = caught.value.hint or ""
    assert (
        f"{bed.serial('p8')} (Pixel 8)" in hint and f"{bed.serial('tablet')} (Pixel Tablet)" in hint
    )


def test_several_matches_are_a_usage_error_listing_them(
    bed: AdbTestbed, settings: AdbSettings
) -> None:
    with pytest.raises(UsageError, match="2 attached devices match 'pixel8'") as caught:
        AdbDevice("pixel8", settings)
    hint = caught.value.hint or ""
    assert bed.serial("p8") in hint and bed.serial("p8-old") in hint and "Tablet" not in hint


def test_a_serial_that_is_not_attached_is_a_device_error(settings: AdbSettings) -> None:
    with pytest.raises(DeviceError, match="not attached"):
        AdbDevice("ghost", dataclasses.replace(settings, serial="127.0.0.1:1"))


@pytest.mark.parametrize("serial", ["127.0.0.1:1;touch X", "pixel 8", "a\nb", ""])
def test_a_serial_adb_could_not_take_is_a_usage_error_before_anything_is_sent(
    bed: AdbTestbed, settings: AdbSettings, serial: str
) -> None:
    with pytest.raises(UsageError) as caught:
        AdbDevice("phone", dataclasses.replace(settings, serial=serial))
    assert "is not an adb serial" in caught.value.message
    assert caught.value.hint and "adb devices" in caught.value.hint


def test_lock_key_names_the_server_and_the_serial(device: AdbDevice, settings: AdbSettings) -> None:
    assert device.lock_key() == f"adb:127.0.0.1:{settings.port}:{device.serial}"
    assert device.workdir == WORKDIR == "/data/local/tmp/etdeploy"


# -- files ---------------------------------------------------------------------------------


def test_push_then_the_device_sha256_matches_the_local_file(
    any_device: AdbDevice, tmp_path: Path
) -> None:
    local = random_file(tmp_path / "model.pte", 3 * MiB + 17)
    remote = f"{WORKDIR}/t-push/model.pte"
    result = any_device.push(local, remote)
    assert (result.bytes_sent, result.skipped) == (local.stat().st_size, False)
    assert any_device.sha256(remote) == sha256_file(local)
    assert any_device.remote_size(remote) == local.stat().st_size


def test_a_second_push_of_the_same_file_sends_nothing(
    any_device: AdbDevice, bed: AdbTestbed, tmp_path: Path
) -> None:
    phone = next(p for p in bed.phones.values() if p.address == any_device.serial)
    local = random_file(tmp_path / "runner", 2 * MiB)
    remote = f"{WORKDIR}/t-skip/runner"
    any_device.push(local, remote, mode=0o755)
    sends = len(phone.received_files)
    again = any_device.push(local, remote, mode=0o755)
    assert (again.bytes_sent, again.skipped) == (0, True)
    assert len(phone.received_files) == sends  # no SEND reached the phone
    assert os.stat(phone.device_path(remote)).st_mode & 0o777 == 0o755


def test_a_file_etdeploy_pushed_is_not_rehashed_on_the_phone(
    device: AdbDevice, phone: LoopbackAdbDevice, tmp_path: Path
) -> None:
    local = random_file(tmp_path / "weights.bin", 1 * MiB)
    remote = f"{WORKDIR}/t-record/weights.bin"
    device.push(local, remote)
    before = len(phone.opened_services)
    assert device.push(local, remote).skipped
    assert not any("sha256sum" in s for s in phone.opened_services[before:])


def test_a_matching_file_etdeploy_did_not_push_is_skipped_by_its_phone_side_hash(
    device: AdbDevice, phone: LoopbackAdbDevice, tmp_path: Path
) -> None:
    local = random_file(tmp_path / "copied.bin", 100_000)
    remote = f"{WORKDIR}/t-foreign/copied.bin"
    host = phone.device_path(remote)
    host.parent.mkdir(parents=True, exist_ok=True)
    host.write_bytes(local.read_bytes())  # put there by someone else: no record
    before = len(phone.opened_services)
    assert device.push(local, remote).skipped
    assert any("sha256sum" in s for s in phone.opened_services[before:])


def test_a_file_changed_on_the_phone_after_a_push_is_pushed_again(
    device: AdbDevice, phone: LoopbackAdbDevice, tmp_path: Path
) -> None:
    local = random_file(tmp_path / "tampered.bin", 4096)
    remote = f"{WORKDIR}/t-tamper/tampered.bin"
    device.push(local, remote)
    host = phone.device_path(remote)
    host.write_bytes(b"\0" * 4096)  # same size; the mtime moves on
    os.utime(host, (host.stat().st_mtime + 5, host.stat().st_mtime + 5))
    assert not device.push(local, remote).skipped
    assert host.read_bytes() == local.read_bytes()


def hashes_on(phone: LoopbackAdbDevice, since: int) -> int:
    """How many sha256sum runs the phone was asked for since `since` services."""
    return sum("sha256sum" in s for s in phone.opened_services[since:])


def aged(path: Path) -> Path:
    """Wait until `path` was last changed longer ago than a timestamp tick: only then
    is its local digest record trusted (etdeploy.digests, the racy-git rule)."""
    st = path.stat()
    wait = (max(st.st_mtime_ns, st.st_ctime_ns) + RACY_MARGIN_NS - time.time_ns()) / 1e9
    time.sleep(max(0.0, wait) + 0.05)
    return path


# Pushes a file from a process of its own and says whether it was skipped and how
# many times this side read the file (etdeploy.digests._hash, counted).
NEW_PROCESS_PUSH = """
import json, sys
from pathlib import Path
from etdeploy import digests
reads = []
real = digests._hash
digests._hash = lambda path: (reads.append(str(path)), real(path))[1]
from etdeploy.devices.adb import AdbDevice, AdbSettings
port, serial, local, remote = sys.argv[1:5]
device = AdbDevice("pixel8", AdbSettings(port=int(port), serial=serial))
result = device.push(Path(local), remote)
print(json.dumps({"skipped": result.skipped, "reads": len(reads)}))
"""


def test_an_unchanged_file_pushed_again_from_a_new_process_is_read_on_neither_side(
    device: AdbDevice, phone: LoopbackAdbDevice, settings: AdbSettings, tmp_path: Path
) -> None:
    local = aged(random_file(tmp_path / "model.pte", 3 * MiB))
    remote = f"{WORKDIR}/t-new-process/model.pte"
    device.push(local, remote)
    before = len(phone.opened_services)
    done = subprocess.run(
        [sys.executable, "-c", NEW_PROCESS_PUSH, str(settings.port), phone.address, str(local),
         remote],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"skipped": True, "reads": 0}
    assert hashes_on(phone, before) == 0  # the phone's record said what is there


def test_a_file_altered_with_its_mtime_put_back_is_detected_and_pushed_again(
    device: AdbDevice, phone: LoopbackAdbDevice, tmp_path: Path
) -> None:
    local = random_file(tmp_path / "weights.bin", 64 * 1024)
    remote = f"{WORKDIR}/t-altered/weights.bin"
    device.push(local, remote)
    host = phone.device_path(remote)
    st = host.stat()
    # Behind etdeploy's back: the same size, other bytes, and the mtime put back as
    # `touch -r` would. Only the ctime (which nothing can set back) tells.
    host.write_bytes(os.urandom(64 * 1024))
    os.utime(host, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert (host.stat().st_size, host.stat().st_mtime_ns) == (st.st_size, st.st_mtime_ns)
    before = len(phone.opened_services)
    result = device.push(local, remote)
    assert not result.skipped and hashes_on(phone, before) == 1
    assert host.read_bytes() == local.read_bytes()
    # The record is whole again: the next push trusts it.
    before = len(phone.opened_services)
    assert device.push(local, remote).skipped and hashes_on(phone, before) == 0


def test_a_half_written_file_under_the_real_name_is_pushed_again(
    device: AdbDevice, phone: LoopbackAdbDevice, tmp_path: Path
) -> None:
    local = random_file(tmp_path / "runner.so", 256 * 1024)
    remote = f"{WORKDIR}/t-half/runner.so"
    device.push(local, remote)
    host = phone.device_path(remote)
    with open(host, "r+b") as f:  # another tool's copy, cut short
        f.truncate(100_000)
    result = device.push(local, remote)
    assert not result.skipped and host.read_bytes() == local.read_bytes()


def test_verify_remote_hashes_on_the_phone_whatever_the_record_says(
    device: AdbDevice, phone: LoopbackAdbDevice, tmp_path: Path
) -> None:
    local = random_file(tmp_path / "inputs.bin", 128 * 1024)
    remote = f"{WORKDIR}/t-verify/inputs.bin"
    device.push(local, remote)
    before = len(phone.opened_services)
    assert device.push(local, remote, verify=True).skipped and hashes_on(phone, before) == 1


def test_the_record_lives_in_the_work_dir_and_names_path_digest_and_stat(
    device: AdbDevice, phone: LoopbackAdbDevice, tmp_path: Path
) -> None:
    local = random_file(tmp_path / "prog.pte", 5000)
    remote = f"{WORKDIR}/t-record-file/prog.pte"
    device.push(local, remote)
    record = phone.device_path(record_path(WORKDIR, remote))
    lines = record.read_text().splitlines()
    assert lines[0] == "etdeploy-digest/1" and lines[2] == sha256_file(local)
    assert lines[4].split()[0] == "5000"  # size, then ctime and mtime to the nanosecond
    assert not [p for p in record.parent.iterdir() if ".tmp" in p.name]
    device.remove(remote)
    assert not record.exists()


def test_a_changed_file_is_pushed_again_and_gets_its_mode(
    device: AdbDevice, phone: LoopbackAdbDevice, tmp_path: Path
) -> None:
    local = random_file(tmp_path / "in.bin", 1000)
    remote = f"{WORKDIR}/t-change/in.bin"
    device.push(local, remote)
    local.write_bytes(b"x" * 1000)  # same size, other bytes: the hash decides
    result = device.push(local, remote, mode=0o600)
    assert not result.skipped
    host = phone.device_path(remote)
    assert host.read_bytes() == b"x" * 1000 and host.stat().st_mode & 0o777 == 0o600


def test_push_reports_progress_in_bytes_up_to_the_total(device: AdbDevice, tmp_path: Path) -> None:
    local = random_file(tmp_path / "big.bin", 5 * MiB + 3)
    seen: list[tuple[str, int, int]] = []
    device.push(local, f"{WORKDIR}/t-progress/big.bin", progress=lambda *a: seen.append(a))
    done = [d for _, d, _ in seen]
    assert done == sorted(done) and done[-1] == local.stat().st_size
    assert {total for _, _, total in seen} == {local.stat().st_size}


def test_a_dropped_connection_mid_push_is_a_retryable_transport_error_and_the_next_push_succeeds(
    device: AdbDevice, phone: LoopbackAdbDevice, bed: AdbTestbed, tmp_path: Path
) -> None:
    local = random_file(tmp_path / "weights.pte", 8 * MiB)
    remote = f"{WORKDIR}/t-drop/weights.pte"
    phone.faults.drop_after_send_bytes = 2 * MiB
    with pytest.raises(TransportError) as caught:
        device.push(local, remote)
    error = caught.value
    assert error.retryable and error.device == "pixel8"
    assert "weights.pte" in str(error) and str(error).startswith("[pixel8]")
    # It says what the phone confirmed, never "8 MiB of 8 MiB sent" for bytes that
    # only reached a socket buffer: the phone wrote 2 MiB at most.
    size = 8 * MiB
    assert f"{size} of {size}" not in error.message
    assert (
        f"none of its {size} bytes is confirmed on the device" in error.message
        or f"the device had received {2 * MiB} of {size} bytes" in error.message
    ), error.message
    # Nothing under the real name; the cut transfer at most under a temporary one.
    assert not phone.device_path(remote).exists()
    assert set(partials(phone, remote)) <= {Path(temporary_name(remote)).name}
    bed.server.reconnect(phone)
    result = device.push(local, remote)
    assert not result.skipped and phone.device_path(remote).read_bytes() == local.read_bytes()
    assert partials(phone, remote) == []


def test_a_stalled_push_is_a_retryable_transport_error_after_the_idle_timeout(
    phone: LoopbackAdbDevice, settings: AdbSettings, tmp_path: Path
) -> None:
    device = AdbDevice(
        "pixel8", dataclasses.replace(settings, serial=phone.address, transfer_idle_timeout_s=1.5)
    )
    local = random_file(tmp_path / "stall.bin", 48 * MiB)
    remote = f"{WORKDIR}/t-stall/stall.bin"
    phone.faults.stall_after_send_bytes = 1 * MiB
    started = time.monotonic()
    with pytest.raises(TransportError, match="stalled") as caught:
        device.push(local, remote)
    assert caught.value.retryable and time.monotonic() - started < 20
    assert not phone.device_path(remote).exists()


def test_out_of_space_is_a_device_error_and_leaves_no_partial_file(
    device: AdbDevice, phone: LoopbackAdbDevice, tmp_path: Path
) -> None:
    local = random_file(tmp_path / "huge.pte", 6 * MiB)
    remote = f"{WORKDIR}/t-full/huge.pte"
    phone.faults.no_space_after_bytes = 1 * MiB
    with pytest.raises(DeviceError, match="ran out of space") as caught:
        device.push(local, remote)
    assert not isinstance(caught.value, TransportError) and not caught.value.retryable
    assert "No space left on device" in str(caught.value)
    assert not phone.device_path(remote).exists() and partials(phone, remote) == []


def test_sizes_over_4_gib_come_back_whole(any_device: AdbDevice, bed: AdbTestbed) -> None:
    # A sparse file on the phone: 5 GiB + 7 bytes, no disk used. The v1 STAT reply
    # would say 1 GiB + 7; STA2 and `stat -c %s` do not wrap.
    phone = next(p for p in bed.phones.values() if p.address == any_device.serial)
    remote = f"{WORKDIR}/t-huge/sparse.bin"
    host = phone.device_path(remote)
    host.parent.mkdir(parents=True, exist_ok=True)
    size = 5 * (1 << 30) + 7
    with open(host, "wb") as f:
        f.truncate(size)
    try:
        assert any_device.remote_size(remote) == size
    finally:
        host.unlink()


def test_pull_brings_a_file_back_and_a_missing_one_is_a_device_error(
    any_device: AdbDevice, tmp_path: Path
) -> None:
    local = random_file(tmp_path / "out-0.bin", 300_000)
    remote = f"{WORKDIR}/t-pull/out-0.bin"
    any_device.push(local, remote)
    back = any_device.pull(remote, tmp_path / "back" / "out-0.bin")
    assert back.read_bytes() == local.read_bytes()
    assert not list(back.parent.glob(".*partial*"))
    with pytest.raises(DeviceError, match="no such file"):
        any_device.pull(f"{WORKDIR}/t-pull/absent.bin", tmp_path / "absent.bin")


def test_pull_files_brings_several_back_whole_and_a_missing_one_writes_none(
    any_device: AdbDevice, tmp_path: Path
) -> None:
    # An empty, a tiny and a multi-chunk file: what a runner call leaves behind.
    sent = [random_file(tmp_path / f"out-{i}.bin", n) for i, n in enumerate((0, 17, 300_000))]
    remotes = [f"{WORKDIR}/t-pull-files/out-{i}.bin" for i in range(3)]
    for local, remote in zip(sent, remotes, strict=True):
        any_device.push(local, remote)
    back = any_device.pull_files([(r, tmp_path / "back" / r.rpartition("/")[2]) for r in remotes])
    assert [b.read_bytes() for b in back] == [s.read_bytes() for s in sent]
    assert sorted(p.name for p in (tmp_path / "back").iterdir()) == [b.name for b in back]
    # All or none: the file that did arrive before the missing one is not kept.
    again = tmp_path / "again"
    with pytest.raises(DeviceError, match=r"(?i)no such file"):
        any_device.pull_files(
            [(remotes[2], again / "out-2.bin"), (f"{WORKDIR}/t-pull-files/absent.bin", again / "x")]
        )
    assert list(again.iterdir()) == []


def test_sha256_of_a_missing_file_is_none(any_device: AdbDevice) -> None:
    assert any_device.sha256(f"{WORKDIR}/nothing/here.bin") is None


def test_makedirs_exists_and_remove(any_device: AdbDevice) -> None:
    base = f"{WORKDIR}/t-dirs"
    any_device.makedirs(f"{base}/a/b")
    assert any_device.exists(f"{base}/a/b")
    any_device.remove(base, recursive=True)
    assert not any_device.exists(base)


# -- processes ------------------------------------------------------------------------------


@pytest.mark.parametrize("code", [0, 1, 7, 255])
def test_exit_codes_come_back_exactly(any_device: AdbDevice, code: int) -> None:
    result = any_device.run(["sh", "-c", f"exit {code}"], deadline_s=20)
    assert (result.exit_code, result.timed_out) == (code, False)


def test_stdout_and_stderr_arrive_separately_with_shell_v2(device: AdbDevice) -> None:
    result = device.run(["sh", "-c", "echo to-out; echo to-err >&2; echo more-out"], deadline_s=20)
    assert (result.stdout, result.stderr) == ("to-out\nmore-out\n", "to-err\n")


def test_without_shell_v2_the_marker_gives_the_exit_code_and_stderr_is_merged(
    old_device: AdbDevice,
) -> None:
    assert "shell_v2" not in old_device.features
    result = old_device.run(["sh", "-c", "echo to-out; echo to-err >&2; exit 3"], deadline_s=20)
    assert result.exit_code == 3
    assert result.stdout == "to-out\nto-err\n" and result.stderr == ""
    assert "__ETDEPLOY_EXIT" not in result.stdout


def test_run_uses_the_working_directory_and_environment(any_device: AdbDevice) -> None:
    any_device.makedirs(f"{WORKDIR}/t-cwd")
    result = any_device.run(
        ["sh", "-c", 'pwd; echo "$GREETING"'],
        deadline_s=20,
        cwd=f"{WORKDIR}/t-cwd",
        env={"GREETING": "hello 'world'"},
    )
    # The loopback phone's shell prints host paths (its sandbox); the tail is the phone's.
    assert result.stdout.splitlines()[0].endswith("/data/local/tmp/etdeploy/t-cwd")
    assert result.stdout.splitlines()[1] == "hello 'world'"
    missing = any_device.run(["true"], deadline_s=20, cwd=f"{WORKDIR}/t-no-such-dir")
    assert missing.exit_code == 125


@pytest.mark.parametrize("shell", ["shell_v2", "shell_v1"])
def test_a_hung_command_is_killed_on_the_device_at_its_deadline(
    bed: AdbTestbed, settings: AdbSettings, shell: str
) -> None:
    name = "p8" if shell == "shell_v2" else "p8-old"
    for phone in _healthy(bed, name):
        # As adbd does, hang up only the shell when the stream closes; the children
        # here ignore SIGHUP, so only etdeploy's group kill can end them.
        phone.on_stream_close = "sighup"
        device = AdbDevice(name, dataclasses.replace(settings, serial=phone.address))
        started = time.monotonic()
        result = device.run(["sh", "-c", "trap '' HUP; sleep 60 & sleep 60"], deadline_s=2)
        elapsed = time.monotonic() - started
        assert result.timed_out and 2 <= elapsed < 10
        assert wait_until(lambda p=phone: p.live_processes() == [], timeout=5), (
            phone.live_processes()
        )


def test_a_stopped_command_is_gone_at_its_deadline(
    device: AdbDevice, phone: LoopbackAdbDevice
) -> None:
    marker = f"stopped-{uuid.uuid4().hex[:8]}"
    phone.on_stream_close = "sighup"  # as adbd: only etdeploy's own kill ends the group
    out = device.run(["sh", "-c", "kill -STOP 0", marker], deadline_s=2)
    assert out.timed_out
    assert wait_until(lambda: processes_naming(marker) == [], timeout=5), processes_naming(marker)
    pids = phone.device_path(f"{WORKDIR}/.pids")
    assert not pids.is_dir() or list(pids.iterdir()) == []


def test_a_silent_command_is_killed_after_the_idle_timeout(
    device: AdbDevice, phone: LoopbackAdbDevice
) -> None:
    started = time.monotonic()
    result = device.run(["sh", "-c", "echo started; sleep 60"], deadline_s=60, idle_timeout_s=1.5)
    assert result.timed_out and result.stdout == "started\n"
    assert time.monotonic() - started < 10
    assert wait_until(lambda: phone.live_processes() == [])


def test_a_phone_going_offline_mid_run_is_a_retryable_device_error(
    device: AdbDevice, phone: LoopbackAdbDevice
) -> None:
    timer = threading.Timer(1.0, phone.drop_connections)
    timer.start()
    try:
        with pytest.raises(DeviceError, match="offline") as caught:
            device.run(["sleep", "30"], deadline_s=30)
    finally:
        timer.cancel()
    assert caught.value.retryable and caught.value.device == "pixel8"


def test_run_captures_the_runs_logcat_lines_tagged_executorch(
    device: AdbDevice, phone: LoopbackAdbDevice
) -> None:
    phone.log("ExecuTorch", "from an earlier run", when=time.time() - 30)
    result = device.run(
        [
            "sh",
            "-c",
            "log -t ExecuTorch 'Model loaded in 3 ms.'; log -t ActivityManager noise; echo ok",
        ],
        deadline_s=20,
    )
    assert result.stdout == "ok\n"
    assert "I ExecuTorch: Model loaded in 3 ms." in result.device_log
    assert "earlier run" not in result.device_log and "noise" not in result.device_log


def test_the_logcat_command_asks_for_the_tag_since_the_runs_start(device: AdbDevice) -> None:
    assert (
        device.logcat_command(1764700000.25)
        == "logcat -d -v threadtime -T 1764700000.250 -s ExecuTorch"
    )


def test_two_holders_of_one_phones_lock_run_one_after_the_other(
    phone: LoopbackAdbDevice, settings: AdbSettings
) -> None:
    first = AdbDevice("pixel8", dataclasses.replace(settings, serial=phone.address))
    second = AdbDevice("pixel8", dataclasses.replace(settings, serial=phone.address))
    events: list[str] = []
    first_holds = threading.Event()

    def hold() -> None:
        with device_lock(first, timeout_s=30):
            events.append("first in")
            first_holds.set()
            first.run(["sleep", "1"], deadline_s=20)
            events.append("first out")

    holder = threading.Thread(target=hold)
    holder.start()
    assert first_holds.wait(20)
    with pytest.raises(DeviceError, match="busy"), device_lock(second, timeout_s=0.3):
        pass
    with device_lock(second, timeout_s=30) as waited_s:
        events.append("second in")
    holder.join()
    assert events == ["first in", "first out", "second in"]
    assert waited_s > 0.3


def test_no_adb_server_outlives_its_testbed(tmp_path: Path) -> None:
    with adb_testbed(tmp_path, ["solo"]) as testbed:
        port = testbed.server.port
        assert len(adb_server_pids(port)) == 1
    assert adb_server_pids(port) == []
    assert not AdbServer(port, tmp_path).answering()


def test_a_run_whose_caller_is_interrupted_kills_the_runner_on_the_phone(
    device: AdbDevice, phone: LoopbackAdbDevice
) -> None:
    from tests.support.interrupt import interrupted_after

    # Like adbd, the phone only hangs up on a closed stream; a runner deaf to
    # SIGHUP survives that, so only etdeploy's own kill stops it.
    phone.on_stream_close = "sighup"
    try:
        with interrupted_after(1.5), pytest.raises(KeyboardInterrupt):
            device.run(["sh", "-c", "trap '' HUP; sleep 60"], deadline_s=60)
        assert wait_until(lambda: phone.live_processes() == [], timeout=5), phone.live_processes()
    finally:
        phone.on_stream_close = "kill-group"


@pytest.mark.parametrize("which", ["device", "old_device"])  # shell v2, and v1's exit marker
def test_a_flood_of_output_is_kept_as_head_and_tail_with_the_exit_code(
    which: str, request: pytest.FixtureRequest
) -> None:
    device: AdbDevice = request.getfixturevalue(which)
    out = device.run(["sh", "-c", "yes line | head -c 40000000; echo END; exit 7"], deadline_s=120)
    assert out.exit_code == 7
    assert out.stdout.startswith("line\n") and out.stdout.endswith("END\n")
    assert "characters of output dropped" in out.stdout and len(out.stdout) < 17_000_000
