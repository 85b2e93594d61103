"""open_device, describe_devices and check_runner_abi through real servers: the adb
server adbutils ships with loopback phones (tests/devices/conftest.py) and a real
OpenSSH sshd on loopback."""

from __future__ import annotations

import json
import shutil
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from etdeploy import config as config_module
from etdeploy.config import Config, load_config
from etdeploy.devices import listing
from etdeploy.devices.adb import AdbDevice
from etdeploy.devices.base import DeviceInfo
from etdeploy.devices.listing import describe_devices
from etdeploy.devices.local import LocalDevice
from etdeploy.devices.registry import TRANSPORTS, check_runner_abi, configured_runner, open_device
from etdeploy.devices.simulator import SimulatorDevice
from etdeploy.devices.ssh import SshDevice
from etdeploy.errors import DeviceError, UsageError
from tests.support import fake_xcrun
from tests.support.adb_server import AdbTestbed, adb_server_pids, free_port
from tests.support.device_config import ssh_table, write_config
from tests.support.sshd import SshServer, start_sshd

# A port nobody listens on, on a host etdeploy treats as another machine: an adb
# lookup that falls through to the environment fails at once and starts nothing.
NOWHERE_HOST = "127.0.0.2"
SIMCTL_SAMPLE = Path(__file__).resolve().parent.parent / "data" / "simctl" / "xcode15-ios17.json"


@pytest.fixture(autouse=True)
def no_ambient_adb(monkeypatch: pytest.MonkeyPatch) -> int:
    """Point the environment's adb server at nowhere: only what a test names is used."""
    dead = free_port()
    monkeypatch.setenv("ANDROID_ADB_SERVER_HOST", NOWHERE_HOST)
    monkeypatch.setenv("ANDROID_ADB_SERVER_PORT", str(dead))
    monkeypatch.delenv("ANDROID_SERIAL", raising=False)
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    return dead


def at(phones: AdbTestbed) -> dict[str, object]:
    """--adb-host/--adb-port for the test's own server."""
    return {"adb_host": "127.0.0.1", "adb_port": phones.server.port}


def server_table(phones: AdbTestbed, **values: object) -> dict[str, object]:
    return {"transport": "adb", "adb_host": "127.0.0.1", "adb_port": phones.server.port, **values}


@pytest.fixture
def opened() -> Iterator[list[object]]:
    """Devices a test opened; closed at teardown."""
    devices: list[object] = []
    yield devices
    for device in devices:
        device.close()  # type: ignore[attr-defined]


# -- local and the default -------------------------------------------------------------


def test_local_is_this_machine_and_the_default() -> None:
    device = open_device("local", Config())
    assert isinstance(device, LocalDevice) and device.name == "local"
    assert device.info().transport == "local"
    # No name, no [run] device, no ANDROID_SERIAL: the embedded default.
    assert isinstance(open_device(None, Config()), LocalDevice)


def test_lock_timeout_reaches_the_device(phones: AdbTestbed) -> None:
    assert open_device("local", Config(), lock_timeout_s=7.5).lock_timeout_s == 7.5
    phone = open_device(phones.serial("p8"), Config(), lock_timeout_s=3, **at(phones))  # type: ignore[arg-type]
    assert phone.lock_timeout_s == 3
    assert open_device("local", Config()).lock_timeout_s == 600.0


def test_a_configured_local_device_takes_its_workdir_relative_to_the_config(tmp_path: Path) -> None:
    cfg = load_config(
        write_config(tmp_path / "etdeploy.toml", {"box": {"transport": "local", "workdir": "work"}})
    )
    device = open_device("box", cfg)
    assert isinstance(device, LocalDevice) and device.name == "box"
    assert device.workdir == str(tmp_path / "work")


def test_every_transport_the_config_accepts_is_registered() -> None:
    assert set(TRANSPORTS) == set(config_module.TRANSPORTS)


# -- adb: alias, serial, friendly name, ANDROID_SERIAL ------------------------------


def test_a_configured_alias_opens_its_serial(phones: AdbTestbed, tmp_path: Path) -> None:
    cfg = load_config(write_config(tmp_path / "etdeploy.toml", {
        "desk": server_table(phones, serial=phones.serial("tablet")),
    }))  # fmt: skip
    device = open_device("desk", cfg)
    assert isinstance(device, AdbDevice)
    assert (device.name, device.serial) == ("desk", phones.serial("tablet"))
    info = device.info()
    assert (info.model, info.abi) == ("Pixel Tablet", "arm64-v8a")


