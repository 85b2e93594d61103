"""Every farm night's job records, kept, analysed and drawn (`etdeploy history`).

- records: one job of one night: what ran (inputs) and what it measured (metrics).
- tables, migrations: the store's tables and their Alembic revisions.
- store: SQLite by default, PostgreSQL by URL; upgraded on open, idempotent writes.
- changes: change points per series (ruptures + a rank test), the input that
  changed with each, flaky jobs.
- judge: tonight against the history (`farm --baseline history`).
- trend: the static trend page.
- night: what a farm does with its history after a night (record, judge, draw).

Nothing here prints; failures raise EtdeployError kinds. SQLAlchemy, Alembic,
ruptures and scipy are imported where used (the `history` extra installs them).
"""

from __future__ import annotations
