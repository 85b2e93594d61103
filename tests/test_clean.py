"""`etdeploy clean`: this machine's cache, and a device's work dir with --device.

The cache here is a fresh one with entries of each kind laid out as etdeploy lays
them out, aged with os.utime; the device is a loopback phone behind the real adb
server, its files put there by real pushes. Each case runs the real command.
"""

from __future__ import annotations

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
from etdeploy.devices.adb import WORKDIR, AdbDevice, AdbSettings
from etdeploy.devices.digest_records import RECORD_DIR, record_path
from tests.support.adb_server import AdbTestbed, adb_testbed
from tests.support.device_config import write_config

DAY = 86400.0


def clean(*args: str | Path) -> Any:
    return CliRunner().invoke(app, ["clean", *map(str, args)], catch_exceptions=False)


def aged(path: Path, days: float) -> Path:
    when = time.time() - days * DAY
    targets = [path, *path.rglob("*")] if path.is_dir() else [path]
    for p in targets:
        os.utime(p, (when, when))
    return path


@pytest.fixture
def cache(fresh_cache: Path) -> dict[str, Path]:
    """A cache with a build, a runner bundle, references, a measurement and a
    digest record of various ages, plus what clean must never touch."""

    def entry(rel: str, size: int, days: float) -> Path:
        path = fresh_cache / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(os.urandom(size))
        return path

    made = {
        "old build": aged(entry("builds/aaaa/digits.pte", 300_000, 0).parent, 40),
        "new build": aged(entry("builds/bbbb/digits.pte", 200_000, 0).parent, 1),
        "old runner": aged(entry("runners/x86_64-1111/etdeploy_runner", 500_000, 0).parent, 20),
        "reference": aged(entry("references/float-cccc.npz", 50_000, 2), 2),
        "measurement": aged(entry("sizecheck/measurements/dd-ee.json", 1_000, 0), 60),
        "digest": aged(entry("file-digests/ffff.json", 500, 0), 0.5),
    }
    # Never items: the device locks, the local device's work dir (--device local),
    # and the notes of job dirs a run could not remove (the next run removes them).
    entry("locks/device-0123.lock", 0, 0)
    entry("local-device/programs/p.pte", 10_000, 0)
    entry("device-jobs/0123/20260101-000000-abcdef", 40, 0)
    (fresh_cache / "builds" / "aaaa.lock").write_bytes(b"")
    return made


def paths_of(report: dict[str, Any], group: str) -> set[str]:
    return {item["path"] for item in report[group]}


def test_a_dry_run_lists_everything_and_removes_nothing(
    cache: dict[str, Path], fresh_cache: Path
) -> None:
    done = clean("--dry-run", "--json", "-")
    assert done.exit_code == 0, done.output
    report = json.loads(done.stdout)
    assert report["dry_run"] is True
    assert paths_of(report, "removed") == {
        "builds/aaaa", "builds/bbbb", "runners/x86_64-1111", "references/float-cccc.npz",
        "sizecheck/measurements/dd-ee.json", "file-digests/ffff.json",
    }  # fmt: skip
    assert all(p.exists() for p in cache.values())


def test_with_no_cap_everything_goes_but_locks_and_the_local_work_dir(
    cache: dict[str, Path], fresh_cache: Path
) -> None:
    done = clean()
    assert done.exit_code == 0, done.output
    assert "removed 6 item(s)" in done.stdout
    assert not any(p.exists() for p in cache.values())
    assert (fresh_cache / "locks" / "device-0123.lock").exists()
    assert (fresh_cache / "local-device" / "programs" / "p.pte").exists()
    assert (fresh_cache / "device-jobs" / "0123" / "20260101-000000-abcdef").exists()
    assert (fresh_cache / "builds" / "aaaa.lock").exists()  # a held lock file is not pulled away


def test_older_than_removes_only_what_was_not_used_since(
    cache: dict[str, Path], fresh_cache: Path
) -> None:
    done = clean("--older-than", "7d", "--json", "-")
    assert done.exit_code == 0, done.output
    report = json.loads(done.stdout)
    assert paths_of(report, "removed") == {
        "builds/aaaa",
        "runners/x86_64-1111",
        "sizecheck/measurements/dd-ee.json",
    }
    assert not cache["old build"].exists() and not cache["old runner"].exists()
    assert cache["new build"].exists() and cache["reference"].exists()


def test_what_failed_its_cache_check_goes_whatever_the_caps(
    cache: dict[str, Path], fresh_cache: Path
) -> None:
    quarantined = fresh_cache / "quarantine" / "20261204-101010-42-aaaa"
    quarantined.mkdir(parents=True)
    (quarantined / "digits.pte").write_bytes(b"damaged")
    done = clean("--older-than", "365d", "--json", "-")
    assert done.exit_code == 0, done.output
    removed = json.loads(done.stdout)["removed"]
    assert [(i["path"], i["reason"]) for i in removed] == [
        ("quarantine/20261204-101010-42-aaaa", "nothing reads it again")
    ]
    assert not quarantined.exists() and cache["old build"].exists()


def test_max_size_removes_the_least_recently_used_until_the_rest_fits(
    cache: dict[str, Path],
) -> None:
    done = clean("--max-size", "260kB", "--json", "-")
    assert done.exit_code == 0, done.output
    report = json.loads(done.stdout)
    # Oldest first: the measurement (60 d), the build (40 d), the runner (20 d); then
    # the reference (2 d) and the new build fit, with the digest record, in 260 kB.
    assert [i["path"] for i in report["removed"]] == [
        "sizecheck/measurements/dd-ee.json", "builds/aaaa", "runners/x86_64-1111",
    ]  # fmt: skip
    assert report["kept_bytes"] <= 260_000
    assert cache["new build"].exists() and cache["reference"].exists()


