"""The history store: SQLite in a file by default, PostgreSQL by URL for a team.

Opening a store upgrades it to the newest schema revision with Alembic (the
migration scripts ship in etdeploy/history/migrations); a store a newer
etdeploy has upgraded past what this one knows is refused, never written.
Recording is one transaction per call and idempotent by the job's id, so
replaying a results.jsonl into a history that already holds part of it adds
only what is missing, and two farm hosts writing at once lose nothing.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from operator import itemgetter
from pathlib import Path
from typing import TYPE_CHECKING, Any

from etdeploy.errors import UsageError
from etdeploy.history.changes import History, series_from_columns, tracked
from etdeploy.history.records import Inputs, JobKey, JobRecord

if TYPE_CHECKING:
    from etdeploy.history.changes import History

# Where a store is given: a path (SQLite) or a URL. Read 2026-12-05 from SQLAlchemy
# 2.1's dialect docs: "postgresql+psycopg://" selects psycopg 3.
_POSTGRES_SCHEMES = ("postgresql://", "postgres://", "postgresql+psycopg://")
MIGRATIONS = Path(__file__).parent / "migrations"
# SQLite waits this long for another writer's lock (two farms on one host).
SQLITE_BUSY_TIMEOUT_S = 60.0
# PostgreSQL: one process upgrades the schema at a time (an arbitrary, fixed key).
_UPGRADE_LOCK_KEY = 0x37_64_68_69


@dataclass(frozen=True)
class RecordOutcome:
    """What one recording did: jobs added, and jobs the store already held."""

    added: int
    already: int


def engine_url(where: str | Path) -> str:
    """A store's SQLAlchemy URL from what a user gives: a path or a URL."""
    text = str(where)
    for scheme in _POSTGRES_SCHEMES:
        if text.startswith(scheme):
            return "postgresql+psycopg://" + text[len(scheme) :]
    if text.startswith("sqlite:///"):
        return text
    if "://" in text:
        raise UsageError(
            f"history store {shown_url(text)}: not a path, sqlite:/// or postgresql:// URL",
            "give a file path for SQLite, or postgresql://USER@HOST:PORT/DB for a shared history",
        )
    return f"sqlite:///{Path(text).expanduser().resolve()}"


def shown_url(text: str) -> str:
    """A URL as it may be printed: without its password."""
    from sqlalchemy.engine import make_url

    if "://" not in text:
        return text
    try:
        return make_url(text).render_as_string(hide_password=True)
    except Exception:  # an unparsable URL: show only its scheme
        return text.split("://", 1)[0] + "://..."