def test_no_name_takes_the_run_device_from_the_config(phones: AdbTestbed, tmp_path: Path) -> None:
    cfg = load_config(write_config(
        tmp_path / "etdeploy.toml", {"desk": server_table(phones, serial=phones.serial("p8-b"))},
        run={"device": "desk"},
    ))  # fmt: skip
    device = open_device(None, cfg)
    assert (device.name, getattr(device, "serial", None)) == ("desk", phones.serial("p8-b"))


def test_a_configured_adb_device_without_a_serial_is_found_by_its_name(
    phones: AdbTestbed, tmp_path: Path
) -> None:
    cfg = load_config(
        write_config(tmp_path / "etdeploy.toml", {"pixel-tablet": server_table(phones)})
    )
    device = open_device("pixel-tablet", cfg)
    assert isinstance(device, AdbDevice) and device.serial == phones.serial("tablet")


def test_an_exact_serial_opens_that_phone(phones: AdbTestbed) -> None:
    device = open_device(phones.serial("p8-b"), Config(), **at(phones))  # type: ignore[arg-type]
    assert isinstance(device, AdbDevice)
    assert device.serial == device.name == phones.serial("p8-b")


@pytest.mark.parametrize("name", ["pixeltablet", "Pixel_Tablet", "pixel-tablet", "TANGORPRO"])
def test_a_friendly_name_matches_model_or_product(phones: AdbTestbed, name: str) -> None:
    device = open_device(name, Config(), **at(phones))  # type: ignore[arg-type]
    assert isinstance(device, AdbDevice)
    assert (device.name, device.serial) == (name, phones.serial("tablet"))


