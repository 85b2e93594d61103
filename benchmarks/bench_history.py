"""What the history costs a farm night: recording tonight's jobs into a store that
holds a year, and analysing 1,000 series x 365 nights (change points of every
series, what `etdeploy history list` and the trend page do), against the wall time
of a farm night of the same jobs.

The farm night is measured, not assumed: one real `etdeploy farm` night of digits
and diabetes on this machine ("local", the real runner, 15 iterations) gives the
wall time per job; the night of JOBS jobs is that times JOBS. The year of history
is generated from a real result (tests/data/results): each job's latency from its
own spread, a few busy nights, so the change-point search does the work it does on
real nights. The ratio is the figure (target: under 5%).

    python -m benchmarks history             # 1,000 series x 365 nights
    ETDEPLOY_BENCH_NIGHTS=60 python -m benchmarks history   # a smaller year
"""

from __future__ import annotations

import dataclasses
import os
import random
import tempfile
import time
from pathlib import Path

from etdeploy.history.night import analyse
from etdeploy.history.records import JobKey, JobRecord, record_of
from etdeploy.history.store import open_store
from etdeploy.results.result import RunResult
from tests.results.docs import load_sample

NIGHTS = int(os.environ.get("ETDEPLOY_BENCH_NIGHTS", "365"))
MODELS, DEVICES = 32, 4  # 128 jobs x 8 tracked metrics of the template: 1,024 series


def _year(template: JobRecord) -> list[list[JobRecord]]:
    rng = random.Random(38)
    nights: list[list[JobRecord]] = []
    for n in range(NIGHTS):
        night = []
        for m in range(MODELS):
            for d in range(DEVICES):
                busy = rng.uniform(1.5, 7.0) if rng.random() < 0.06 else 1.0
                metrics = tuple(
                    (
                        name,
                        value * busy * rng.gauss(1.0, 0.03)
                        if name.startswith("latency.")
                        else value,
                    )
                    for name, value in template.metrics
                )
                night.append(dataclasses.replace(
                    template, job_uid=f"bench-{n}-{m}-{d}",
                    key=JobKey(f"model{m}", "xnnpack", "none", f"phone{d}"),
                    started_at=f"2026-{1 + n // 31 % 12:02d}-{1 + n % 31:02d}T{n // 372:02d}:00:00Z",
                    metrics=metrics,
                ))  # fmt: skip
        nights.append(night)
    return nights


def _farm_night_seconds_per_job(folder: Path) -> float:
    from typer.testing import CliRunner

    from etdeploy.cli import app
    from tests.support.farm_fixtures import write_spec

    spec = write_spec(folder / "n.toml", {"models": ["digits", "diabetes"], "devices": ["local"],
                                          "iterations": 15, "warmup": 1})  # fmt: skip
    os.environ["ETDEPLOY_HISTORY"] = "off"  # the farm alone
    CliRunner().invoke(app, ["farm", str(spec), "--out", str(folder / "warm")])  # builds, once
    started = time.perf_counter()
    night = CliRunner().invoke(app, ["farm", str(spec), "--out", str(folder / "night")])
    took = time.perf_counter() - started
    assert night.exit_code == 0, night.stdout[-2000:]
    return took / 2


def main() -> None:
    template = record_of(RunResult.from_json(load_sample("passed_xnnpack")))
    year = _year(template)
    jobs = len(year[0])
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        per_job = _farm_night_seconds_per_job(folder)
        with open_store(folder / "history.sqlite") as store:
            for night in year[:-1]:
                store.record(night, source="bench")
            started = time.perf_counter()
            store.record(year[-1], source="bench")
            record_s = time.perf_counter() - started
            started = time.perf_counter()
            history = store.read()
            trends = analyse(history)
            analyse_s = time.perf_counter() - started
    series = len(history.series)
    shifted = sum(1 for t in trends if t.changes)
    farm_night = per_job * jobs
    print(f"   a farm night: {per_job:.2f} s per job (measured), {jobs} jobs: {farm_night:.0f} s")
    print(f"   recording tonight ({jobs} jobs, {len(template.metrics)} metrics each) into "
          f"{NIGHTS - 1} nights: {record_s:.2f} s ({record_s / farm_night:.2%} of the night)")  # fmt: skip
    print(f"   analysing {series} series x {NIGHTS} nights: {analyse_s:.1f} s "
          f"({analyse_s / farm_night:.1%} of the night); {shifted} series with a change point")  # fmt: skip
    print(f"   together: {(record_s + analyse_s) / farm_night:.1%} of a farm night (target < 5%)")
    # Both figures move with the machine's load (2 shared cores): say what it was.
    print("   load average (1, 5, 15 min): " + ", ".join(f"{x:.2f}" for x in os.getloadavg()))
