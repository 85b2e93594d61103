"""ARM code on arm64 devices, end to end: `etdeploy run --device <arm64 phone>`
through the REAL adb server to a loopback phone in arm64 mode, and over a REAL
sshd to an aarch64 Linux host stand-in.

No phone or ARM board is reachable here. Both stand-ins report arm64 (the phone
arm64-v8a, the host `uname -m` aarch64), so etdeploy picks the self-contained
arm64 bundle on its own, and both run what they are sent under qemu-aarch64
with an empty sysroot (tests/support/arm64.py): the runner, XNNPACK's NEON
kernels and ExecuTorch's optimized ARM kernels execute as ARM instructions,
emulated. Emulated latency is not a device's and nothing here reads it as one.
What this does not cover: Android's userland (bionic, SELinux, the shell user)
on a real phone; the bundle brings its own glibc, so bionic is never involved.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from etdeploy.cli import app
from etdeploy.runner_build import KIND_ARM64, RunnerBundle, binary_abi, runner_from_path
from tests.support.adb_server import AdbTestbed, adb_testbed
from tests.support.arm64 import require_arm64
from tests.support.device_config import ssh_table, write_config
from tests.support.memory import assert_account
from tests.support.processes import processes_naming
from tests.support.sshd import SshServer, start_sshd

pytestmark = pytest.mark.slow

MODELS = Path(__file__).resolve().parent.parent / "data" / "models"
TWO_IO = f"{MODELS / 'two_io.py'}:build"
DYNAMIC = f"{MODELS / 'two_io.py'}:dynamic_mlp"

# A program that stands for a runner failing on the device, as ARM code: it
# prints upstream's first line, then either faults on a null store (a real
# SIGSEGV in an ARM kernel) or blocks forever without a word (a hung delegate).
FAULTY_RUNNER_C = r"""
#include <stdio.h>
#include <unistd.h>
int main(void) {
  puts("Model loaded in 0.5 ms.");
  fflush(stdout);
#ifdef CRASH
  volatile int *nowhere = 0;
  *nowhere = 1;
#endif
  for (;;) pause();
  return 0;
}
"""


def run(*args: str | Path) -> Any:
    return CliRunner().invoke(app, ["run", *map(str, args)], catch_exceptions=False)


@pytest.fixture(autouse=True)
def no_ndk_build(monkeypatch: pytest.MonkeyPatch) -> None:
    # With an NDK build set up, a phone would get that instead (it is preferred).
    monkeypatch.delenv("ANDROID_NDK", raising=False)
    monkeypatch.delenv("EXECUTORCH_ANDROID_PREFIX", raising=False)
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)


@pytest.fixture(scope="module")
def arm64_bundle() -> RunnerBundle:
    require_arm64()
    from etdeploy.runner_build import ensure_runner

    return ensure_runner("aarch64")


@pytest.fixture(scope="module")
def host_runner() -> Path:
    from etdeploy.runner_build import ensure_runner

    return ensure_runner("host").directory


@pytest.fixture(scope="module")
def phone(
    tmp_path_factory: pytest.TempPathFactory, arm64_bundle: RunnerBundle
) -> Iterator[AdbTestbed]:
    """A real adb server and one arm64 Pixel 8 that runs ARM code under qemu."""
    with adb_testbed(tmp_path_factory.mktemp("adb-arm64"), {"pixel": {"arm64": True}}) as bed:
        yield bed


@pytest.fixture(scope="module")
def board(
    tmp_path_factory: pytest.TempPathFactory, arm64_bundle: RunnerBundle
) -> Iterator[SshServer]:
    """A real sshd standing for an aarch64 Linux host (a Raspberry Pi, a Jetson)."""
    with start_sshd(tmp_path_factory.mktemp("sshd-arm64"), arm64=True) as server:
        yield server


def phone_config(tmp_path: Path, bed: AdbTestbed, **extra: object) -> Path:
    table = {"serial": bed.serial("pixel"), "adb_port": bed.server.port, **extra}
    return write_config(tmp_path / "etdeploy.toml", {"pixel8": table})


def board_config(tmp_path: Path, server: SshServer, **extra: object) -> Path:
    return write_config(
        tmp_path / "etdeploy.toml", {"pi": {**ssh_table(server, tmp_path), **extra}}
    )


def result_of(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


def assert_the_arm64_bundle_ran(result: dict[str, Any], bundle: RunnerBundle) -> None:
    runner = result["runner"]
    assert runner["abi"] == "arm64-v8a" and runner["flavor"] == "etdeploy"
    ran = runner_from_path(Path(runner["path"]))
    assert ran.directory == bundle.directory and ran.kind == KIND_ARM64


def emulated_processes(marker: str) -> list[int]:
    """Live qemu-aarch64 processes whose command line mentions marker."""
    return processes_naming("qemu-aarch64", marker)


@pytest.fixture(scope="module")
def faulty_runners(
    tmp_path_factory: pytest.TempPathFactory, arm64_bundle: RunnerBundle
) -> dict[str, Path]:
    """Static aarch64 builds of FAULTY_RUNNER_C: "crash" and "hang"."""
    from etdeploy.runner_build.arm64 import cross_tool

    gcc = cross_tool("gcc")
    assert gcc is not None
    directory = tmp_path_factory.mktemp("faulty-arm64")
    source = directory / "faulty.c"
    source.write_text(FAULTY_RUNNER_C)
    built = {}
    for name, defines in (("crash", ["-DCRASH"]), ("hang", [])):
        # Each in its own directory: a runner's siblings travel with it.
        (directory / name).mkdir()
        binary = directory / name / "executor_runner"
        subprocess.run(
            [gcc, "-static", "-O0", *defines, "-o", str(binary), str(source)], check=True
        )
        assert binary_abi(binary) == "arm64-v8a"
        built[name] = binary
    return built


# -- the arm64 phone ----------------------------------------------------------------------


def test_digits_fp32_runs_as_arm_code_on_the_phone_and_matches_this_host(
    phone: AdbTestbed, arm64_bundle: RunnerBundle, tmp_path: Path
) -> None:
    config = phone_config(tmp_path, phone)
    done = run("digits", "--device", "pixel8", "--config", config, "-n", "2", "--warmup", "1",
               "--host-check", "--json", tmp_path / "r.json")  # fmt: skip
    assert done.exit_code == 0, done.output
    result = result_of(tmp_path / "r.json")
    assert result["status"] == "passed", result["verdict"]["reason"]
    assert result["device"]["abi"] == "arm64-v8a" and result["device"]["os"] == "android"
    assert_the_arm64_bundle_ran(result, arm64_bundle)
    # The ARM runner measures itself too. Under qemu-user its process is the emulator,
    # whose translated code is counted by no part: the account sums, its remainder is
    # not held to a phone's.
    assert_account(result, unexplained_within=None)
    # ARM against this x86_64 host's runtime: different kernels, within fp32's tolerance.
    host = result["host_check"]
    assert host["device_vs_host"]["passed"] and host["host_vs_reference"]["passed"]
    # What ran on the phone is ARM code, which this machine cannot execute itself.
    pushed = phone.phones["pixel"].device_path("/data/local/tmp/etdeploy/runners")
    (runner_dir,) = list(pushed.iterdir())
    assert binary_abi(runner_dir / "etdeploy_runner.bin") == "arm64-v8a"
    with pytest.raises(OSError, match="Exec format error"):
        subprocess.run([runner_dir / "ld-linux-aarch64.so.1", "--version"], check=False)


def test_digits_int8_passes_on_arm_kernels(phone: AdbTestbed, tmp_path: Path) -> None:
    done = run("digits", "--quantize", "int8", "--device", "pixel8", "--config",
               phone_config(tmp_path, phone), "-n", "1", "--warmup", "0", "--json", tmp_path / "r.json")  # fmt: skip
    assert done.exit_code == 0, done.output
    result = result_of(tmp_path / "r.json")
    assert result["artifact"]["quantization"] == "int8" and result["status"] == "passed"


def test_two_outputs_are_each_verified_on_the_phone(phone: AdbTestbed, tmp_path: Path) -> None:
    samples = tmp_path / "samples"
    samples.mkdir()
    rng = np.random.default_rng(11)
    for i in range(2):
        np.savez(samples / f"s{i}.npz",
                 left=np.linspace(-2, 2, 12, dtype=np.float32).reshape(2, 6) * (i + 1),
                 right=rng.uniform(-1, 1, size=(2, 3)).astype(np.float32))  # fmt: skip
    done = run(TWO_IO, "--inputs", samples, "--device", "pixel8", "--config",
               phone_config(tmp_path, phone), "-n", "1", "--warmup", "0", "--json", tmp_path / "r.json")  # fmt: skip
    assert done.exit_code == 0, done.output
    metrics = result_of(tmp_path / "r.json")["verdict"]["metrics"]
    assert {(m["sample"], m["output"]) for m in metrics} == {
        (s, o) for s in ("s0", "s1") for o in (0, 1)
    }


def test_a_dynamic_batch_runs_at_each_samples_size_on_the_phone(
    phone: AdbTestbed, tmp_path: Path
) -> None:
    rng = np.random.default_rng(5)
    for batch in (1, 7):
        np.save(
            tmp_path / f"b{batch:02d}.npy", rng.uniform(-2, 2, size=(batch, 5)).astype(np.float32)
        )
    done = run(DYNAMIC, "--inputs", tmp_path, "--device", "pixel8", "--config",
               phone_config(tmp_path, phone), "-n", "1", "--warmup", "0", "--json", tmp_path / "r.json")  # fmt: skip
    assert done.exit_code == 0, done.output
    metrics = result_of(tmp_path / "r.json")["verdict"]["metrics"]
    assert [m["shape"] for m in metrics] == [[1, 3], [7, 3]]


def test_the_arm64_runner_past_its_deadline_is_killed_on_the_phone(
    phone: AdbTestbed, tmp_path: Path
) -> None:
    done = run("digits", "--device", "pixel8", "--config", phone_config(tmp_path, phone),
               "-n", "100000000", "--warmup", "0", "--deadline", "4")  # fmt: skip
    assert done.exit_code == 3, done.output
    assert "timed out" in done.output
    assert phone.phones["pixel"].live_processes() == []


def test_a_crashing_arm_runner_is_a_runner_failure_with_its_signal(
    phone: AdbTestbed, faulty_runners: dict[str, Path], tmp_path: Path
) -> None:
    done = run("digits", "--device", "pixel8", "--config", phone_config(tmp_path, phone),
               "--runner", faulty_runners["crash"], "-n", "1")  # fmt: skip
    assert done.exit_code == 3, done.output
    assert "SIGSEGV" in done.output and "Model loaded in 0.5 ms." in done.output


def test_a_silent_hung_arm_runner_is_killed_after_the_idle_timeout(
    phone: AdbTestbed, faulty_runners: dict[str, Path], tmp_path: Path
) -> None:
    done = run("digits", "--device", "pixel8", "--config", phone_config(tmp_path, phone),
               "--runner", faulty_runners["hang"], "-n", "1", "--idle-timeout", "3",
               "--deadline", "60")  # fmt: skip
    assert done.exit_code == 3, done.output
    # Its silence stopped it, not the deadline: the message and the hint say so.
    assert "said nothing for 3 s and was stopped (--idle-timeout)" in done.output
    assert "raise --idle-timeout" in done.output and "deadline" not in done.output
    assert phone.phones["pixel"].live_processes() == []


def test_the_host_runner_is_refused_by_the_arm64_phone_before_anything_is_pushed(
    tmp_path: Path, host_runner: Path, arm64_bundle: RunnerBundle
) -> None:
    with adb_testbed(tmp_path / "adb", {"arm": {"arm64": True}}) as bed:
        config = write_config(tmp_path / "etdeploy.toml", {"pixel8": {
            "serial": bed.serial("arm"), "adb_port": bed.server.port, "runner": str(host_runner)}})  # fmt: skip
        done = run("digits", "--device", "pixel8", "--config", config)
        assert done.exit_code == 2, done.output
        assert "x86_64" in done.output and "arm64-v8a" in done.output
        assert not bed.phones["arm"].device_path("/data/local/tmp/etdeploy/runners").exists()


def test_the_arm64_bundle_is_refused_by_an_x86_64_phone_before_anything_is_pushed(
    tmp_path: Path, arm64_bundle: RunnerBundle
) -> None:
    with adb_testbed(tmp_path / "adb", ("x86",)) as bed:
        config = write_config(tmp_path / "etdeploy.toml", {"emulator": {
            "serial": bed.serial("x86"), "adb_port": bed.server.port,
            "runner": str(arm64_bundle.directory)}})  # fmt: skip
        done = run("digits", "--device", "emulator", "--config", config)
        assert done.exit_code == 2, done.output
        assert "arm64-v8a" in done.output and "x86_64" in done.output
        assert not bed.phones["x86"].device_path("/data/local/tmp/etdeploy/runners").exists()


# -- the aarch64 Linux host over SSH --------------------------------------------------------


def test_digits_runs_over_ssh_on_an_aarch64_host_with_the_arm64_bundle(
    board: SshServer, arm64_bundle: RunnerBundle, tmp_path: Path
) -> None:
    config = board_config(tmp_path, board)
    done = run("digits", "--device", "pi", "--config", config, "-n", "2", "--warmup", "1",
               "--host-check", "--json", tmp_path / "r.json")  # fmt: skip
    assert done.exit_code == 0, done.output
    result = result_of(tmp_path / "r.json")
    assert result["status"] == "passed", result["verdict"]["reason"]
    assert result["device"]["os"] == "linux" and result["device"]["abi"] == "linux-arm64"
    assert result["host_check"]["device_vs_host"]["passed"]
    assert_the_arm64_bundle_ran(result, arm64_bundle)


def test_the_arm64_runner_past_its_deadline_is_killed_over_ssh(
    board: SshServer, tmp_path: Path
) -> None:
    import sys
    import time

    workdir = tmp_path / "remote-work"
    command = [sys.executable, "-m", "etdeploy", "run", "digits", "--device", "pi",
               "--config", str(board_config(tmp_path, board)), "-n", "100000000",
               "--warmup", "0", "--deadline", "20"]  # fmt: skip
    with subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    ) as job:
        seen: list[int] = []
        while not seen and job.poll() is None:
            seen = emulated_processes(str(workdir))  # the runner, emulated, on the "board"
            time.sleep(0.2)
        output, _ = job.communicate(timeout=120)
    assert seen, output
    assert job.returncode == 3, output
    assert "timed out" in output
    assert emulated_processes(str(workdir)) == []


def test_a_crashing_arm_runner_over_ssh_is_a_runner_failure_with_its_signal(
    board: SshServer, faulty_runners: dict[str, Path], tmp_path: Path
) -> None:
    done = run("digits", "--device", "pi", "--config", board_config(tmp_path, board),
               "--runner", faulty_runners["crash"], "-n", "1")  # fmt: skip
    assert done.exit_code == 3, done.output
    assert "uncaught target signal 11" in done.output  # the ARM program did fault
    assert "SIGSEGV" in done.output


def test_the_host_runner_is_refused_by_the_aarch64_host(
    board: SshServer, host_runner: Path, tmp_path: Path
) -> None:
    config = board_config(tmp_path, board, runner=str(host_runner))
    done = run("digits", "--device", "pi", "--config", config)
    assert done.exit_code == 2, done.output
    assert "x86_64" in done.output and "arm64" in done.output
    assert not (tmp_path / "remote-work" / "runners").exists()
