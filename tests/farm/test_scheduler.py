"""etdeploy.farm.scheduler: whole farms on real transports: devices in parallel,
retries of infrastructure faults only, jobs in flight taking turns on a device,
a cooldown between a device's jobs, and Ctrl-C in the middle of a farm."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from etdeploy.devices.lock import device_lock
from etdeploy.farm import FARM_DOC_NAME, RESULTS_NAME
from tests.support.farm_fixtures import (
    QUICK,
    REPO,
    FarmTestbed,
    MiB,
    farm,
    keep_dropping,
    lines_of,
    wait_for,
    worker_pids,
    write_spec,
)
from tests.support.processes import processes_naming


@pytest.mark.slow
def test_four_devices_finish_while_one_phone_keeps_dropping(
    bed: FarmTestbed, tmp_path: Path
) -> None:
    spec = write_spec(
        tmp_path / "nightly.toml",
        {"models": ["digits"], "devices": ["pixel-a", "pixel-b", "local", "mac"], **QUICK,
         "retries": 2, "backoff_s": 0.5},
        bed.device_tables(tmp_path),
    )  # fmt: skip
    out = tmp_path / "out"
    # pixel-a drops once and recovers on the retry; pixel-b drops on every push.
    bed.phone("pixel-a").faults.drop_after_send_bytes = 1 * MiB
    started = time.monotonic()
    with keep_dropping(bed.phone("pixel-b")) as drops:
        done = farm(spec, "--out", out, "--junit", tmp_path / "junit.xml", "--json", tmp_path / "farm.json",
                    "--html", tmp_path / "report.html")  # fmt: skip
    elapsed = time.monotonic() - started
    assert done.exit_code == 3, done.output  # only infrastructure errors
    assert len(drops) == 3  # each of pixel-b's three attempts was cut

    results = {r["device"]["name"]: r for r in lines_of(out / RESULTS_NAME)}
    assert sorted(results) == ["local", "mac", "pixel-a", "pixel-b"]
    broken = results["pixel-b"]
    assert broken["status"] == "error" and broken["exit_code"] == 3
    assert broken["error"]["infrastructure"] and broken["error"]["retryable"]
    assert [a["attempt"] for a in broken["attempts"]] == [1, 2, 3]
    assert all(a["error"]["retryable"] for a in broken["attempts"])
    assert [a.get("backoff_s") for a in broken["attempts"]] == [0.5, 1.0, None]
    assert (
        broken["job"]["backend"] == "xnnpack"
        and broken["farm"]["key"] == "digits|xnnpack|none|pixel-b"
    )

    recovered = results["pixel-a"]
    assert recovered["status"] == "passed" and [a["status"] for a in recovered["attempts"]] == [
        "error",
        "passed",
    ]
    for name in ("local", "mac", "pixel-a"):
        result = results[name]
        assert result["status"] == "passed", result.get("error")
        assert result["latency_ms"]["n"] == 1 and result["verdict"]["passed"]
    assert results["mac"]["device"]["transport"] == "ssh"
    assert results["pixel-a"]["device"]["transport"] == "adb"

    suites = ET.parse(tmp_path / "junit.xml").getroot()
    suite = suites.find("testsuite")
    assert suite is not None and suite.get("tests") == "4" and suite.get("errors") == "1"
    errors = [
        case.find("error") for case in suite.iter("testcase") if case.find("error") is not None
    ]
    assert len(errors) == 1 and errors[0].get("type", "").startswith("infrastructure.")

    from etdeploy.results import validate_farm

    doc = json.loads((tmp_path / "farm.json").read_text())
    validate_farm(doc)
    assert doc["summary"]["infrastructure_errors"] == 1 and doc["summary"]["passed"] == 3
    assert (tmp_path / "report.html").read_text().count("pixel-b") >= 1
    assert elapsed < 120


@pytest.mark.slow
def test_a_numeric_mismatch_fails_the_farm_and_is_never_retried(tmp_path: Path) -> None:
    # Tolerances no float32 lowering can meet: the verdict fails, nothing raises.
    spec = write_spec(tmp_path / "n.toml", {"models": ["digits"], "devices": ["local"], **QUICK,
                                            "atol": 1e-12, "rtol": 0.0, "retries": 3, "backoff_s": 5})  # fmt: skip
    done = farm(spec, "--out", tmp_path / "out")
    assert done.exit_code == 1, done.output
    (result,) = lines_of(tmp_path / "out" / RESULTS_NAME)
    assert result["status"] == "failed" and len(result["attempts"]) == 1
    assert "FAIL" in done.output


@pytest.mark.slow
def test_two_jobs_in_flight_on_one_device_still_take_turns_on_it(tmp_path: Path) -> None:
    from etdeploy.builder import BuildOptions, build

    # Built first, so both jobs reach the device together rather than one building
    # while the other runs.
    for backend in ("xnnpack", "portable"):
        build("digits", BuildOptions(backend=backend))
    # About a second on the device each (portable kernels are ~20x slower than XNNPACK's).
    spec = write_spec(tmp_path / "n.toml", {"devices": ["local"], "warmup": 0}, jobs=[
        {"model": "digits", "backend": "xnnpack", "iterations": 100000},
        {"model": "digits", "backend": "portable", "iterations": 5000},
    ])  # fmt: skip
    done = farm(spec, "--out", tmp_path / "out", "--jobs-per-device", "2")
    assert done.exit_code == 0, done.output
    results = lines_of(tmp_path / "out" / RESULTS_NAME)
    assert sorted(r["artifact"]["backend"] for r in results) == ["portable", "xnnpack"]
    first, second = sorted((r["device_lock"] for r in results), key=lambda lock: lock["held_from"])
    assert first["held_to"] <= second["held_from"]
    # Both were in flight: the second waited at the lock while the first held the device.
    assert second["waited_s"] > 0.2


@pytest.mark.slow
def test_a_cooldown_leaves_the_device_idle_between_its_jobs(tmp_path: Path) -> None:
    spec = write_spec(tmp_path / "n.toml", {"devices": ["local"], **QUICK, "cooldown_s": 2}, jobs=[
        {"model": "digits", "backend": "xnnpack"},
        {"model": "digits", "backend": "xnnpack", "quantize": "int8"},
    ])  # fmt: skip
    done = farm(spec, "--out", tmp_path / "out")
    assert done.exit_code == 0, done.output
    first, second = sorted((r["device_lock"] for r in lines_of(tmp_path / "out" / RESULTS_NAME)),
                           key=lambda lock: lock["held_from"])  # fmt: skip
    assert second["held_from"] - first["held_to"] >= 2


@pytest.mark.slow
@pytest.mark.parametrize(
    ("stop", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)], ids=["ctrl-c", "sigterm"]
)
def test_ctrl_c_or_sigterm_stops_the_workers_releases_the_phone_keeps_what_finished_for_resume(
    bed: FarmTestbed, tmp_path: Path, stop: signal.Signals, code: int
) -> None:
    """Ctrl-C in a terminal, or SIGTERM from a CI system cancelling the job: the same
    unwinding, the shell's exit code for that signal, and a run --resume finishes."""
    from etdeploy.devices.registry import open_device
    from etdeploy.farm import load_farm_spec

    # local finishes at once; pixel-a runs a job of minutes (portable kernels, a
    # million iterations) that is still running on the phone when Ctrl-C comes.
    spec_path = write_spec(
        tmp_path / "n.toml", {"devices": ["local", "pixel-a"], "retries": 0},
        bed.device_tables(tmp_path),
        jobs=[{"model": "digits", "device": "local", **QUICK},
              {"model": "digits", "backend": "portable", "device": "pixel-a", "warmup": 0,
               "iterations": 1_000_000, "deadline_s": 900}],
    )  # fmt: skip
    out = tmp_path / "out"
    log = tmp_path / "farm.log"
    with open(log, "wb") as stderr:
        # SIGINT at its default, as in a terminal: a suite run as a background job
        # (`make test &`) ignores it, and Python then never raises KeyboardInterrupt.
        process = subprocess.Popen(
            [sys.executable, "-m", "etdeploy", "farm", str(spec_path), "--out", str(out)],
            stdout=subprocess.DEVNULL, stderr=stderr, cwd=REPO,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )  # fmt: skip
    try:
        results = out / RESULTS_NAME
        wait_for(lambda: results.is_file() and results.read_text().count("\n") >= 1, 120,
                 "local's job finished")  # fmt: skip

        def running_on_the_phone() -> list[Path]:
            return [
                p for p in out.glob("work/*/worker.log") if "running on pixel-a" in p.read_text()
            ]

        wait_for(running_on_the_phone, 120, "pixel-a's job running on the phone")
        (worker_log,) = running_on_the_phone()
        job_id = worker_log.parent.name
        on_phone = bed.phone("pixel-a").device_path(f"/data/local/tmp/etdeploy/{job_id}")
        wait_for(lambda: bool(processes_naming(job_id)), 30, "the runner started on the phone")
        assert on_phone.is_dir()

        process.send_signal(stop)  # what Ctrl-C in a terminal sends, or a CI's cancel
        exited = process.wait(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    said = log.read_text()
    assert exited == code, said
    assert (
        f"interrupted by {stop.name}: workers stopped and devices released; 1 finished job(s) "
        f"kept in {results}" in said
    )
    assert f"--out {out} --resume" in said and "Traceback" not in said

    # Workers stopped: none left, and the runner on the phone went with its worker.
    assert worker_pids(out) == [] and processes_naming(job_id) == []
    assert worker_log.read_text().rstrip().endswith("stopped by the farm")
    # The phone released: its job directory cleaned up, its lock free at once.
    assert not on_phone.exists()
    spec = load_farm_spec(spec_path)
    with open_device("pixel-a", spec.config, lock_timeout_s=0.5) as device, device_lock(device):
        pass
    # What finished is kept, and only that; no report claims the farm finished.
    (kept,) = lines_of(results)
    assert kept["device"]["name"] == "local" and kept["status"] == "passed"
    assert not (out / FARM_DOC_NAME).exists()
    # --resume takes what finished as done: local's job is not run again.
    resumed = farm(spec_path, "--out", out, "--resume", "-k", "local")
    assert resumed.exit_code == 0, resumed.output
    assert len(lines_of(results)) == 1 and (out / FARM_DOC_NAME).exists()