def test_android_serial_picks_the_phone_when_no_name_is_given(
    phones: AdbTestbed, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANDROID_SERIAL", phones.serial("p8-b"))
    for name in (None, "adb"):
        device = open_device(name, Config(), **at(phones))  # type: ignore[arg-type]
        assert isinstance(device, AdbDevice) and device.serial == phones.serial("p8-b")


def test_two_phones_of_one_model_are_an_error_that_lists_both(
    phones: AdbTestbed, tmp_path: Path
) -> None:
    cfg = load_config(
        write_config(tmp_path / "etdeploy.toml", {"mac": {"transport": "ssh", "host": "mac"}})
    )
    with pytest.raises(UsageError) as caught:
        open_device("pixel8", cfg, **at(phones))  # type: ignore[arg-type]
    error = caught.value
    assert error.exit_code == 2
    assert error.message == "2 attached devices match 'pixel8'"
    hint = error.hint or ""
    assert (
        f"{phones.serial('p8')} (Pixel 8)" in hint and f"{phones.serial('p8-b')} (Pixel 8)" in hint
    )
    assert "Tablet" not in hint
    assert (
        "--device 127.0.0.1:" in hint
        and 'devices.NAME table in etdeploy.toml with serial = "127.0.0.1:' in hint
    )
    assert "devices in etdeploy.toml: mac" in hint


def test_no_device_answering_is_a_device_error_that_lists_what_is_attached(
    phones: AdbTestbed,
) -> None:
    """Exit 3, not 2: CI tells a phone that is missing from a command line that is wrong."""
    with pytest.raises(DeviceError) as caught:
        open_device("pixel9", Config(), **at(phones))  # type: ignore[arg-type]
    assert caught.value.message == "no attached device matches 'pixel9'"
    assert caught.value.exit_code == 3
    hint = caught.value.hint or ""
    for name, model in (("p8", "Pixel 8"), ("p8-b", "Pixel 8"), ("tablet", "Pixel Tablet")):
        assert f"{phones.serial(name)} ({model})" in hint
    assert "devices in etdeploy.toml: none" in hint


def test_a_configured_phone_that_is_not_attached_is_a_device_error(
    phones: AdbTestbed, tmp_path: Path
) -> None:
    cfg = load_config(write_config(tmp_path / "etdeploy.toml", {"pixel9": server_table(phones)}))
    with pytest.raises(DeviceError) as caught:
        open_device("pixel9", cfg)
    assert caught.value.exit_code == 3 and "no attached device matches 'pixel9'" in str(
        caught.value
    )


def test_a_name_close_to_a_configured_one_is_asked_about_in_the_hint(
    phones: AdbTestbed, tmp_path: Path
) -> None:
    cfg = load_config(write_config(tmp_path / "etdeploy.toml", {"desk": server_table(phones)}))
    with pytest.raises(DeviceError) as caught:
        open_device("dsek", cfg, **at(phones))  # type: ignore[arg-type]
    assert caught.value.exit_code == 3
    assert caught.value.message == "no attached device matches 'dsek'"
    assert (caught.value.hint or "").startswith("did you mean --device desk? ")


def test_adb_with_several_phones_and_no_android_serial_is_an_error(phones: AdbTestbed) -> None:
    with pytest.raises(UsageError, match="3 are attached") as caught:
        open_device("adb", Config(), **at(phones))  # type: ignore[arg-type]
    assert "ANDROID_SERIAL" in (caught.value.hint or "")


def test_an_unknown_name_with_no_adb_server_says_why_adb_was_asked() -> None:
    with pytest.raises(DeviceError) as caught:
        open_device("mcbook", Config())
    error = caught.value
    assert error.exit_code == 3
    assert "'mcbook' is neither local nor in etdeploy.toml" in error.message
    assert f"no adb server answers at {NOWHERE_HOST}" in error.message


# -- where the adb server is: flags over the table over the environment ----------------


def test_adb_flags_override_the_table(
    phones: AdbTestbed, tmp_path: Path, no_ambient_adb: int
) -> None:
    cfg = load_config(write_config(tmp_path / "etdeploy.toml", {
        "desk": {"transport": "adb", "serial": phones.serial("tablet"), "adb_host": NOWHERE_HOST,
                 "adb_port": no_ambient_adb},
    }))  # fmt: skip
    with pytest.raises(DeviceError, match=f"no adb server answers at {NOWHERE_HOST}"):
        open_device("desk", cfg)
    device = open_device("desk", cfg, **at(phones))  # type: ignore[arg-type]
    assert getattr(device, "serial", None) == phones.serial("tablet")


def test_the_table_overrides_the_environment(phones: AdbTestbed, tmp_path: Path) -> None:
    # The environment points nowhere (no_ambient_adb); the table names the real server.
    cfg = load_config(write_config(tmp_path / "etdeploy.toml", {
        "desk": server_table(phones, serial=phones.serial("p8")),
    }))  # fmt: skip
    assert getattr(open_device("desk", cfg), "serial", None) == phones.serial("p8")


def test_the_environment_names_the_server_when_nothing_else_does(
    phones: AdbTestbed, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANDROID_ADB_SERVER_HOST", "127.0.0.1")
    monkeypatch.setenv("ANDROID_ADB_SERVER_PORT", str(phones.server.port))
    device = open_device(phones.serial("p8"), Config())
    assert getattr(device, "serial", None) == phones.serial("p8")


# -- bad settings name their key ----------------------------------------------------------


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({"transport": "adb", "adb_port": "5999"}, "etdeploy.toml: devices.pixel8.adb_port: expected int, got '5999'"),
        ({"transport": "adb", "serail": "X"}, "etdeploy.toml: devices.pixel8: unknown key 'serail'"),
        ({"transport": "adb", "adb_port": 70000}, "etdeploy.toml: devices.pixel8: adb server port 70000 is out of range"),
        ({"transport": "adb", "start_server": 1}, "etdeploy.toml: devices.pixel8.start_server: expected bool, got 1"),
        ({"transport": "ssh", "host": "mac", "port": "22"}, "etdeploy.toml: devices.pixel8.port: expected int, got '22'"),
        ({"transport": "ssh", "port": 22}, "etdeploy.toml: devices.pixel8: host is required"),
        ({"transport": "local", "runner": 3}, "etdeploy.toml: devices.pixel8.runner: expected str, got 3"),
        ({"transport": "local", "workdir": 3}, "etdeploy.toml: devices.pixel8.workdir: expected str, got 3"),
    ],
)  # fmt: skip
def test_a_bad_setting_is_a_usage_error_naming_its_key(
    tmp_path: Path, table: dict[str, object], message: str
) -> None:
    cfg = load_config(write_config(tmp_path / "etdeploy.toml", {"pixel8": table}))
    with pytest.raises(UsageError) as caught:
        open_device("pixel8", cfg)
    assert caught.value.message == message
    assert caught.value.exit_code == 2 and caught.value.hint


