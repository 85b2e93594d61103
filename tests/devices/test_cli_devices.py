"""`etdeploy devices` as a user runs it: a subprocess against the real adb server
with loopback phones (tests/devices/conftest.py) and a real sshd."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.adb_server import AdbTestbed, adb_server_pids, free_port
from tests.support.device_config import ssh_table, write_config
from tests.support.sshd import SshServer


def etdeploy(args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """Run the CLI with no adb server in the environment but what the test names."""
    environ = {
        k: v for k, v in os.environ.items() if not k.startswith(("ANDROID_", "SSH_AUTH_SOCK"))
    }
    # Anything that falls through to the environment meets a closed port on a host
    # etdeploy treats as remote: it fails at once and starts no server.
    # COLUMNS=80, as an 80-column terminal exports it: piped output is still whole
    # (a serial on one line, not folded over three).
    environ.update({"ANDROID_ADB_SERVER_HOST": "127.0.0.2", "ANDROID_ADB_SERVER_PORT": str(free_port()),
                    "COLUMNS": "80", **env})  # fmt: skip
    return subprocess.run(
        [sys.executable, "-m", "etdeploy", *args], cwd=cwd, env=environ,
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def server_flags(phones: AdbTestbed) -> list[str]:
    return ["--adb-host", "127.0.0.1", "--adb-port", str(phones.server.port)]


def test_devices_lists_the_loopback_phones_with_model_and_abi(
    phones: AdbTestbed, tmp_path: Path
) -> None:
    done = etdeploy(["devices", *server_flags(phones)], tmp_path)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    for name, model, abi in (("p8", "Pixel 8", "x86_64"), ("tablet", "Pixel Tablet", "arm64-v8a")):
        line = next(line for line in lines if phones.serial(name) in line)
        assert model in line and abi in line and "android 1" in line and "device" in line
    assert any(line.split("│")[1].strip() == "local" for line in lines if "│" in line)


def test_devices_json_parses_and_names_each_phone(phones: AdbTestbed, tmp_path: Path) -> None:
    config = write_config(tmp_path / "etdeploy.toml", {
        "desk": {"transport": "adb", "serial": phones.serial("tablet")},
    })  # fmt: skip
    done = etdeploy(
        ["devices", "--json", "-", "--config", str(config), *server_flags(phones)], tmp_path
    )
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["schema"] == "etdeploy.devices/1"
    rows = {row["name"]: row for row in doc["devices"]}
    # The tablet shows once, under its alias; the two Pixel 8s under their serials.
    assert set(rows) == {"local", "desk", phones.serial("p8"), phones.serial("p8-b")}
    desk = rows["desk"]
    assert (desk["target"], desk["model"], desk["abi"], desk["configured"], desk["reachable"]) == (
        phones.serial("tablet"), "Pixel Tablet", "arm64-v8a", True, True,
    )  # fmt: skip
    p8 = rows[phones.serial("p8")]
    assert (p8["model"], p8["abi"], p8["soc"], p8["os"], p8["os_version"], p8["state"]) == (
        "Pixel 8", "x86_64", "Tensor G3", "android", "15", "device",
    )  # fmt: skip
    assert set(p8) == {"name", "transport", "target", "configured", "reachable", "state", "model", "os",
                       "os_version", "abi", "soc", "via", "error", "hint"}  # fmt: skip


def test_devices_says_it_started_an_adb_server_and_that_no_phone_is_attached(
    tmp_path: Path,
) -> None:
    port = free_port()
    # The server it starts is this test's: its own port, its own HOME (adbkey), no USB.
    env = {"ANDROID_ADB_SERVER_HOST": "127.0.0.1", "ANDROID_ADB_SERVER_PORT": str(port),
           "HOME": str(tmp_path), "ADB_USB": "0", "ADB_MDNS": "0", "ADB_EMU": "0"}  # fmt: skip
    try:
        started = etdeploy(["devices"], tmp_path, **env)
        assert started.returncode == 0, started.stderr
        assert (
            f"started an adb server at 127.0.0.1:{port}, as `adb devices` does; it keeps running "
            f"(`adb -P {port} kill-server` stops it)"
        ) in started.stdout
        assert f"no phone is attached to the adb server at 127.0.0.1:{port}" in started.stdout
        assert "USB debugging" in started.stdout
        again = etdeploy(["devices", "--json", "-"], tmp_path, **env)
        assert json.loads(again.stdout)["adb_servers"] == [
            {"server": f"127.0.0.1:{port}", "answered": True, "started": False, "phones": 0}
        ]
    finally:
        for pid in adb_server_pids(port):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def test_an_unreachable_ssh_host_is_a_row_with_its_error(
    phones: AdbTestbed, sshd: SshServer, tmp_path: Path
) -> None:
    config = write_config(tmp_path / "etdeploy.toml", {
        "mac": ssh_table(sshd, tmp_path),
        "gone": ssh_table(sshd, tmp_path, port=free_port()),
    })  # fmt: skip
    done = etdeploy(["devices", "--config", str(config), *server_flags(phones)], tmp_path)
    assert done.returncode == 0, done.stderr
    assert "gone: cannot connect to 127.0.0.1:" in done.stdout and "hint:" in done.stdout
    mac_line = next(line for line in done.stdout.splitlines() if "│ mac " in line)
    assert "ssh" in mac_line and "linux" in mac_line and "ready" in mac_line


def test_a_missing_config_file_is_exit_2(tmp_path: Path) -> None:
    done = etdeploy(["devices", "--config", str(tmp_path / "nope.toml")], tmp_path)
    assert done.returncode == 2
    assert "error: config file not found" in done.stderr and "hint:" in done.stderr


def test_devices_starts_without_torch_or_executorch(phones: AdbTestbed, tmp_path: Path) -> None:
    modules_file = tmp_path / "modules.txt"
    code = (
        "import sys\nfrom etdeploy.cli import app\n"
        f"try:\n    app({['devices', '--json', '-', *server_flags(phones)]!r})\nexcept SystemExit as e:\n"
        "    code = e.code\n"
        f"open({str(modules_file)!r}, 'w').write('\\n'.join(sys.modules))\nsys.exit(code)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["devices"]  # it did list, not just start
    loaded = set(modules_file.read_text().split())
    assert "etdeploy.devices.registry" in loaded and "etdeploy.devices.adb.server" in loaded
    assert not {m for m in loaded if m.split(".")[0] in ("torch", "executorch")}


@pytest.mark.parametrize("flag", ["--adb-port=0", "--adb-port=70000"])
def test_an_adb_port_out_of_range_is_exit_2(tmp_path: Path, flag: str) -> None:
    done = etdeploy(["devices", flag], tmp_path)
    assert done.returncode == 2 and "adb-port" in done.stderr
