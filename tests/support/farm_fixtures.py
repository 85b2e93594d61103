"""A device farm on this machine for `etdeploy farm` and `etdeploy doctor` tests.

Four devices, each reached through its real transport:
- two loopback Android phones (tests/support/loopback_adb.py: they stand for
  Pixel 8s over adb TCP/IP and run what they are sent on this machine) behind
  one REAL adb server on a free port (tests/support/adb_server.py);
- "local", this machine;
- "mac", a REAL OpenSSH sshd on loopback (tests/support/sshd.py) in host mode:
  the remote is this Linux machine, so the host runner runs there.

The phones get the host runner by path (their ABI is x86_64 because the runner is
this machine's; a Pixel would get the NDK build). `reset()` puts the phones back
to a clean state between tests: faults off, online, connected, no etdeploy files.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from etdeploy.cli import app
from tests.support.adb_server import AdbTestbed, adb_testbed
from tests.support.device_config import ssh_table
from tests.support.loopback_adb import LoopbackAdbDevice
from tests.support.processes import processes_naming
from tests.support.sshd import SshServer, start_sshd

MiB = 1 << 20
PHONES = ("pixel-a", "pixel-b")
REPO = Path(__file__).resolve().parents[2]
MODELS = REPO / "tests" / "data" / "models"
# Cheap jobs: one timed execution, no warm-up.
QUICK = {"iterations": 1, "warmup": 0}


def farm(*args: str | Path) -> Any:
    """`etdeploy farm ARGS...` in this process."""
    return CliRunner().invoke(app, ["farm", *map(str, args)], catch_exceptions=False)


def lines_of(path: Path) -> list[dict[str, Any]]:
    """The results of a results.jsonl."""
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@dataclass
class FarmTestbed:
    adb: AdbTestbed
    sshd: SshServer
    runner: Path  # the host runner bundle

    def phone(self, name: str) -> LoopbackAdbDevice:
        return self.adb.phones[name]

    def device_tables(self, tmp: Path) -> dict[str, dict[str, Any]]:
        """[devices.NAME] tables for both phones and the sshd host; "local" needs none."""
        tables: dict[str, dict[str, Any]] = {
            name: {
                "transport": "adb",
                "serial": self.adb.serial(name),
                "adb_port": self.adb.server.port,
                "runner": str(self.runner),
            }
            for name in PHONES
        }
        tables["mac"] = ssh_table(self.sshd, tmp)
        return tables

    def reset(self) -> None:
        for name in PHONES:
            phone = self.phone(name)
            phone.faults.drop_after_send_bytes = None
            phone.faults.stall_after_send_bytes = None
            phone.faults.fail_shell_pattern = None
            phone.offline = False
            phone.release_stall()
            self.adb.server.reconnect(phone)
            # Pushes skip files a phone already holds: a test that cuts a transfer
            # needs one to happen.
            shutil.rmtree(phone.device_path("/data/local/tmp/etdeploy"), ignore_errors=True)


@contextlib.contextmanager
def farm_testbed(root: Path) -> Iterator[FarmTestbed]:
    """Both phones behind their own adb server, and the sshd; all stopped on exit."""
    from etdeploy.runner_build import ensure_runner

    runner = ensure_runner("host").directory
    with adb_testbed(root / "adb", PHONES) as adb, start_sshd(root / "sshd") as sshd:
        yield FarmTestbed(adb, sshd, runner)


@contextlib.contextmanager
def keep_dropping(phone: LoopbackAdbDevice, after_bytes: int = 1 * MiB) -> Iterator[list[float]]:
    """Cut the phone's connection part-way through every push, not only the first
    (LoopbackFaults.drop_after_send_bytes fires once): a phone whose Wi-Fi keeps
    failing. Yields the times each drop was re-armed."""
    armed: list[float] = []
    stop = threading.Event()
    phone.faults.drop_after_send_bytes = after_bytes

    def rearm() -> None:
        while not stop.wait(0.005):
            if phone.faults.drop_after_send_bytes is None:
                armed.append(time.monotonic())
                phone.faults.drop_after_send_bytes = after_bytes

    thread = threading.Thread(target=rearm, name="keep-dropping", daemon=True)
    thread.start()
    try:
        yield armed
    finally:
        stop.set()
        thread.join(5)
        phone.faults.drop_after_send_bytes = None


def toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{k} = {toml_value(v)}" for k, v in value.items()) + "}"
    return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'


def write_spec(
    path: Path,
    farm: Mapping[str, Any],
    devices: Mapping[str, Mapping[str, Any]] | None = None,
    *,
    jobs: list[Mapping[str, Any]] | None = None,
    extra: str = "",
) -> Path:
    """A farm spec: [farm] keys, [[farm.job]] entries, [devices.NAME] tables, then
    `extra` TOML text verbatim."""
    lines = ["[farm]", *(f"{k} = {toml_value(v)}" for k, v in farm.items())]
    for job in jobs or []:
        lines += ["", "[[farm.job]]", *(f"{k} = {toml_value(v)}" for k, v in job.items())]
    for name, table in (devices or {}).items():
        lines += ["", f'[devices."{name}"]', *(f"{k} = {toml_value(v)}" for k, v in table.items())]
    path.write_text("\n".join(lines) + "\n" + extra)
    return path


def worker_pids(out_dir: Path) -> list[int]:
    """Live farm worker processes writing under out_dir (found by command line)."""
    return processes_naming("worker_main", str(out_dir))


def wait_for(predicate: Any, timeout: float, what: str, interval: float = 0.1) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(interval)
    raise TimeoutError(f"{what} within {timeout} s")


def tiny_result(status: str, key: str | None = None, *, infrastructure: bool = False) -> Any:
    """The smallest RunResult of a status: what a farm's log and exit code read."""
    from etdeploy.results.result import (
        DeviceSummary,
        ErrorInfo,
        FarmPlacement,
        JobInfo,
        RunResult,
        Shard,
    )

    error = None
    if status == "error":
        error = ErrorInfo(kind="InfraError" if infrastructure else "InputError",
                          message="it broke", infrastructure=infrastructure)  # fmt: skip
    return RunResult(
        status=status,  # type: ignore[arg-type]
        exit_code={"passed": 0, "failed": 1}.get(status, 3 if infrastructure else 2),
        job=JobInfo(id="j", model="digits"),
        device=DeviceSummary(name="local"),
        error=error,
        started_at="2026-12-03T00:00:00Z",
        seconds=1.0,
        farm=FarmPlacement(key, Shard(0, 1), "n.toml") if key else None,
    )
