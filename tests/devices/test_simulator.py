"""SimulatorDevice: simctl's device list, selection, booting and spawning.

Parsing and selection run on recorded `xcrun simctl list -j devices` output
(tests/data/simctl/). The end-to-end tests drive a real sshd on loopback whose
PATH starts with tests/support/fake_xcrun.py, the stand-in for Xcode's simctl.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from etdeploy.devices.simulator import (
    SimulatorDevice,
    SimulatorSettings,
    parse_simctl_devices,
    runtime_platform_version,
    select_simulator,
)
from etdeploy.devices.ssh import SshSettings
from etdeploy.errors import DeviceError, UsageError
from tests.support import fake_xcrun
from tests.support.sshd import SshServer, process_is_running, start_sshd

SAMPLES = Path(__file__).resolve().parent.parent / "data" / "simctl"
XCODE15 = SAMPLES / "xcode15-ios17.json"
XCODE12 = SAMPLES / "xcode12-unavailable-runtimes.json"

IPHONE_15_PRO_BOOTED = "D2E4C979-FFEA-4236-9F57-64C3209975A0"
IPHONE_15_ON_17_4 = "13094867-A44C-4F41-8D5A-4C54E4365C82"
IPHONE_15_ON_17_5 = "129AA2C7-CEFA-4D2C-B232-B5C362630413"


# -- parsing recorded output -----------------------------------------------------


def test_parses_every_simulator_of_a_recorded_xcode15_listing() -> None:
    simulators = parse_simctl_devices(XCODE15.read_text())
    assert len(simulators) == 39
    booted = [s for s in simulators if s.booted]
    assert [(s.name, s.udid, s.os_version) for s in booted] == [
        ("iPhone 15 Pro", IPHONE_15_PRO_BOOTED, "17.5")
    ]
    first = simulators[0]
    assert first.name == "iPhone SE (3rd generation)"
    assert first.runtime == "com.apple.CoreSimulator.SimRuntime.iOS-17-4"
    assert first.runtime_name == "iOS 17.4"
    assert first.platform == "iOS"
    assert first.state == "Shutdown"
    assert first.is_available
    assert first.device_type == "com.apple.CoreSimulator.SimDeviceType.iPhone-SE-3rd-generation"
    assert {s.os_version for s in simulators} == {"17.4", "17.5", "15.5"}


def test_parses_unavailable_simulators_and_other_platforms() -> None:
    simulators = parse_simctl_devices(XCODE12.read_text())
    assert len(simulators) == 143
    assert sum(s.is_available for s in simulators) == 27
    unavailable = next(s for s in simulators if not s.is_available)
    assert unavailable.availability_error == "runtime profile not found"
    assert {s.platform for s in simulators} == {"iOS", "tvOS", "watchOS"}
    booted = [s for s in simulators if s.booted]
    assert [(s.name, s.runtime_name) for s in booted] == [("iPhone 12 Pro Max", "iOS 14.1")]


def test_runtime_spellings_old_and_new() -> None:
    assert runtime_platform_version("com.apple.CoreSimulator.SimRuntime.iOS-17-5") == (
        "iOS",
        "17.5",
    )
    assert runtime_platform_version("com.apple.CoreSimulator.SimRuntime.watchOS-7-2") == (
        "watchOS",
        "7.2",
    )
    assert runtime_platform_version("iOS 12.1") == ("iOS", "12.1")


def test_output_that_is_not_a_device_list_is_a_device_error() -> None:
    with pytest.raises(DeviceError, match="not a device list"):
        parse_simctl_devices('xcrun: error: unable to find utility "simctl"')
    with pytest.raises(DeviceError, match="not a device list"):
        parse_simctl_devices('{"runtimes": []}')


# -- selection ------------------------------------------------------------------


@pytest.fixture(scope="module")
def xcode15() -> list:
    return parse_simctl_devices(XCODE15.read_text())


def test_selects_by_udid_in_any_case(xcode15: list) -> None:
    chosen = select_simulator(xcode15, udid=IPHONE_15_ON_17_4.lower())
    assert chosen.udid == IPHONE_15_ON_17_4


def test_selects_a_unique_name(xcode15: list) -> None:
    assert (
        select_simulator(xcode15, name="iPhone 14").udid == "5C29B0CE-58B0-4273-A0F5-2A826D0AB379"
    )


def test_a_name_on_several_runtimes_is_an_error_listing_them(xcode15: list) -> None:
    with pytest.raises(UsageError) as caught:
        select_simulator(xcode15, name="iPhone 15")
    assert "2 iOS simulators match name 'iPhone 15'" in caught.value.message
    assert IPHONE_15_ON_17_4 in (caught.value.hint or "")
    assert IPHONE_15_ON_17_5 in (caught.value.hint or "")


@pytest.mark.parametrize(
    "runtime",
    ["17.5", "iOS 17.5", "iOS-17-5", "com.apple.CoreSimulator.SimRuntime.iOS-17-5"],
)
def test_name_and_runtime_together_pick_one(xcode15: list, runtime: str) -> None:
    assert select_simulator(xcode15, name="iPhone 15", runtime=runtime).udid == IPHONE_15_ON_17_5


def test_a_runtime_alone_must_be_unambiguous(xcode15: list) -> None:
    with pytest.raises(UsageError, match=r"simulators match runtime '15\.5'"):
        select_simulator(xcode15, runtime="15.5")


def test_a_major_version_matches_its_minor_releases(xcode15: list) -> None:
    chosen = select_simulator(xcode15, name="iPhone 8", runtime="15")
    assert chosen.runtime_name == "iOS 15.5"


def test_no_match_is_an_error_listing_what_there_is(xcode15: list) -> None:
    with pytest.raises(DeviceError) as caught:
        select_simulator(xcode15, name="iPhone 99")
    assert "no available iOS simulator with name 'iPhone 99'" in caught.value.message
    assert "iPhone SE (3rd generation) (iOS 17.4, Shutdown" in (caught.value.hint or "")
    with pytest.raises(DeviceError, match="no simulator with UDID"):
        select_simulator(xcode15, udid="00000000-0000-0000-0000-000000000000")


def test_no_selector_takes_the_single_booted_simulator(xcode15: list) -> None:
    assert select_simulator(xcode15).udid == IPHONE_15_PRO_BOOTED
    shut_down = [s for s in xcode15 if not s.booted]
    with pytest.raises(UsageError, match="no iOS simulator is booted"):
        select_simulator(shut_down)


def test_unavailable_simulators_are_never_chosen() -> None:
    simulators = parse_simctl_devices(XCODE12.read_text())
    unavailable = next(s for s in simulators if not s.is_available and s.platform == "iOS")
    with pytest.raises(DeviceError, match="runtime profile not found"):
        select_simulator(simulators, udid=unavailable.udid)
    # "iPhone 8" exists on several runtimes, but only available ones count.
    names = [s for s in simulators if s.name == "iPhone 8"]
    available = [s for s in names if s.is_available]
    assert len(names) > len(available) == 1
    assert select_simulator(simulators, name="iPhone 8").udid == available[0].udid


def test_tvos_and_watchos_simulators_are_not_ios_candidates() -> None:
    simulators = parse_simctl_devices(XCODE12.read_text())
    tv = next(s for s in simulators if s.platform == "tvOS" and s.is_available)
    with pytest.raises(DeviceError, match="no available iOS simulator"):
        select_simulator(simulators, name=tv.name)


# -- end to end over ssh, with the simctl stand-in ---------------------------------


@dataclass
class FakeMac:
    server: SshServer
    state: Path
    log: Path
    root: Path

    def calls(self) -> list[list[str]]:
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines()]

    def state_of(self, udid: str) -> str:
        doc = json.loads(self.state.read_text())
        for entries in doc["devices"].values():
            for entry in entries:
                if entry["udid"] == udid:
                    return str(entry["state"])
        raise KeyError(udid)

    def settings(self, **overrides: object) -> SimulatorSettings:
        ssh = SshSettings(
            host=self.server.host,
            port=self.server.port,
            user=self.server.user,
            key_filename=str(self.server.key_filename),
            known_hosts=str(self.server.known_hosts),
            ssh_config=str(self.root / "no-ssh-config"),
            workdir=str(self.root / "mac-work"),
        )
        return SimulatorSettings(ssh=ssh, **overrides)  # type: ignore[arg-type]


@pytest.fixture
def fake_mac(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeMac]:
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    bin_dir = tmp_path / "mac-bin"
    fake_xcrun.install(bin_dir)
    state = tmp_path / "simctl-state.json"
    shutil.copyfile(XCODE15, state)
    log = tmp_path / "simctl-calls.jsonl"
    env = {
        "PATH": f"{bin_dir}:/usr/local/bin:/usr/bin:/bin",
        "FAKE_SIMCTL_STATE": str(state),
        "FAKE_SIMCTL_LOG": str(log),
    }
    with start_sshd(tmp_path / "sshd", set_env=env) as server:
        yield FakeMac(server=server, state=state, log=log, root=tmp_path)


def test_a_shutdown_simulator_is_booted_and_waited_for_before_spawning(fake_mac: FakeMac) -> None:
    settings = fake_mac.settings(name="iPhone 15", runtime="17.4")
    with SimulatorDevice(settings) as sim:
        assert sim.simulator.state == "Shutdown"
        out = sim.run(["/bin/echo", "hello from the simulator"], deadline_s=60)
    assert out.exit_code == 0
    assert out.stdout == "hello from the simulator\n"
    verbs = [call[1:3] for call in fake_mac.calls()]
    assert ["boot", IPHONE_15_ON_17_4] in verbs
    assert ["bootstatus", IPHONE_15_ON_17_4] in verbs
    assert verbs.index(["boot", IPHONE_15_ON_17_4]) < verbs.index(["bootstatus", IPHONE_15_ON_17_4])
    assert fake_mac.state_of(IPHONE_15_ON_17_4) == "Booted"
    spawn = fake_mac.calls()[-1]
    assert spawn == ["simctl", "spawn", IPHONE_15_ON_17_4, "/bin/echo", "hello from the simulator"]


def test_a_booted_simulator_is_not_booted_again(fake_mac: FakeMac) -> None:
    with SimulatorDevice(fake_mac.settings(udid=IPHONE_15_PRO_BOOTED)) as sim:
        assert sim.run(["/bin/true"], deadline_s=60).exit_code == 0
    verbs = [call[1] for call in fake_mac.calls()]
    assert "boot" not in verbs
    assert "bootstatus" not in verbs


def test_spawn_returns_the_exit_code_and_streams_and_passes_env(fake_mac: FakeMac) -> None:
    with SimulatorDevice(fake_mac.settings(udid=IPHONE_15_PRO_BOOTED)) as sim:
        out = sim.run(
            ["/bin/sh", "-c", 'echo "threads=$ET_THREADS"; echo oops >&2; exit 3'],
            deadline_s=60,
            env={"ET_THREADS": "4"},
        )
    assert out.exit_code == 3
    assert out.stdout == "threads=4\n"
    assert out.stderr == "oops\n"
    assert out.argv[:4] == ("xcrun", "simctl", "spawn", IPHONE_15_PRO_BOOTED)


def test_files_staged_on_the_mac_are_seen_by_the_spawned_process(
    fake_mac: FakeMac, tmp_path: Path
) -> None:
    local = tmp_path / "input.bin"
    local.write_bytes(os.urandom(4096))
    with SimulatorDevice(fake_mac.settings(udid=IPHONE_15_PRO_BOOTED)) as sim:
        pushed = sim.push(local, "job1/input.bin")
        assert pushed.remote == f"{sim.workdir}/job1/input.bin"
        assert sim.push(local, "job1/input.bin").skipped
        out = sim.run(
            ["/bin/sh", "-c", 'cp "$1" "$1.copy" && wc -c < "$1"', "sh", pushed.remote],
            deadline_s=60,
        )
        assert out.exit_code == 0, out.stderr
        assert out.stdout.strip() == "4096"
        back = sim.pull("job1/input.bin.copy", tmp_path / "back.bin")
    assert back.read_bytes() == local.read_bytes()


def test_info_describes_the_simulator(fake_mac: FakeMac) -> None:
    with SimulatorDevice(fake_mac.settings(name="iPhone 15", runtime="iOS 17.5")) as sim:
        info = sim.info()
        lock_key = sim.lock_key()
    machine = os.uname().machine
    arch = {"aarch64": "arm64", "amd64": "x86_64"}.get(machine, machine)
    assert info.os == "ios-simulator"
    assert info.transport == "ios-simulator"
    assert info.abi == f"ios-simulator-{arch}"
    assert info.model == "iPhone 15"
    assert info.os_version == "17.5"
    assert info.serial == IPHONE_15_ON_17_5
    assert info.extra["runtime"] == "com.apple.CoreSimulator.SimRuntime.iOS-17-5"
    assert lock_key.endswith(IPHONE_15_ON_17_5)
    assert f"ssh:{fake_mac.server.user}@127.0.0.1:{fake_mac.server.port}" in lock_key


def test_a_shutdown_simulator_with_booting_disallowed_is_an_error(fake_mac: FakeMac) -> None:
    settings = fake_mac.settings(udid=IPHONE_15_ON_17_4, boot=False)
    with SimulatorDevice(settings) as sim, pytest.raises(DeviceError, match="is not booted"):
        sim.run(["/bin/true"], deadline_s=60)
    assert "spawn" not in [call[1] for call in fake_mac.calls()]


def test_an_ambiguous_selection_is_reported_before_anything_runs(fake_mac: FakeMac) -> None:
    with SimulatorDevice(fake_mac.settings(name="iPhone 15")) as sim, pytest.raises(UsageError):
        sim.run(["/bin/true"], deadline_s=60)
    assert [call[1] for call in fake_mac.calls()] == ["list"]


def test_a_mac_without_simctl_gives_a_clear_error(fake_mac: FakeMac) -> None:
    settings = fake_mac.settings(udid=IPHONE_15_PRO_BOOTED, xcrun="/nonexistent/xcrun")
    with SimulatorDevice(settings) as sim, pytest.raises(DeviceError) as caught:
        sim.run(["/bin/true"], deadline_s=60)
    assert "listing simulators failed" in caught.value.message
    assert "xcode-select -p" in (caught.value.hint or "")


def test_a_spawned_runner_past_its_deadline_is_killed(fake_mac: FakeMac, tmp_path: Path) -> None:
    runner = tmp_path / "runner.sh"
    pid_file = tmp_path / "runner.pid"
    runner.write_text(f"#!/bin/sh\necho $$ > {pid_file}\necho loading\nexec sleep 300\n")
    with SimulatorDevice(fake_mac.settings(udid=IPHONE_15_PRO_BOOTED)) as sim:
        staged = sim.push(runner, "job2/runner", mode=0o755)
        out = sim.run([staged.remote], deadline_s=1.5)
    assert out.timed_out
    assert out.stdout == "loading\n"
    assert not process_is_running(int(pid_file.read_text()))


def test_simulator_settings_from_one_device_table() -> None:
    settings = SimulatorSettings.from_mapping(
        {"host": "mac", "user": "ci", "name": "iPhone 15", "runtime": "17.5", "boot": False}
    )
    # The Mac is an ssh device from etdeploy.toml: no keeper unless persist_s says so.
    assert settings.ssh == SshSettings(host="mac", user="ci", persist_s=0.0)
    assert (settings.name, settings.runtime, settings.boot) == ("iPhone 15", "17.5", False)
    with pytest.raises(UsageError, match=r"devices\.sim\.boot: expected bool"):
        SimulatorSettings.from_mapping({"host": "mac", "boot": "yes"}, where="devices.sim")
