"""Alembic's environment: the connection is the one the store opened
(config.attributes["connection"]); nothing is read from an alembic.ini."""

from __future__ import annotations

from alembic import context

from etdeploy.history.tables import METADATA

connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=METADATA)
with context.begin_transaction():
    context.run_migrations()
