"""`etdeploy run TINY_LM_FOLDER` end to end on the other device kinds: an x86_64 host
over a real sshd on loopback, and an arm64 phone behind the real adb server that runs
the self-contained arm64 bundle under qemu-user (tests/support/arm64.py). Generation
happens there, through the runner's --generate; the tokens come back and are held to
float and quantized eager here, as on this machine.

The 8da4w program is the session's one build (the local run's, read back from the
cache), so each device is compared with the same program run here: over SSH the same
runner code on the same CPU gives the same tokens; on ARM other kernels run
(XNNPACK's NEON paths, another rounding of the per-token activation scales), so the
gates must pass but a near-tie may fall the other way.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.pipeline.llm.conftest import LmRun, run_lm
from tests.support.adb_server import AdbTestbed, adb_testbed
from tests.support.arm64 import require_arm64
from tests.support.device_config import ssh_table, write_config
from tests.support.sshd import SshServer, start_sshd
from tests.support.tiny_lm import TinyLm

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def no_ndk_build(monkeypatch: pytest.MonkeyPatch) -> None:
    # With an NDK build set up, the phone would get that instead (it is preferred).
    monkeypatch.delenv("EXECUTORCH_ANDROID_PREFIX", raising=False)


@pytest.fixture(scope="module")
def sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshServer]:
    with start_sshd(tmp_path_factory.mktemp("sshd-lm")) as server:
        yield server


@pytest.fixture(scope="module")
def arm64_phone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AdbTestbed]:
    """A real adb server and one arm64 Pixel 8 that runs ARM code under qemu."""
    require_arm64()
    with adb_testbed(tmp_path_factory.mktemp("adb-lm-arm64"), {"pixel": {"arm64": True}}) as bed:
        yield bed


def _same_program(run: LmRun, int4_run: LmRun) -> None:
    assert run.done.returncode == 0, run.done.stderr
    assert run.document["status"] == "passed", run.document["verdict"]["reason"]
    assert run.document["artifact"]["sha256"] == int4_run.document["artifact"]["sha256"]
    # A fresh device: the program and every prompt's ids went over (the runner too,
    # unless preflight's --describe put it there first).
    deploy = run.document["deploy"]
    assert deploy["files_sent"] >= 1 + 6
    assert deploy["files_sent"] + deploy["files_skipped"] >= 2 + 6


def test_an_ssh_host_generates_what_this_machine_generates(
    tiny_lm: TinyLm, int4_run: LmRun, sshd: SshServer, tmp_path: Path
) -> None:
    config = write_config(tmp_path / "etdeploy.toml", {"box": ssh_table(sshd, tmp_path)})
    run = run_lm(
        tiny_lm.folder, tmp_path, "--quantize", "8da4w", "--device", "box", "--config", config
    )
    _same_program(run, int4_run)
    assert run.document["device"]["transport"] == "ssh"
    # The same program and runner code on the same CPU: token for token the same.
    assert run.device_texts() == int4_run.device_texts()
    here, there = run.comparison("quantized eager"), int4_run.comparison("quantized eager")
    assert here["top1_agreement"] == there["top1_agreement"] == 1.0
    # Nothing of the job is left on the host but the content-addressed files.
    left = {p.name for p in (tmp_path / "remote-work").iterdir()}
    assert left <= {"runners", "programs", "inputs", ".etdeploy-digests"}, left


def test_an_arm64_phone_generates_on_arm_kernels_within_the_gates(
    tiny_lm: TinyLm, int4_run: LmRun, arm64_phone: AdbTestbed, tmp_path: Path
) -> None:
    table = {
        "serial": arm64_phone.serial("pixel"), "adb_host": "127.0.0.1",
        "adb_port": arm64_phone.server.port,
    }  # fmt: skip
    config = write_config(tmp_path / "etdeploy.toml", {"pixel8": table})
    run = run_lm(
        tiny_lm.folder, tmp_path, "--quantize", "8da4w", "--device", "pixel8", "--config", config
    )
    _same_program(run, int4_run)
    assert run.document["device"]["abi"] == "arm64-v8a"
    assert run.document["runner"]["abi"] == "arm64-v8a"
    quantized = run.comparison("quantized eager")
    assert quantized["top1_agreement"] >= 0.99 and quantized["kld_mean"] < 1e-3
    # The greedy continuations start alike everywhere (a late near-tie may part them).
    assert quantized["match_length_min"] >= 1
