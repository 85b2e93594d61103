"""etdeploy.farm.store: shards, the results log, and resuming a farm that was
killed without running again what finished."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from etdeploy.errors import UsageError
from etdeploy.farm import RESULTS_NAME, ResultsLog, load_farm_spec, select_shard, shard_of
from etdeploy.farm.merge import merge_sources
from tests.support.farm_fixtures import (
    QUICK,
    FarmTestbed,
    MiB,
    farm,
    lines_of,
    tiny_result,
    wait_for,
    worker_pids,
    write_spec,
)


def test_shards_partition_the_matrix_and_a_new_job_moves_no_other(tmp_path: Path) -> None:
    devices = [f"phone{i}" for i in range(12)]
    spec = load_farm_spec(write_spec(tmp_path / "s.toml", {"models": ["digits"], "devices": devices,
                                                            "backends": ["xnnpack", "portable"]}))  # fmt: skip
    shards = [select_shard(spec.jobs, i, 3) for i in range(3)]
    keys = [j.key for shard in shards for j in shard]
    assert sorted(keys) == sorted(j.key for j in spec.jobs)  # every job once
    assert all(shards)  # 24 jobs over 3 shards: none empty
    # The same split on another host, another run: it hashes the key, not the order.
    again = load_farm_spec(write_spec(tmp_path / "t.toml", {"models": ["digits"], "devices": devices[::-1],
                                                             "backends": ["portable", "xnnpack"]}))  # fmt: skip
    assert {j.key for j in select_shard(again.jobs, 1, 3)} == {j.key for j in shards[1]}
    grown = load_farm_spec(write_spec(tmp_path / "u.toml", {"models": ["digits"], "devices": [*devices, "new"],
                                                             "backends": ["xnnpack", "portable"]}))  # fmt: skip
    for job in grown.jobs:
        if job.device != "new":
            assert shard_of(job.key, 3) == next(i for i, s in enumerate(shards) if job in s)
    with pytest.raises(UsageError, match="shard-index"):
        select_shard(spec.jobs, 3, 3)
    done = farm(tmp_path / "s.toml", "--shard-index", "1")
    assert done.exit_code == 2 and "--shard-count" in done.output


def test_the_results_log_cuts_a_torn_last_line_and_refuses_a_damaged_one(tmp_path: Path) -> None:
    path = tmp_path / RESULTS_NAME
    good = json.dumps(tiny_result("passed", "a").to_json())
    other = json.dumps(tiny_result("passed", "b").to_json())
    path.write_text(good + "\n" + other + "\n" + good[:17])
    log = ResultsLog(path)
    assert [r.farm.key for r in log.read()] == ["a", "b"]
    # The torn line is cut, so the next line starts clean.
    assert log.dropped_partial == 17 and path.read_text().endswith("}\n")
    log.append(tiny_result("error", "c"))
    assert [r.farm.key for r in ResultsLog(path).read()] == ["a", "b", "c"]

    path.write_text(good + "\n" + good)  # whole, only the newline missing: kept
    assert len(ResultsLog(path).read()) == 2 and path.read_text().count("\n") == 2
    path.write_text(good[:17] + "\n" + good + "\n")
    with pytest.raises(UsageError, match=":1: not JSON"):
        ResultsLog(path).read()


def test_an_earlier_run_in_out_is_kept_unless_resume_is_asked_for(tmp_path: Path) -> None:
    spec = write_spec(tmp_path / "n.toml", {"models": ["digits"], "devices": ["nowhere"]})
    out = tmp_path / "out"
    out.mkdir()
    (out / RESULTS_NAME).write_text(json.dumps(tiny_result("passed", "x").to_json()) + "\n")
    done = farm(spec, "--out", out)
    assert done.exit_code == 2 and "--resume" in done.output
    assert not (out / "work").exists()


@pytest.mark.slow
def test_a_killed_farm_resumes_without_rerunning_what_finished(
    bed: FarmTestbed, tmp_path: Path
) -> None:
    spec = write_spec(
        tmp_path / "n.toml",
        {"models": ["digits"], "devices": ["local", "pixel-a"], **QUICK, "retries": 0},
        bed.device_tables(tmp_path),
    )  # fmt: skip
    out = tmp_path / "out"
    phone = bed.phone("pixel-a")
    phone.faults.stall_after_send_bytes = 1 * MiB  # pixel-a's job is still running when we kill
    farm_process = subprocess.Popen(
        [sys.executable, "-m", "etdeploy", "farm", str(spec), "--out", str(out)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        results = out / RESULTS_NAME
        wait_for(
            lambda: results.is_file() and results.read_text().count("\n") >= 1,
            120,
            "local finished",
        )
        wait_for(lambda: bool(worker_pids(out)), 30, "pixel-a's worker is running")
        os.kill(farm_process.pid, signal.SIGKILL)
        farm_process.wait(10)
    finally:
        if farm_process.poll() is None:
            farm_process.kill()
            farm_process.wait()
    (first,) = lines_of(results)
    assert first["device"]["name"] == "local" and first["status"] == "passed"
    # The orphaned worker sees its farm gone and stops (releasing the phone).
    wait_for(lambda: not worker_pids(out), 20, "the orphaned worker stopped")
    phone.faults.stall_after_send_bytes = None
    phone.release_stall()
    bed.adb.server.reconnect(phone)

    again = farm(spec, "--out", out, "--resume", "--junit", tmp_path / "junit.xml")
    assert again.exit_code == 0, again.output
    assert "done earlier" in again.output
    lines = lines_of(results)
    assert [r["device"]["name"] for r in lines] == ["local", "pixel-a"]
    assert lines[0] == first  # the finished job's line is untouched, and it did not run again
    opened = [log.read_text() for log in out.glob("work/*/worker.log")]
    assert sum("opening local" in text for text in opened) == 1
    assert sum("opening pixel-a" in text for text in opened) == 2
    suite = ET.parse(tmp_path / "junit.xml").getroot().find("testsuite")
    assert suite is not None and suite.get("tests") == "2" and suite.get("errors") == "0"


@pytest.mark.slow
def test_resume_with_retry_errors_runs_again_only_the_infrastructure_errors(
    bed: FarmTestbed, tmp_path: Path
) -> None:
    spec = write_spec(
        tmp_path / "n.toml",
        {"models": ["digits"], "devices": ["local", "pixel-a"], **QUICK, "retries": 0},
        bed.device_tables(tmp_path),
    )  # fmt: skip
    out = tmp_path / "out"
    # The phone's link drops in the middle of the push (a Wi-Fi hiccup overnight).
    bed.phone("pixel-a").faults.drop_after_send_bytes = 1 * MiB
    first = farm(spec, "--out", out)
    assert first.exit_code == 3, first.output
    earlier = lines_of(out / RESULTS_NAME)
    phone = next(r for r in earlier if r["device"]["name"] == "pixel-a")
    assert phone["status"] == "error" and phone["error"]["infrastructure"]

    # Plain --resume keeps the error: nothing is run again.
    again = farm(spec, "--out", out, "--resume")
    assert again.exit_code == 3, again.output
    assert again.output.count("done earlier") == 2 and len(lines_of(out / RESULTS_NAME)) == 2
    without = farm(spec, "--out", out, "--retry-errors")
    assert without.exit_code == 2 and "--retry-errors goes with --resume" in without.output

    bed.reset()  # the phone is back
    retried = farm(spec, "--out", out, "--resume", "--retry-errors", "--junit", tmp_path / "j.xml")
    assert retried.exit_code == 0, retried.output
    assert "done earlier digits[xnnpack] on local" in retried.output
    assert (
        f"rerun digits[xnnpack] on pixel-a (earlier: {phone['error']['message']}" in retried.output
    )
    assert "1 from the earlier run, 1 earlier error(s) run again" in retried.output
    lines = lines_of(out / RESULTS_NAME)
    # The earlier lines stay as they were (the log is append-only); the new one supersedes.
    assert lines[:2] == earlier
    assert (lines[2]["device"]["name"], lines[2]["status"]) == ("pixel-a", "passed")
    suite = ET.parse(tmp_path / "j.xml").getroot().find("testsuite")
    assert suite is not None and (suite.get("tests"), suite.get("errors")) == ("2", "0")
    # A merge reads the log the same way: one result per job, no duplicate.
    merged = merge_sources([out])
    assert [r.status for r in merged.results] == ["passed", "passed"] and not merged.duplicates