class HistoryStore:
    """An open history: record nights, read series. Close it (or use `with`)."""

    def __init__(self, where: str | Path) -> None:
        from sqlalchemy import create_engine, event

        self.url = engine_url(where)
        self.shown = shown_url(str(where))
        self.is_sqlite = self.url.startswith("sqlite")
        if self.is_sqlite:
            path = Path(self.url.removeprefix("sqlite:///"))
            if not path.parent.is_dir():
                raise UsageError(
                    f"history store {path}: its folder does not exist",
                    "create the folder, or give another history path",
                )
            self.engine = create_engine(
                self.url, connect_args={"timeout": SQLITE_BUSY_TIMEOUT_S}, poolclass=_null_pool()
            )
            event.listen(self.engine, "connect", _sqlite_pragmas)
        else:
            self.engine = create_engine(self.url, poolclass=_null_pool())
        try:
            self._upgrade()
        except BaseException:
            self.engine.dispose()
            raise

    def __enter__(self) -> HistoryStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.engine.dispose()

    # -- schema ----------------------------------------------------------------------------

    def _upgrade(self) -> None:
        from alembic import command
        from alembic.config import Config
        from alembic.runtime.migration import MigrationContext
        from alembic.script import ScriptDirectory
        from alembic.util.exc import CommandError
        from sqlalchemy import text
        from sqlalchemy.exc import SQLAlchemyError

        config = Config()
        config.set_main_option("script_location", str(MIGRATIONS))
        script = ScriptDirectory.from_config(config)
        try:
            with self._upgrade_lock(), self.engine.begin() as connection:
                if not self.is_sqlite:
                    connection.execute(
                        text("SELECT pg_advisory_xact_lock(:k)"), {"k": _UPGRADE_LOCK_KEY}
                    )
                current = MigrationContext.configure(connection).get_current_heads()
                for revision in current:
                    try:
                        script.get_revision(revision)
                    except CommandError:
                        raise UsageError(
                            f"history store {self.shown} was written by a newer etdeploy "
                            f"(schema revision {revision}; this one knows up to {script.get_current_head()})",
                            "upgrade etdeploy to read it, or give another history store",
                        ) from None
                if tuple(current) != (script.get_current_head(),):
                    config.attributes["connection"] = connection
                    command.upgrade(config, "head")
        except SQLAlchemyError as exc:
            raise _unreachable(self.shown, exc) from None

    @contextlib.contextmanager
    def _upgrade_lock(self) -> Iterator[None]:
        """SQLite: one process upgrades a file at a time (a lock file beside it);
        PostgreSQL takes an advisory lock inside the upgrade's transaction."""
        if not self.is_sqlite:
            yield
            return
        import filelock

        path = self.url.removeprefix("sqlite:///")
        with filelock.FileLock(path + ".lock", timeout=SQLITE_BUSY_TIMEOUT_S):
            yield

    # -- writing -----------------------------------------------------------------------------

    def record(self, records: Sequence[JobRecord], *, source: str) -> RecordOutcome:
        """Add the records the store does not hold yet (by job id), in one transaction."""
        from sqlalchemy.exc import SQLAlchemyError

        from etdeploy.history import tables

        insert = _insert_for(self.engine.dialect.name)
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        added = 0
        try:
            with self.engine.begin() as connection:
                for record in records:
                    row = {
                        "job_uid": record.job_uid, "model": record.key.model,
                        "backend": record.key.backend, "quantization": record.key.quantization,
                        "device": record.key.device, "status": record.status,
                        "started_at": record.started_at, "inputs": record.inputs.json_text(),
                        "source": source, "recorded_at": now,
                    }  # fmt: skip
                    statement = (
                        insert(tables.jobs)
                        .values(row)
                        .on_conflict_do_nothing(index_elements=["job_uid"])
                        .returning(tables.jobs.c.id)
                    )
                    job_id = connection.execute(statement).scalar()
                    if job_id is None:
                        continue  # recorded before (a replay, or another host)
                    added += 1
                    if record.metrics:
                        connection.execute(
                            tables.metrics.insert(),
                            [{"job_id": job_id, "name": n, "value": v} for n, v in record.metrics],
                        )
        except SQLAlchemyError as exc:
            raise _unreachable(self.shown, exc) from None
        return RecordOutcome(added=added, already=len(records) - added)

    # -- reading -----------------------------------------------------------------------------

    def jobs(self, since: str | None = None) -> list[JobRecord]:
        """Every job recorded (started at or after `since`), oldest first, with its metrics."""
        from sqlalchemy import select
        from sqlalchemy.exc import SQLAlchemyError

        from etdeploy.history import tables

        j, m = tables.jobs, tables.metrics
        query = select(j.c.id, j.c.job_uid, j.c.model, j.c.backend, j.c.quantization,
                       j.c.device, j.c.status, j.c.started_at, j.c.inputs)  # fmt: skip
        values = select(m.c.job_id, m.c.name, m.c.value)
        if since is not None:
            query = query.where(j.c.started_at >= since)
            values = values.join(j, j.c.id == m.c.job_id).where(j.c.started_at >= since)
        try:
            with self.engine.connect() as connection:
                rows = connection.execute(query.order_by(j.c.started_at, j.c.id)).all()
                # One query for every metric, in (job, name) order: each job's metrics
                # are one run of rows, sorted already (the primary key's order).
                metric_rows = connection.execute(values.order_by(m.c.job_id, m.c.name)).all()
                by_job = {
                    job_id: tuple((name, value) for _, name, value in group)
                    for job_id, group in itertools.groupby(metric_rows, key=itemgetter(0))
                }
        except SQLAlchemyError as exc:
            raise _unreachable(self.shown, exc) from None
        return [
            JobRecord(
                job_uid=row.job_uid,
                key=JobKey(row.model, row.backend, row.quantization, row.device),
                started_at=row.started_at,
                status=row.status,
                inputs=Inputs(text=row.inputs),
                metrics=by_job.get(row.id, ()),
            )
            for row in rows
        ]

    def read(self, since: str | None = None) -> History:
        """Every job recorded (started at or after `since`) and every tracked series,
        read as columns: the jobs in one query, each tracked metric's (job, value)
        rows in one query each; a job's inputs are parsed only if asked for (a change
        point naming what changed). What a night and `etdeploy history` analyse."""
        from sqlalchemy import select
        from sqlalchemy.exc import SQLAlchemyError

        from etdeploy.history import tables

        j, m = tables.jobs, tables.metrics
        query = select(j.c.id, j.c.job_uid, j.c.model, j.c.backend, j.c.quantization,
                       j.c.device, j.c.status, j.c.started_at, j.c.inputs)  # fmt: skip
        if since is not None:
            query = query.where(j.c.started_at >= since)
        try:
            with self.engine.connect() as connection:
                rows = connection.execute(query.order_by(j.c.started_at, j.c.id)).all()
                names = connection.execute(select(m.c.name).distinct()).scalars().all()
                columns: dict[str, tuple[Sequence[int], Sequence[float]]] = {}
                for name in sorted(n for n in names if tracked(n)):
                    pairs = connection.execute(
                        select(m.c.job_id, m.c.value).where(m.c.name == name)
                    ).all()
                    columns[name] = ([job for job, _ in pairs], [value for _, value in pairs])
        except SQLAlchemyError as exc:
            raise _unreachable(self.shown, exc) from None
        keys: dict[tuple[str, str, str, str], JobKey] = {}
        jobs = []
        for row in rows:
            parts = (row.model, row.backend, row.quantization, row.device)
            key = keys.get(parts) or keys.setdefault(parts, JobKey(*parts))
            jobs.append(JobRecord(row.job_uid, key, row.started_at, row.status,
                                  Inputs(text=row.inputs), ()))  # fmt: skip
        series = series_from_columns(jobs, [row.id for row in rows], columns)
        return History(tuple(jobs), tuple(series))


