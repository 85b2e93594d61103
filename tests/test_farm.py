"""`etdeploy farm`: the spec, shards, the results stream, and whole farms run on
real transports (a real adb server with loopback phones, this machine, a real
sshd), with a phone that keeps dropping, a phone that hangs, and a farm killed
mid-run then resumed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from etdeploy.cli import app
from etdeploy.errors import UsageError
from etdeploy.farm import (
    RESULTS_NAME,
    ResultsLog,
    exit_code,
    load_farm_spec,
    select_shard,
    shard_of,
)
from tests.support.farm_fixtures import (
    FarmTestbed,
    MiB,
    farm_testbed,
    keep_dropping,
    wait_for,
    worker_pids,
    write_spec,
)

REPO = Path(__file__).resolve().parent.parent
MODELS = REPO / "tests" / "data" / "models"
# Cheap jobs: one timed execution, no warm-up.
QUICK = {"iterations": 1, "warmup": 0}


def farm(*args: str | Path) -> Any:
    return CliRunner().invoke(app, ["farm", *map(str, args)], catch_exceptions=False)


def lines_of(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


# -- the spec -------------------------------------------------------------------------------


def test_the_matrix_expands_in_spec_order_with_stable_keys(tmp_path: Path) -> None:
    spec = load_farm_spec(write_spec(tmp_path / "n.toml", {
        "models": ["digits", f"{MODELS / 'two_io.py'}:build"],
        "backends": ["xnnpack", "portable"],
        "quantize": ["none", "int8"],
        "devices": ["local", "pixel8"],
        "iterations": 3,
    }))  # fmt: skip
    assert len(spec.jobs) == 2 * 2 * 2 * 2
    assert [j.key for j in spec.jobs[:4]] == [
        "digits|xnnpack|none|local", "digits|xnnpack|none|pixel8",
        "digits|xnnpack|int8|local", "digits|xnnpack|int8|pixel8",
    ]  # fmt: skip
    assert spec.devices == ["local", "pixel8"]
    job = spec.jobs[2].run_job()
    # [farm] over etdeploy run's defaults.
    assert job.quantize == "int8" and job.iterations == 3 and job.warmup == 3


def test_the_example_spec_parses() -> None:
    spec = load_farm_spec(REPO / "tests" / "data" / "farm" / "nightly.toml")
    # 2 models x 2 backends x 2 quantizations x 3 devices, less two_io's 6 int8 cells.
    assert len(spec.jobs) == 24 - 6
    pinned = next(j for j in spec.jobs if j.key == "digits|xnnpack|int8|pixel8")
    assert (
        pinned.run_job().iterations == 100 and pinned.job_timeout_s == 1800 and pinned.retries == 2
    )
    two_io = next(j for j in spec.jobs if j.model.endswith("two_io.py:build"))
    assert two_io.run_job().iterations == 20 and two_io.run_job().warmup == 3
    assert spec.backoff_s == 5 and spec.lock_timeout_s == 900 and spec.cooldown_s == 30
    assert spec.config.devices["mac"].transport == "ssh"


def test_explicit_jobs_override_their_cell_and_excludes_drop_cells(tmp_path: Path) -> None:
    path = write_spec(
        tmp_path / "n.toml",
        {"models": ["digits", {"model": "digits2.py:build", "inputs": ["samples/"]}],
         "backends": ["xnnpack", "coreml"], "devices": ["local", "pixel8"], "retries": 1,
         "exclude": [{"backend": "coreml", "device": ["pixel8", "local"], "model": "digits"}]},
        jobs=[{"model": "digits", "device": "pixel8", "iterations": 50, "job_timeout_s": 600, "retries": 0}],
        extra="[run]\nwarmup = 1\n",
    )  # fmt: skip
    (tmp_path / "digits2.py").write_text("def build(): ...\n")  # only its existence is checked here
    spec = load_farm_spec(path)
    keys = [j.key for j in spec.jobs]
    assert "digits|coreml|none|local" not in keys and "digits2.py:build|coreml|none|local" in keys
    pinned = next(j for j in spec.jobs if j.key == "digits|xnnpack|none|pixel8")
    assert pinned.run_job().iterations == 50 and pinned.job_timeout_s == 600 and pinned.retries == 0
    other = next(j for j in spec.jobs if j.key == "digits|xnnpack|none|local")
    assert other.retries == 1 and other.run_job().warmup == 1  # [run] of the spec applies
    samples = next(j for j in spec.jobs if j.model == "digits2.py:build").run_job()
    assert samples.inputs == ("samples/",)


@pytest.mark.parametrize(
    ("farm_table", "extra", "named"),
    [
        ({"models": ["digits"], "devices": ["local"], "iteratons": 3}, "", "farm.iteratons"),
        ({"models": ["digits"], "devices": ["local"], "retries": "2"}, "", "farm.retries"),
        ({"models": ["digits"], "devices": ["local"], "quantize": ["int4"]}, "", "farm.quantize[0]"),
        ({"models": ["digits"], "devices": ["local"], "backends": ["qnn"]}, "", "farm.backends[0]"),
        ({"models": ["missing.py:build"], "devices": ["local"]}, "", "farm.models[0]"),
        ({"models": ["digits"], "devices": ["local"], "iterations": 0}, "", "farm.iterations"),
        ({"models": [{"model": "digits", "warmup": -1}], "devices": ["local"]}, "", "farm.models[0].warmup"),
        ({"models": ["digits"], "devices": ["local"]}, "[nightly]\nx = 1\n", "[nightly]"),
        ({"models": ["digits"], "devices": ["local"], "job": [{"model": "digits", "device": "local", "warm": 1}]},
         "", "farm.job[0].warm"),
        ({"models": ["digits"]}, "", "farm.devices"),
        ({"models": ["digits"], "devices": ["p"]}, '[devices.p]\nserial = "x"\nadb_prot = 5\n', "devices.p.adb_prot"),
        ({"models": ["digits"], "devices": ["m"]}, '[devices.m]\ntransport = "ssh"\nhost = "m"\nport = "22"\n',
         "devices.m.port"),
    ],
)  # fmt: skip
def test_a_bad_spec_is_exit_2_and_names_the_key(
    tmp_path: Path, farm_table: dict[str, Any], extra: str, named: str
) -> None:
    path = write_spec(tmp_path / "bad.toml", farm_table, extra=extra)
    done = farm(path, "--out", tmp_path / "out")
    assert done.exit_code == 2, done.output
    assert named in done.output and "hint:" in done.output and "Traceback" not in done.output
    assert not (tmp_path / "out").exists()  # nothing ran


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
    good = json.dumps({"status": "passed", "farm": {"key": "a"}})
    path.write_text(good + "\n" + good.replace('"a"', '"b"') + "\n" + good[:17])
    log = ResultsLog(path)
    assert [r["farm"]["key"] for r in log.read()] == ["a", "b"]
    # The torn line is cut, so the next line starts clean.
    assert log.dropped_partial == 17 and path.read_text().endswith("}\n")
    log.append({"status": "error", "farm": {"key": "c"}})
    assert [r["farm"]["key"] for r in ResultsLog(path).read()] == ["a", "b", "c"]

    path.write_text(good + "\n" + good)  # whole, only the newline missing: kept
    assert len(ResultsLog(path).read()) == 2 and path.read_text().count("\n") == 2
    path.write_text(good[:17] + "\n" + good + "\n")
    with pytest.raises(UsageError, match=":1: not JSON"):
        ResultsLog(path).read()


def test_exit_codes_rank_a_failed_check_over_bad_input_over_infrastructure() -> None:
    passed = {"status": "passed"}
    failed = {"status": "failed"}
    infra = {"status": "error", "error": {"infrastructure": True}}
    bad = {"status": "error", "error": {"infrastructure": False}}
    assert exit_code([passed, passed]) == 0
    assert exit_code([passed, infra]) == 3
    assert exit_code([infra, bad]) == 2
    assert exit_code([infra, bad, failed]) == 1
    assert exit_code([passed], regressions=["slower"]) == 1
    assert exit_code([]) == 0


def test_an_earlier_run_in_out_is_kept_unless_resume_is_asked_for(tmp_path: Path) -> None:
    spec = write_spec(tmp_path / "n.toml", {"models": ["digits"], "devices": ["nowhere"]})
    out = tmp_path / "out"
    out.mkdir()
    (out / RESULTS_NAME).write_text(json.dumps({"status": "passed", "farm": {"key": "x"}}) + "\n")
    done = farm(spec, "--out", out)
    assert done.exit_code == 2 and "--resume" in done.output
    assert not (out / "work").exists()


# -- farms on real transports ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def testbed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FarmTestbed]:
    # The build and the eager reference cached first (a cold build takes longer
    # than the short job timeouts below allow).
    warm = CliRunner().invoke(app, ["run", "digits", "--device", "local", "-n", "1", "--warmup", "0"],
                              catch_exceptions=False)  # fmt: skip
    assert warm.exit_code == 0, warm.output
    with farm_testbed(tmp_path_factory.mktemp("farm")) as bed:
        yield bed


@pytest.fixture
def bed(testbed: FarmTestbed) -> Iterator[FarmTestbed]:
    testbed.reset()
    yield testbed
    testbed.reset()


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

    from etdeploy.report import validate_farm

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
def test_a_slower_run_than_the_baseline_is_a_regression_and_exit_1(tmp_path: Path) -> None:
    spec = write_spec(tmp_path / "n.toml", {"models": ["digits"], "devices": ["local"], **QUICK})
    first = farm(spec, "--out", tmp_path / "first")
    assert first.exit_code == 0, first.output
    # The same job, a hundred times faster in the baseline than it can be now.
    (result,) = lines_of(tmp_path / "first" / RESULTS_NAME)
    latency = result["latency_ms"]
    fast = latency["median"] / 100
    latency.update(
        min=fast, median=fast, p90=fast, max=fast, trimmed_mean=fast, stdev=0.0, iterations=[fast]
    )
    baseline = tmp_path / "baseline.jsonl"
    baseline.write_text(json.dumps(result) + "\n")
    again = farm(
        spec, "--out", tmp_path / "second", "--baseline", baseline, "--junit", tmp_path / "j.xml"
    )
    assert again.exit_code == 1, again.output
    assert "regression:" in again.output
    (case,) = ET.parse(tmp_path / "j.xml").getroot().iter("testcase")
    failure = case.find("failure")
    assert failure is not None and failure.get("type") == "regression"


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