def test_a_runner_path_in_the_table_is_relative_to_the_config(
    phones: AdbTestbed, tmp_path: Path
) -> None:
    cfg = load_config(write_config(tmp_path / "etdeploy.toml", {
        "desk": server_table(phones, serial=phones.serial("p8"), runner="runners/executor_runner"),
    }))  # fmt: skip
    assert configured_runner("desk", cfg) == tmp_path / "runners" / "executor_runner"
    assert configured_runner(phones.serial("p8"), cfg) is None
    # The table still opens: `runner` is the registry's, never the transport's.
    assert open_device("desk", cfg).transport == "adb"


# -- ssh and the simulator ----------------------------------------------------------------


def test_a_configured_ssh_device_opens_and_runs_through_sshd(
    sshd: SshServer, tmp_path: Path, opened: list[object]
) -> None:
    cfg = load_config(write_config(tmp_path / "etdeploy.toml", {"mac": ssh_table(sshd, tmp_path)}))
    device = open_device("mac", cfg, lock_timeout_s=9)
    opened.append(device)
    assert isinstance(device, SshDevice) and device.name == "mac" and device.lock_timeout_s == 9
    out = device.run(["sh", "-c", "echo hello from $(uname -s)"], deadline_s=30)
    assert (out.exit_code, out.stdout) == (0, "hello from Linux\n")
    info = device.info()
    assert (info.transport, info.os, info.serial) == (
        "ssh",
        "linux",
        f"{sshd.user}@127.0.0.1:{sshd.port}",
    )


def test_a_configured_simulator_gets_its_selectors_and_its_macs_ssh_settings(
    tmp_path: Path,
) -> None:
    cfg = load_config(write_config(tmp_path / "etdeploy.toml", {
        "sim": {"transport": "ios-simulator", "host": "mac.local", "user": "ci", "name": "iPhone 15",
                "runtime": "17.5", "ssh_config": str(tmp_path / "none")},
    }))  # fmt: skip
    device = open_device("sim", cfg)
    assert isinstance(device, SimulatorDevice) and device.name == "sim"
    assert (device.settings.name, device.settings.runtime) == ("iPhone 15", "17.5")
    assert (device.settings.ssh.host, device.settings.ssh.user) == ("mac.local", "ci")


# -- describe_devices ----------------------------------------------------------------------


def test_describe_lists_local_configured_and_attached_devices(
    phones: AdbTestbed, sshd: SshServer, tmp_path: Path
) -> None:
    closed = free_port()
    cfg = load_config(write_config(tmp_path / "etdeploy.toml", {
        "desk": server_table(phones, serial=phones.serial("tablet")),
        "mac": ssh_table(sshd, tmp_path),
        "gone": ssh_table(sshd, tmp_path, port=closed),
        "broken": {"transport": "adb", "serial": 5},
        "ghost": server_table(phones, serial="127.0.0.1:1"),
    }))  # fmt: skip
    rows = {row.name: row for row in describe_devices(cfg, **at(phones))}  # type: ignore[arg-type]
    assert list(rows) == [
        "local", "desk", "mac", "gone", "broken", "ghost",
        *sorted((phones.serial("p8"), phones.serial("p8-b"))),
    ]  # fmt: skip
    assert rows["local"].reachable and rows["local"].transport == "local"
    desk = rows["desk"]
    assert (desk.configured, desk.reachable, desk.state, desk.target) == (
        True,
        True,
        "device",
        phones.serial("tablet"),
    )
    assert (desk.model, desk.abi, desk.soc, desk.os_version) == (
        "Pixel Tablet",
        "arm64-v8a",
        "gs201",
        "14",
    )
    assert desk.via == f"127.0.0.1:{phones.server.port}"
    mac = rows["mac"]
    assert (mac.reachable, mac.os, mac.state, mac.error) == (True, "linux", "ready", "")
    gone = rows["gone"]
    assert not gone.reachable and gone.state == "unreachable"
    assert f"cannot connect to 127.0.0.1:{closed}" in gone.error and gone.hint
    broken = rows["broken"]
    assert (broken.state, broken.reachable) == ("bad config", False)
    assert broken.error == "etdeploy.toml: devices.broken.serial: expected str, got 5"
    assert (rows["ghost"].state, rows["ghost"].reachable) == ("absent", False)
    for name in ("p8", "p8-b"):
        row = rows[phones.serial(name)]
        assert (row.model, row.abi, row.os, row.os_version) == (
            "Pixel 8",
            "x86_64",
            "android",
            "15",
        )
        assert (row.configured, row.reachable, row.state) == (False, True, "device")


