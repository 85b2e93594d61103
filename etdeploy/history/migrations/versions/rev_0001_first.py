"""The first history: jobs (what ran) and their metrics (what they measured).

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "history_jobs",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("job_uid", sa.String(200), nullable=False, unique=True),
        sa.Column("model", sa.String(500), nullable=False),
        sa.Column("backend", sa.String(100), nullable=False),
        sa.Column("quantization", sa.String(100), nullable=False),
        sa.Column("device", sa.String(200), nullable=False),
        sa.Column("status", sa.String(20), nullable=False),
        sa.Column("started_at", sa.String(32), nullable=False),
        sa.Column("inputs", sa.Text, nullable=False),
        sa.Column("source", sa.Text, nullable=False),
        sa.Column("recorded_at", sa.String(32), nullable=False),
    )
    op.create_index("ix_history_jobs_started_at", "history_jobs", ["started_at"])
    op.create_table(
        "history_metrics",
        sa.Column(
            "job_id",
            sa.Integer,
            sa.ForeignKey("history_jobs.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("name", sa.String(200), primary_key=True),
        sa.Column("value", sa.Float, nullable=False),
    )
    op.create_index("ix_history_metrics_name", "history_metrics", ["name"])


def downgrade() -> None:
    op.drop_table("history_metrics")
    op.drop_table("history_jobs")
