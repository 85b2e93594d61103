"""The history's tables, as SQLAlchemy Core describes them.

The migrations (etdeploy/history/migrations/versions) create and change them;
this module says what the newest revision looks like, for the queries.
Metrics are rows (job, name, value), so a new metric needs no migration.
"""

from __future__ import annotations

from sqlalchemy import Column, Float, ForeignKey, Index, Integer, MetaData, String, Table, Text

METADATA = MetaData()

# The revision this etdeploy writes (the newest under migrations/versions).
HEAD_REVISION = "0001"

jobs = Table(
    "history_jobs",
    METADATA,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("job_uid", String(200), nullable=False, unique=True),
    Column("model", String(500), nullable=False),
    Column("backend", String(100), nullable=False),
    Column("quantization", String(100), nullable=False),
    Column("device", String(200), nullable=False),
    Column("status", String(20), nullable=False),
    Column("started_at", String(32), nullable=False),
    Column("inputs", Text, nullable=False),  # JSON: {name: value}
    Column("source", Text, nullable=False),  # the results file or farm it came from
    Column("recorded_at", String(32), nullable=False),
)
Index("ix_history_jobs_started_at", jobs.c.started_at)

metrics = Table(
    "history_metrics",
    METADATA,
    Column("job_id", Integer, ForeignKey("history_jobs.id", ondelete="CASCADE"), primary_key=True),
    Column("name", String(200), primary_key=True),
    Column("value", Float, nullable=False),
)
Index("ix_history_metrics_name", metrics.c.name)
