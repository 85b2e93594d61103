"""etdeploy.farm.attempt: one attempt in a worker process, so a job that crashes
or hangs costs only itself."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from etdeploy.farm import RESULTS_NAME
from tests.support.farm_fixtures import (
    QUICK,
    FarmTestbed,
    MiB,
    farm,
    lines_of,
    worker_pids,
    write_spec,
)


@pytest.mark.slow
def test_a_crashing_job_is_its_own_error_and_the_next_job_runs(tmp_path: Path) -> None:
    # A factory that dies the way a segfault in native code does: no exception, no result.
    (tmp_path / "crash.py").write_text(
        "import os, signal\n\ndef build():\n    os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    spec = write_spec(
        tmp_path / "n.toml", {"models": ["crash.py:build", "digits"], "devices": ["local"], **QUICK}
    )
    done = farm(spec, "--out", tmp_path / "out")
    assert done.exit_code == 3, done.output
    crashed, after = lines_of(tmp_path / "out" / RESULTS_NAME)
    assert crashed["error"]["kind"] == "WorkerCrashed" and "signal 9" in crashed["error"]["message"]
    assert len(crashed["attempts"]) == 1  # not retryable
    assert after["job"]["model"] == "digits" and after["status"] == "passed"


@pytest.mark.slow
def test_a_hung_phone_costs_its_job_timeout_and_nothing_else(
    bed: FarmTestbed, tmp_path: Path
) -> None:
    spec = write_spec(
        tmp_path / "n.toml",
        {"models": ["digits"], "devices": ["pixel-a", "local"], **QUICK, "retries": 2},
        bed.device_tables(tmp_path),
        jobs=[{"model": "digits", "device": "pixel-a", "job_timeout_s": 6, **QUICK}],
    )  # fmt: skip
    bed.phone("pixel-a").faults.stall_after_send_bytes = 1 * MiB  # the push hangs, unanswered
    started = time.monotonic()
    done = farm(spec, "--out", tmp_path / "out")
    elapsed = time.monotonic() - started
    assert done.exit_code == 3, done.output
    results = {r["device"]["name"]: r for r in lines_of(tmp_path / "out" / RESULTS_NAME)}
    assert results["local"]["status"] == "passed"
    hung = results["pixel-a"]
    assert hung["error"]["kind"] == "JobTimeout" and hung["error"]["infrastructure"]
    assert len(hung["attempts"]) == 1  # a timeout is not retried: it would hang again
    assert "deploying to pixel-a" in "\n".join(hung["logs"])  # the worker's log says where it hung
    assert elapsed < 6 + 25
    assert worker_pids(tmp_path / "out") == []