def open_store(where: str | Path) -> HistoryStore:
    return HistoryStore(where)


def default_store(out_dir: Path, spec_store: str | None = None) -> str:
    """Where a farm keeps its history: $ETDEPLOY_HISTORY (a path or a URL; this
    run's own choice), else the spec's farm.history (the team's store), else
    etdeploy-history.sqlite beside the farm's OUT folder, so the nights of a farm
    whose OUT changes every night (nights/2026-12-05) share one file."""
    return (
        os.environ.get("ETDEPLOY_HISTORY")
        or spec_store
        or str(out_dir.resolve().parent / "etdeploy-history.sqlite")
    )


def _null_pool() -> Any:
    from sqlalchemy.pool import NullPool

    # A CLI opens a store for one command: no connections kept between them.
    return NullPool


def _sqlite_pragmas(connection: Any, _record: Any) -> None:
    # WAL lets readers read while a farm writes; read 2026-12-05 from sqlite.org/wal.html.
    cursor = connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()


def _insert_for(dialect: str) -> Any:
    if dialect == "postgresql":
        from sqlalchemy.dialects.postgresql import insert as pg_insert

        return pg_insert
    from sqlalchemy.dialects.sqlite import insert as sqlite_insert

    return sqlite_insert


def _unreachable(shown: str, exc: Exception) -> UsageError:
    first = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]
    return UsageError(
        f"history store {shown}: {first}",
        "check the path or URL (host, port, user, database) and that the server is running",
    )
