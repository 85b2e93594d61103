"""`etdeploy run digits --device pixel8`, end to end through the REAL adb server
(adbutils' binary) to a loopback phone that speaks the device side of the ADB
wire protocol (tests/support/loopback_adb.py). No phone is attached here; the
loopback phone runs what it is sent on this machine and reports x86_64, as an
emulator does. Most tests here name the host build (--runner / the device
table's `runner`); without one it gets what an emulator gets, the host build
with its own glibc (runner_build/x86_64.py), where a Pixel gets the arm64 bundle
(tests/devices/test_run_arm64.py runs that one under qemu-aarch64) or, with an
NDK set up, the NDK build.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from etdeploy.cli import app
from etdeploy.devices.transfer import PARTIAL_MARKER
from tests.support.adb_server import AdbTestbed, adb_testbed
from tests.support.device_config import write_config
from tests.support.memory import assert_account

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
    # The runner measured itself on the phone: the same account as on this machine.
    assert_account(result, unexplained_within=0.05)

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


def test_an_x86_64_phone_runs_digits_with_no_ndk_and_no_runner_named(
    bed: AdbTestbed, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ANDROID_NDK", raising=False)
    monkeypatch.delenv("EXECUTORCH_ANDROID_PREFIX", raising=False)
    table = {"serial": bed.serial("pixel"), "adb_port": bed.server.port}  # no `runner`
    config = write_config(tmp_path / "etdeploy.toml", {"emulator": table})
    done = run("digits", "-d", "emulator", "--config", config, "-n", "1",
               "--json", tmp_path / "r.json")  # fmt: skip
    assert done.exit_code == 0, done.output
    result = json.loads((tmp_path / "r.json").read_text())
    assert result["runner"]["kind"] == "x86_64-glibc" and result["runner"]["abi"] == "x86_64"
    assert result["verdict"]["passed"] is True
    # What the phone ran is the launcher and, beside it, glibc's loader and libc.
    runners = bed.phones["pixel"].device_path("/data/local/tmp/etdeploy/runners")
    (pushed,) = [p for p in runners.iterdir() if p.name.startswith("x86_64-")]
    assert {"etdeploy_runner", "ld-linux-x86-64.so.2", "libc.so.6"} <= {
        p.name for p in pushed.iterdir()
    }


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
    assert len(jobs) == 1 and (jobs[0] / "batch.json").is_file()  # --keep kept it


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

    # What the phone confirmed, not the bytes handed to a socket ("N of N sent").
    line = next(x for x in done.output.splitlines() if x.startswith("error:"))
    assert "confirmed on the device" in line or "the device had received" in line, line

    phone.faults.drop_after_send_bytes = None
    bed.server.reconnect(phone)
    again = run("digits", "--device", "pixel8", "--config", config, "-n", "1")
    assert again.exit_code == 0, again.output
    workdir = phone.device_path("/data/local/tmp/etdeploy")
    leftovers = [n for n in files_under(workdir) if PARTIAL_MARKER in n]
    assert leftovers == []
    # The cut run's job directory went with the next run, not only the next run's own.
    assert [p.name for p in workdir.iterdir() if p.name[:2] == "20"] == []


def test_a_program_altered_on_the_phone_is_detected_and_sent_again(
    bed: AdbTestbed, config: Path, tmp_path: Path
) -> None:
    first = run("digits", "--device", "pixel8", "--config", config, "-n", "1",
                "--json", tmp_path / "1.json")  # fmt: skip
    assert first.exit_code == 0, first.output
    result = json.loads((tmp_path / "1.json").read_text())
    pte = bed.phones["pixel"].device_path(
        f"/data/local/tmp/etdeploy/programs/{result['artifact']['sha256'][:24]}.pte"
    )
    st = pte.stat()
    data = bytearray(pte.read_bytes())
    data[-100:] = bytes(100)  # the same size, other bytes, and its mtime put back
    pte.write_bytes(bytes(data))
    os.utime(pte, ns=(st.st_atime_ns, st.st_mtime_ns))
    second = run("digits", "--device", "pixel8", "--config", config, "-n", "1",
                 "--json", tmp_path / "2.json")  # fmt: skip
    assert second.exit_code == 0, second.output
    deploy = json.loads((tmp_path / "2.json").read_text())["deploy"]
    assert (deploy["files_sent"], deploy["bytes_sent"]) == (1, st.st_size)
    assert hashlib.sha256(pte.read_bytes()).hexdigest() == result["artifact"]["sha256"]


def test_verify_remote_hashes_every_file_on_the_phone_and_sends_none_that_match(
    bed: AdbTestbed, config: Path, tmp_path: Path
) -> None:
    phone = bed.phones["pixel"]
    assert run("digits", "--device", "pixel8", "--config", config, "-n", "1").exit_code == 0
    before = len(phone.opened_services)
    trusting = run("digits", "--device", "pixel8", "--config", config, "-n", "1")
    assert trusting.exit_code == 0, trusting.output
    assert not any("sha256sum" in s for s in phone.opened_services[before:])
    before = len(phone.opened_services)
    verified = run("digits", "--device", "pixel8", "--config", config, "-n", "1",
                   "--verify-remote", "--json", tmp_path / "v.json")  # fmt: skip
    assert verified.exit_code == 0, verified.output
    deploy = json.loads((tmp_path / "v.json").read_text())["deploy"]
    assert deploy["bytes_sent"] == 0
    hashed = sum("sha256sum" in s for s in phone.opened_services[before:])
    assert hashed == deploy["files_skipped"] > 0


def test_a_silent_runner_is_stopped_by_the_idle_timeout_and_named_so(
    bed: AdbTestbed, config: Path, tmp_path: Path
) -> None:
    silent = tmp_path / "silent" / "executor_runner"
    silent.parent.mkdir()
    silent.write_text("#!/bin/sh\necho 'Model loaded in 0.5 ms.'\nexec sleep 600\n")
    silent.chmod(0o755)
    done = run("digits", "--device", "pixel8", "--config", config, "--runner", silent,
               "-n", "1", "--idle-timeout", "3", "--deadline", "120")  # fmt: skip
    assert done.exit_code == 3, done.output
    assert "Traceback" not in done.output
    error = next(x for x in done.output.splitlines() if x.startswith("error:"))
    assert "said nothing for 3 s and was stopped (--idle-timeout)" in error
    assert "raise --idle-timeout" in " ".join(done.output.split())
    assert bed.phones["pixel"].live_processes() == []


def test_a_serial_adb_cannot_take_is_exit_2_with_a_hint_and_nothing_runs(
    bed: AdbTestbed, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    table = {"serial": "127.0.0.1:1;touch X", "adb_port": bed.server.port}
    config = write_config(tmp_path / "etdeploy.toml", {"phone": table})
    before = len(bed.phones["pixel"].opened_services)
    done = run("digits", "--device", "phone", "--config", config)
    assert done.exit_code == 2, done.output
    assert "Traceback" not in done.output
    error = next(x for x in done.output.splitlines() if x.startswith("error:"))
    assert "devices.phone" in error and "is not an adb serial" in error
    assert "adb devices" in done.output  # the hint says what a serial looks like
    assert not (tmp_path / "X").exists()
    assert not bed.phones["pixel"].device_path("/data/local/tmp/X").exists()
    assert len(bed.phones["pixel"].opened_services) == before


def test_a_full_phone_is_exit_3_with_the_clean_hint_and_clean_makes_room(
    bed: AdbTestbed, config: Path, tmp_path: Path, host_runner: Path
) -> None:
    from etdeploy.runner_build import runner_from_path
    from tests.support.tmpfs import small_tmpfs

    phone = bed.phones["pixel"]
    needed = sum(p.stat().st_size for p in runner_from_path(host_runner).files)
    workdir = phone.device_path("/data/local/tmp/etdeploy")
    with small_tmpfs(workdir, needed + 3 * MiB):
        programs = workdir / "programs"
        programs.mkdir()
        month_ago = time.time() - 30 * 86400
        old = []
        for i in range(3):  # what earlier runs left, unused for a month
            path = programs / f"{i:024x}.pte"
            path.write_bytes(os.urandom(2 * MiB))
            os.utime(path, (month_ago, month_ago))
            old.append(path)
        done = run("digits", "--device", "pixel8", "--config", config, "-n", "1")
        assert done.exit_code == 3, done.output
        assert "Traceback" not in done.output
        error = next(x for x in done.output.splitlines() if x.startswith("error:"))
        assert "ran out of space" in error and "No space left on device" in error
        assert "etdeploy clean --device pixel8" in " ".join(done.output.split())
        assert [n for n in files_under(workdir) if PARTIAL_MARKER in n or ".tmp" in n] == []
        assert [p for p in workdir.iterdir() if p.name[:2] == "20"] == []

        cleaned = CliRunner().invoke(
            app, ["clean", "--device", "pixel8", "--config", str(config), "--older-than", "7d"]
        )
        assert cleaned.exit_code == 0, cleaned.output
        assert not any(p.exists() for p in old)
        again = run("digits", "--device", "pixel8", "--config", config, "-n", "1")
        assert again.exit_code == 0, again.output


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
