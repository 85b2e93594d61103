"""The history store: upgraded on open, idempotent replay, and bad input told in
one line with a hint and exit 2 (an unreachable URL, a newer schema, a series that
matches nothing)."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from etdeploy.cli import app
from etdeploy.errors import UsageError
from etdeploy.history.records import record_of
from etdeploy.history.store import open_store
from etdeploy.results.result import RunResult
from tests.results.docs import load_sample


def history(*args: str | Path) -> Any:
    return CliRunner().invoke(app, ["history", *map(str, args)], catch_exceptions=False)


def one_line_error(result: Any) -> tuple[str, str]:
    lines = [line for line in result.output.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("error:")]
    hints = [line for line in lines if line.startswith("hint:")]
    assert result.exit_code == 2, result.output
    assert len(errors) == 1 and len(hints) == 1, result.output
    return errors[0], hints[0]


@pytest.fixture
def results_file(tmp_path: Path) -> Path:
    """A real result (tests/data/results) as a one-line results.jsonl."""
    import json

    path = tmp_path / "results.jsonl"
    path.write_text(json.dumps(load_sample("passed_xnnpack")) + "\n")
    return path


def test_a_store_is_created_at_the_newest_revision_and_replay_adds_nothing_twice(
    tmp_path: Path, results_file: Path
) -> None:
    store = tmp_path / "h.sqlite"
    first = history("record", results_file, "--store", store)
    assert first.exit_code == 0 and "1 job(s) recorded, 0 already there" in first.output
    again = history("record", results_file, "--store", store)
    assert "0 job(s) recorded, 1 already there" in again.output
    with sqlite3.connect(store) as db:
        assert db.execute("select version_num from alembic_version").fetchall() == [("0001",)]
        assert db.execute("select count(*) from history_jobs").fetchone() == (1,)
    listed = history("list", "--store", store)
    assert "latency.median_ms" in listed.output and "1 job night(s)" in listed.output


def test_metrics_are_rows_so_a_new_metric_needs_no_migration(tmp_path: Path) -> None:
    import dataclasses

    record = record_of(RunResult.from_json(load_sample("passed_xnnpack")))
    # A language model's token agreement, a metric this schema never named.
    newer = dataclasses.replace(
        record, job_uid="llm-night", metrics=(("llm.top1_agreement_share", 0.97),)
    )
    with open_store(tmp_path / "h.sqlite") as store:
        store.record([record, newer], source="test")
        kept = {r.job_uid: r for r in store.jobs()}
    assert kept["llm-night"].metrics == (("llm.top1_agreement_share", 0.97),)
    assert kept[record.job_uid].metric("latency.median_ms") == record.metric("latency.median_ms")


def test_a_history_written_by_a_newer_schema_is_refused(tmp_path: Path, results_file: Path) -> None:
    store = tmp_path / "h.sqlite"
    assert history("record", results_file, "--store", store).exit_code == 0
    with sqlite3.connect(store) as db:
        db.execute("update alembic_version set version_num = '0099'")
    error, hint = one_line_error(history("list", "--store", store))
    assert "written by a newer etdeploy (schema revision 0099; this one knows up to 0001)" in error
    assert "upgrade etdeploy" in hint
    with sqlite3.connect(store) as db:  # and left as it was
        assert db.execute("select version_num from alembic_version").fetchall() == [("0099",)]


def test_an_unreachable_database_is_one_line_and_exit_2(tmp_path: Path) -> None:
    import socket

    with socket.socket() as free:  # a port nothing listens on
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    error, hint = one_line_error(
        history("list", "--store", f"postgresql://etd:secret@127.0.0.1:{port}/h")
    )
    assert f"postgresql+psycopg://etd:***@127.0.0.1:{port}/h" in error or "etd:***" in error
    assert "secret" not in error
    assert "server is running" in hint
    error, _ = one_line_error(history("list", "--store", "mysql://x/y"))
    assert "not a path, sqlite:/// or postgresql:// URL" in error
    error, _ = one_line_error(history("list", "--store", tmp_path / "no" / "such" / "h.sqlite"))
    assert "its folder does not exist" in error


def test_a_series_that_matches_nothing_is_one_line_and_exit_2(
    tmp_path: Path, results_file: Path
) -> None:
    store = tmp_path / "h.sqlite"
    assert history("record", results_file, "--store", store).exit_code == 0
    error, hint = one_line_error(history("show", "resnet", "--store", store))
    assert "no series in" in error and "'resnet'" in error
    assert "model|backend|quantization|device|metric" in hint
    error, _ = one_line_error(history("list", "--store", store, "--since", "yesterday"))
    assert "--since 'yesterday' is not a date" in error


def test_export_writes_csv_rows_per_series_and_night(tmp_path: Path, results_file: Path) -> None:
    import csv
    import io

    store = tmp_path / "h.sqlite"
    assert history("record", results_file, "--store", store).exit_code == 0
    out = history("export", "latency.median_ms", "--format", "csv", "--store", store)
    rows = list(csv.DictReader(io.StringIO(out.stdout)))
    assert [r["metric"] for r in rows] == ["latency.median_ms"]
    doc = load_sample("passed_xnnpack")
    assert float(rows[0]["value"]) == doc["latency_ms"]["median"]
    assert rows[0]["job_id"] == doc["job"]["id"]


def test_the_store_refuses_what_is_not_a_store(tmp_path: Path) -> None:
    not_db = tmp_path / "notes.txt"
    not_db.write_text("not a database\n" * 100)
    with pytest.raises(UsageError, match="history store"):
        open_store(not_db)