def test_the_survey_says_each_server_answered_and_how_many_phones_it_has(
    phones: AdbTestbed, no_ambient_adb: int
) -> None:
    survey = listing.survey_devices(Config(), **at(phones))  # type: ignore[arg-type]
    (server,) = survey.adb_servers
    assert (server.server, server.answered, server.started, server.phones) == (
        f"127.0.0.1:{phones.server.port}", True, False, 3,
    )  # fmt: skip
    elsewhere = listing.survey_devices(Config(), adb_host=NOWHERE_HOST, adb_port=no_ambient_adb)
    assert [s.to_json() for s in elsewhere.adb_servers] == [{
        "server": f"{NOWHERE_HOST}:{no_ambient_adb}", "answered": False, "started": False,
        "phones": 0,
    }]  # fmt: skip


def test_describe_with_no_adb_server_elsewhere_is_a_row_and_starts_nothing(
    no_ambient_adb: int,
) -> None:
    rows = describe_devices(Config(), adb_host=NOWHERE_HOST, adb_port=no_ambient_adb)
    assert [row.name for row in rows] == ["local", "adb"]
    adb = rows[1]
    assert (adb.state, adb.reachable, adb.target) == (
        "no server",
        False,
        f"{NOWHERE_HOST}:{no_ambient_adb}",
    )
    assert "no adb server answers" in adb.error
    assert adb_server_pids(no_ambient_adb) == []


def test_describe_does_not_wait_long_for_a_host_that_never_answers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_ambient_adb: int
) -> None:
    # A listener that never accepts: the TCP handshake completes, no SSH banner comes.
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    monkeypatch.setattr(listing, "PROBE_TIMEOUT_S", 1.0)
    table = {"transport": "ssh", "host": "127.0.0.1", "port": silent.getsockname()[1],
             "banner_timeout_s": 120, "connect_timeout_s": 120, "ssh_config": str(tmp_path / "none")}  # fmt: skip
    cfg = load_config(write_config(tmp_path / "etdeploy.toml", {"hung": table}))
    started = time.monotonic()
    try:
        rows = {
            row.name: row
            for row in describe_devices(cfg, adb_host=NOWHERE_HOST, adb_port=no_ambient_adb)
        }
    finally:
        silent.close()
    assert time.monotonic() - started < 10
    assert not rows["hung"].reachable and rows["hung"].error


# -- the runner's ABI ---------------------------------------------------------------------


def _info(
    abi: str, os: str = "android", *, transport: str = "adb", abilist: str = ""
) -> DeviceInfo:
    extra = {"abilist": abilist} if abilist else {}
    return DeviceInfo(name="dut", transport=transport, serial="S", os=os, abi=abi, extra=extra)


@pytest.mark.parametrize(
    ("device", "runner"),
    [
        (_info("arm64-v8a"), "arm64-v8a"),
        (_info("x86_64"), "x86_64"),
        (_info("arm64-v8a", abilist="arm64-v8a,armeabi-v7a"), "armeabi-v7a"),
        # An x86_64 emulator image with ARM translation lists arm64-v8a too.
        (_info("x86_64", abilist="x86_64,arm64-v8a"), "arm64-v8a"),
        (_info("arm64-v8a"), "unknown"),
        (_info("linux-x86_64", "linux", transport="ssh"), "x86_64"),
        (_info("darwin-arm64", "darwin", transport="ssh"), "darwin-arm64"),
        # LocalDevice on an Apple-silicon Mac says arm64-v8a; the host runner says darwin-arm64.
        (_info("arm64-v8a", "darwin", transport="local"), "darwin-arm64"),
        # A Mach-O header does not tell a simulator build from a macOS one.
        (_info("ios-simulator-arm64", "ios-simulator", transport="ios-simulator"), "darwin-arm64"),
    ],
)  # fmt: skip
def test_a_runner_the_device_can_execute_passes(device: DeviceInfo, runner: str) -> None:
    check_runner_abi(device, runner)


