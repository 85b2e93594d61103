"""`etdeploy run digits --device pixel8`, end to end through the REAL adb server
(adbutils' binary) to a loopback phone that speaks the device side of the ADB
wire protocol (tests/support/loopback_adb.py). No phone is attached here; the
loopback phone runs what it is sent on this machine, so the runner pushed to
it is the host build (named with --runner / the device table's `runner`), where
a Pixel gets the arm64 bundle (tests/devices/test_run_arm64.py runs that one
under qemu-aarch64) or, with an NDK set up, the NDK build.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from etdeploy.cli import app
from etdeploy.devices.transfer import PARTIAL_MARKER
from tests.support.adb_server import AdbTestbed, adb_testbed
from tests.support.device_config import write_config

pytestmark = pytest.mark.slow

MiB = 1 << 20


@pytest.fixture(scope="module")
def host_runner() -> Path:
    from etdeploy.runner_build import ensure_runner

    return ensure_runner("host").directory


@pytest.fixture
def bed(tmp_path: Path) -> Iterator[AdbTestbed]:
    """A fresh adb server on a free port and one Pixel 8 (empty /data/local/tmp)."""
    with adb_testbed(tmp_path / "adb", ("pixel",)) as testbed:
        yield testbed


@pytest.fixture
def config(tmp_path: Path, bed: AdbTestbed, host_runner: Path) -> Path:
    table = {"serial": bed.serial("pixel"), "adb_port": bed.server.port, "runner": str(host_runner)}
    return write_config(tmp_path / "etdeploy.toml", {"pixel8": table})


def run(*args: str | Path) -> Any:
    return CliRunner().invoke(app, ["run", *map(str, args)], catch_exceptions=False)


def files_under(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def test_digits_runs_on_the_phone_and_a_second_run_sends_nothing(
    bed: AdbTestbed, config: Path, tmp_path: Path
) -> None:
    first = run(
        "digits", "--device", "pixel8", "--config", config, "-n", "3", "--json", tmp_path / "1.json"
    )
    assert first.exit_code == 0, first.output
    assert "PASS" in first.stdout
    result = json.loads((tmp_path / "1.json").read_text())
    assert result["device"]["transport"] == "adb"
    assert result["device"]["model"] == "Pixel 8" and result["device"]["os"] == "android"
    assert result["device"]["serial"] == bed.serial("pixel")
    assert result["latency_ms"]["n"] == 3
    assert result["deploy"]["bytes_sent"] > 1 * MiB  # the runner, its libraries, the .pte, inputs

    second = run(
        "digits", "--device", "pixel8", "--config", config, "-n", "3", "--json", tmp_path / "2.json"
    )
    assert second.exit_code == 0, second.output
    again = json.loads((tmp_path / "2.json").read_text())
    assert again["deploy"]["bytes_sent"] == 0 and again["deploy"]["files_sent"] == 0
    # The job's own directory is removed; the content-addressed files stay.
    workdir = bed.phones["pixel"].device_path("/data/local/tmp/etdeploy")
    assert sorted(p.name for p in workdir.iterdir() if not p.name.startswith(".")) == [
        "inputs",
        "programs",
        "runners",
    ]


def test_the_friendly_name_a_user_types_finds_the_phone(
    bed: AdbTestbed, host_runner: Path, tmp_path: Path
) -> None:
    done = run("digits", "--device", "pixel8", "--adb-port", bed.server.port, "--runner", host_runner,
               "-n", "1", "--keep", "--config", write_config(tmp_path / "empty.toml", {}))  # fmt: skip
    assert done.exit_code == 0, done.output
    jobs = [
        p
        for p in bed.phones["pixel"].device_path("/data/local/tmp/etdeploy").iterdir()
        if p.name[:2] == "20"
    ]
    assert len(jobs) == 1 and (jobs[0] / "s0-result.json").is_file()  # --keep kept it


def test_a_connection_dropped_mid_push_is_exit_3_leaves_no_half_file_and_the_next_run_succeeds(
    bed: AdbTestbed, config: Path, tmp_path: Path, host_runner: Path
) -> None:
    phone = bed.phones["pixel"]
    phone.faults.drop_after_send_bytes = 1 * MiB
    done = run(
        "digits", "--device", "pixel8", "--config", config, "-n", "1", "--json", tmp_path / "r.json"
    )
    assert done.exit_code == 3, done.output
    assert "error:" in done.output and "hint:" in done.output and "Traceback" not in done.output
    error = json.loads((tmp_path / "r.json").read_text())["error"]
    assert error["infrastructure"] and error["retryable"]
    # Every file under its real name is whole: what the cut left is a partial.
    from etdeploy.runner_build import runner_from_path

    bundle = runner_from_path(host_runner)
    pushed = files_under(phone.device_path("/data/local/tmp/etdeploy"))
    whole = {p.name: p.read_bytes() for p in bundle.files}
    for name, data in pushed.items():
        base = Path(name).name
        if PARTIAL_MARKER in base:
            continue
        if base in whole:
            assert data == whole[base], f"{name} is not whole"
    assert any(PARTIAL_MARKER in Path(n).name for n in pushed)

    phone.faults.drop_after_send_bytes = None
    bed.server.reconnect(phone)
    again = run("digits", "--device", "pixel8", "--config", config, "-n", "1")
    assert again.exit_code == 0, again.output
    leftovers = [
        n for n in files_under(phone.device_path("/data/local/tmp/etdeploy")) if PARTIAL_MARKER in n
    ]
    assert leftovers == []


def test_a_hung_runner_is_killed_on_the_phone_at_the_deadline(
    bed: AdbTestbed, config: Path
) -> None:
    done = run("digits", "--device", "pixel8", "--config", config, "-n", "100000000", "--warmup", "0",
               "--deadline", "3")  # fmt: skip
    assert done.exit_code == 3, done.output
    assert "timed out" in done.output
    assert bed.phones["pixel"].live_processes() == []


def test_a_runner_for_another_abi_is_refused_before_anything_is_pushed(
    tmp_path: Path, host_runner: Path
) -> None:
    arm = {"properties": {"ro.product.cpu.abi": "arm64-v8a", "ro.product.cpu.abilist": "arm64-v8a"}}
    with adb_testbed(tmp_path / "adb", {"arm": arm}) as testbed:
        table = {
            "serial": testbed.serial("arm"),
            "adb_port": testbed.server.port,
            "runner": str(host_runner),
        }
        config = write_config(tmp_path / "etdeploy.toml", {"pixel8": table})
        done = run("digits", "--device", "pixel8", "--config", config)
        assert done.exit_code == 2, done.output
        assert "arm64-v8a" in done.output and "x86_64" in done.output
        assert not testbed.phones["arm"].device_path("/data/local/tmp/etdeploy/runners").exists()


def test_two_runs_on_one_phone_take_turns(bed: AdbTestbed, config: Path, tmp_path: Path) -> None:
    command = [sys.executable, "-m", "etdeploy", "run", "digits", "--device", "pixel8",
               "--config", str(config), "-n", "20"]  # fmt: skip
    runs = [
        subprocess.Popen(
            [*command, "--json", str(tmp_path / f"{i}.json")],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for i in range(2)
    ]
    for process in runs:
        output, _ = process.communicate(timeout=300)
        assert process.returncode == 0, output
    a, b = (json.loads((tmp_path / f"{i}.json").read_text())["device_lock"] for i in range(2))
    first, second = sorted((a, b), key=lambda lock: lock["held_from"])
    assert first["held_to"] <= second["held_from"]