def test_a_build_another_process_is_writing_is_skipped(cache: dict[str, Path]) -> None:
    lock = str(cache["old build"]) + ".lock"
    holder = subprocess.Popen(
        [sys.executable, "-c",
         f"import filelock, sys, time\nwith filelock.FileLock({lock!r}):\n"
         "    print('held', flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        done = clean("--older-than", "7d")
        assert done.exit_code == 0, done.output
        assert "skipped builds/aaaa: in use by another etdeploy process" in done.stdout
        assert cache["old build"].exists() and not cache["old runner"].exists()
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.parametrize(
    ("flag", "value", "hint"),
    [("--older-than", "soon", "--older-than 7d"), ("--max-size", "lots", "150MB")],
)
def test_a_cap_clean_cannot_read_is_exit_2_with_a_hint(
    cache: dict[str, Path], flag: str, value: str, hint: str
) -> None:
    done = clean(flag, value)
    assert done.exit_code == 2, done.output
    lines = [x for x in done.output.splitlines() if x.startswith("error:")]
    assert len(lines) == 1 and flag in lines[0] and value in lines[0]
    assert hint in done.output and "Traceback" not in done.output
    assert all(p.exists() for p in cache.values())


# -- a device's work dir -----------------------------------------------------------------


@pytest.fixture
def bed(tmp_path: Path) -> Iterator[AdbTestbed]:
    with adb_testbed(tmp_path / "adb", ("pixel",)) as testbed:
        yield testbed


def test_a_phones_work_dir_is_pruned_with_its_records_and_its_garbage_always(
    bed: AdbTestbed, tmp_path: Path, fresh_cache: Path
) -> None:
    phone = bed.phones["pixel"]
    device = AdbDevice("pixel8", AdbSettings(port=bed.server.port, serial=phone.address))
    config = write_config(tmp_path / "etdeploy.toml",
                          {"pixel8": {"serial": phone.address, "adb_port": bed.server.port}})  # fmt: skip

    def put(remote: str, size: int) -> str:
        local = tmp_path / "src" / remote.replace("/", "_")
        local.parent.mkdir(exist_ok=True)
        local.write_bytes(os.urandom(size))
        device.push(local, f"{WORKDIR}/{remote}")
        return remote

    old_program = put("programs/old.pte", 40_000)
    new_program = put("programs/new.pte", 30_000)
    put("runners/x86_64-aaaa/etdeploy_runner", 20_000)
    put("runners/x86_64-aaaa/libexecutorch.so", 20_000)
    put("inputs/sample.bin", 1_000)
    host = phone.device_path(WORKDIR)
    # Last used a month ago: the program, and the runner (each record says so).
    for remote in (old_program, "runners/x86_64-aaaa/etdeploy_runner",
                   "runners/x86_64-aaaa/libexecutorch.so"):  # fmt: skip
        aged(phone.device_path(record_path(WORKDIR, f"{WORKDIR}/{remote}")), 30)
    # A job dir a failed run left, and garbage: a cut push's partial, a stale pid
    # file, a record of the old kind, a record whose file is gone.
    (host / "20260101-000000-abcdef").mkdir()
    (host / "20260101-000000-abcdef" / "s0-out-0.bin").write_bytes(b"x" * 100)
    aged(host / "20260101-000000-abcdef", 10)
    (host / "programs" / ".x.pte.etdeploy-partial-123").write_bytes(b"half")
    (host / ".pids").mkdir()
    (host / ".pids" / "dead.pid").write_text("12345\n")
    (host / "programs" / ".old.pte.etdeploy-sha256").write_text("legacy\n")
    orphan = host / RECORD_DIR / ("0" * 32)
    orphan.write_text("etdeploy-digest/1\n")

    dry = clean("--device", "pixel8", "--config", config, "--older-than", "7d", "--dry-run",
                "--json", "-")  # fmt: skip
    assert dry.exit_code == 0, dry.output
    planned = json.loads(dry.stdout)
    assert paths_of(planned, "removed") == {
        "programs/old.pte", "runners/x86_64-aaaa", "20260101-000000-abcdef",
        "programs/.x.pte.etdeploy-partial-123", ".pids/dead.pid",
        "programs/.old.pte.etdeploy-sha256", f"{RECORD_DIR}/{'0' * 32}",
    }  # fmt: skip
    assert phone.device_path(f"{WORKDIR}/{old_program}").exists()  # nothing removed yet

    done = clean("--device", "pixel8", "--config", config, "--older-than", "7d")
    assert done.exit_code == 0, done.output
    left = sorted(str(p.relative_to(host)) for p in host.rglob("*") if p.is_file())
    kept_records = {
        record_path(WORKDIR, f"{WORKDIR}/{r}")[len(WORKDIR) + 1 :]
        for r in (new_program, "inputs/sample.bin")
    }
    assert left == sorted({new_program, "inputs/sample.bin", *kept_records})
    # What stays is still known by its record: pushed again, nothing is sent.
    before = len(phone.opened_services)
    assert device.push(tmp_path / "src" / "programs_new.pte", f"{WORKDIR}/{new_program}").skipped
    assert not any("sha256sum" in s for s in phone.opened_services[before:])

    everything = clean("--device", "pixel8", "--config", config)
    assert everything.exit_code == 0, everything.output
    assert [p for p in host.rglob("*") if p.is_file()] == []