@pytest.mark.parametrize(
    ("device", "runner", "message", "hint"),
    [
        (_info("arm64-v8a"), "x86_64", "the runner is built for x86_64, but dut is arm64-v8a",
         "etdeploy runner build --abi arm64-v8a"),
        # Pixel 7 and later run 64-bit code only.
        (_info("arm64-v8a", abilist="arm64-v8a"), "armeabi-v7a", "built for armeabi-v7a, but dut is arm64-v8a",
         "--runner"),
        (_info("linux-x86_64", "linux", transport="ssh"), "darwin-arm64",
         "the runner is a macOS/iOS (Mach-O) program built for darwin-arm64, but dut runs linux",
         "build the runner on dut itself"),
        (_info("ios-simulator-arm64", "ios-simulator", transport="ios-simulator"), "arm64-v8a",
         "an Android/Linux (ELF) program", "ios_harness/README.md"),
        (_info("ios-simulator-arm64", "ios-simulator", transport="ios-simulator"), "darwin-x86_64",
         "built for darwin-x86_64, but dut is ios-simulator-arm64", "ios_harness"),
        (_info("x86_64", "linux", transport="local"), "arm64-v8a", "built for arm64-v8a, but dut is x86_64",
         "etdeploy runner build"),
    ],
)  # fmt: skip
def test_a_runner_for_another_abi_is_refused_with_a_hint(
    device: DeviceInfo, runner: str, message: str, hint: str
) -> None:
    with pytest.raises(UsageError) as caught:
        check_runner_abi(device, runner)
    assert message in caught.value.message and hint in (caught.value.hint or "")
    assert caught.value.exit_code == 2


def test_the_abi_check_reads_the_phones_abi_list_through_adb(phones: AdbTestbed) -> None:
    info = open_device("pixeltablet", Config(), **at(phones)).info()  # type: ignore[arg-type]
    assert info.extra["abilist"] == "arm64-v8a,armeabi-v7a,armeabi"
    check_runner_abi(info, "armeabi-v7a")
    with pytest.raises(UsageError, match="built for x86_64, but pixeltablet is arm64-v8a"):
        check_runner_abi(info, "x86_64")


def test_describe_shows_a_configured_simulator_on_a_mac_without_booting_it(
    tmp_path: Path, no_ambient_adb: int
) -> None:
    # A real sshd whose PATH starts with the simctl stand-in (tests/support/fake_xcrun.py).
    bin_dir = tmp_path / "mac-bin"
    fake_xcrun.install(bin_dir)
    state = tmp_path / "simctl-state.json"
    shutil.copyfile(SIMCTL_SAMPLE, state)
    log = tmp_path / "simctl-calls.jsonl"
    env = {"PATH": f"{bin_dir}:/usr/local/bin:/usr/bin:/bin", "FAKE_SIMCTL_STATE": str(state),
           "FAKE_SIMCTL_LOG": str(log)}  # fmt: skip
    with start_sshd(tmp_path / "sshd", set_env=env) as mac:
        mac_table = {k: v for k, v in ssh_table(mac, tmp_path).items() if k != "transport"}
        cfg = load_config(write_config(tmp_path / "etdeploy.toml", {
            "sim": {"transport": "ios-simulator", **mac_table, "name": "iPhone 15", "runtime": "17.4"},
            "either": {"transport": "ios-simulator", **mac_table, "name": "iPhone 15"},
        }))  # fmt: skip
        rows = {
            r.name: r for r in describe_devices(cfg, adb_host=NOWHERE_HOST, adb_port=no_ambient_adb)
        }
    sim = rows["sim"]
    assert (sim.reachable, sim.transport, sim.os, sim.os_version) == (
        True,
        "ios-simulator",
        "ios-simulator",
        "17.4",
    )
    assert (sim.model, sim.state, sim.via) == (
        "iPhone 15",
        "shutdown",
        f"{mac.user}@127.0.0.1:{mac.port}",
    )
    either = rows["either"]
    assert (either.reachable, either.state) == (False, "bad config")
    assert "iOS simulators match" in either.error
    # Listing asked simctl for the list only: nothing was booted.
    assert {json.loads(line)[1] for line in log.read_text().splitlines()} == {"list"}
