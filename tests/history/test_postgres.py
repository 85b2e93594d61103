"""The history on a real PostgreSQL server: two farm processes and two replays
writing at once lose nothing, and the shifts are found there as in SQLite."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from etdeploy.history.records import record_of
from etdeploy.history.store import open_store
from etdeploy.results.result import RunResult
from tests.history.conftest import RealNights
from tests.history.nights import (
    LATENCY_MODEL,
    LATENCY_NIGHT,
    MEMORY_NIGHT,
    sixty_nights,
    write_night,
)
from tests.support.farm_fixtures import REPO, write_spec
from tests.support.postgres import PostgresServer, postgres_bin, postgres_server

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        postgres_bin() is None,
        reason="PostgreSQL's initdb/pg_ctl not found (Debian's postgresql package; make setup installs it)",
    ),
]


@pytest.fixture(scope="module")
def postgres() -> Iterator[PostgresServer]:
    with postgres_server() as server:
        yield server


def etdeploy(*args: str | Path, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "etdeploy", *map(str, args)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)  # fmt: skip


def test_two_farms_and_two_replays_writing_at_once_lose_nothing(
    postgres: PostgresServer, real_nights: RealNights, tmp_path: Path
) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO), "ETDEPLOY_HISTORY": postgres.url}
    spec = write_spec(tmp_path / "n.toml", {"models": ["digits", "diabetes"], "devices": ["local"],
                                            "iterations": 3, "warmup": 0})  # fmt: skip
    farms = [etdeploy("farm", spec, "--out", tmp_path / f"host{i}", env=env) for i in range(2)]
    nights = sixty_nights(real_nights.nights)
    halves = [[write_night(night, tmp_path / "gen" / f"n{n:02d}.jsonl")
               for n, night in enumerate(nights) if n % 2 == part] for part in range(2)]  # fmt: skip
    replays = [etdeploy("history", "record", *half, env=env) for half in halves]
    for process in [*farms, *replays]:
        output, _ = process.communicate(timeout=900)
        assert process.returncode == 0, output
    expected = {doc["job"]["id"] for night in nights for doc in night}
    for i in range(2):
        for line in (tmp_path / f"host{i}" / "results.jsonl").read_text().splitlines():
            expected.add(json.loads(line)["job"]["id"])
    with open_store(postgres.url) as store:
        kept = store.jobs()
    assert {r.job_uid for r in kept} == expected
    assert len(kept) == len(expected)  # and none twice


def test_the_shifts_are_found_on_postgres_as_on_sqlite(
    postgres: PostgresServer, real_nights: RealNights, tmp_path: Path
) -> None:
    from etdeploy.history.changes import history_of
    from etdeploy.history.night import analyse

    records = [record_of(RunResult.from_json(doc)) for night in sixty_nights(real_nights.nights)
               for doc in night]  # fmt: skip
    found = {}
    for where in (postgres.url, str(tmp_path / "h.sqlite")):
        with open_store(where) as store:
            store.record(records, source="sixty nights")
            every = store.jobs()
            columns = store.read()
        # The store read as columns holds what its jobs hold, series by series.
        assert [(s.name, s.values, [r.job_uid for r in s.records]) for s in columns.series] == [
            (s.name, s.values, [r.job_uid for r in s.records]) for s in history_of(every).series
        ]
        mine = history_of([r for r in every if r.job_uid in {x.job_uid for x in records}])
        found[where] = {(t.series.name, c.index) for t in analyse(mine) for c in t.changes}
    on_postgres, on_sqlite = found.values()
    assert on_postgres == on_sqlite
    # Both shifts at their night (within one) on both stores.
    memory = {i for name, i in on_postgres if name.endswith("memory.planned_bytes")}
    assert memory and memory <= {MEMORY_NIGHT - 1, MEMORY_NIGHT, MEMORY_NIGHT + 1}
    latency = {i for name, i in on_postgres if name.startswith(LATENCY_MODEL)
               and name.endswith(("latency.median_ms", "latency.min_ms", "latency.cpu_median_ms"))}  # fmt: skip
    assert latency & {LATENCY_NIGHT - 1, LATENCY_NIGHT, LATENCY_NIGHT + 1}
