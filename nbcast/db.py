"""The database layer: engines, sessions, column types and migrations.

Two back ends, one schema:

- **SQLite** (embedded default): a file in the nbcast home folder, WAL journal,
  foreign keys on, a busy timeout so short write contention waits instead of failing.
- **PostgreSQL** (production, and every multi-process test):
  ``postgresql+psycopg://…``.

The schema is owned by Alembic (``nbcast/migrations``). :meth:`Database.open`
upgrades an out-of-date database to the head revision on first use, under a lock
(``pg_advisory_lock`` on PostgreSQL, a file lock beside the SQLite file) so that
several processes starting at once migrate it exactly once. ``nbcast db upgrade``
does the same explicitly.

All instants are stored as UTC. :class:`UTCDateTime` refuses naive datetimes on the
way in and returns aware ones on the way out, on both back ends.

**What nbcast will not touch.** :meth:`Database.open` refuses, with a one-line
:class:`~nbcast.errors.StorageError` and without writing anything, a database file
that exists but is not nbcast's: an empty (0-byte) file (SQLite would silently make
it a new database), a file that is not SQLite, a database with tables but no
nbcast schema version, and one migrated by a newer nbcast. Every failure to reach,
read or write the database (a read-only folder, an unreachable server, a corrupt
file, a full disk) is a ``StorageError`` naming the database with its password
hidden, never a driver traceback. The embedded database's files are created
``0600``.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Dialect, Engine
from sqlalchemy.orm import DeclarativeBase, Session, sessionmaker

from nbcast.errors import StorageError

__all__ = [
    "Base",
    "Database",
    "JSONType",
    "UTCDateTime",
    "error_reason",
    "import_models",
    "insert_ignore",
    "insert_many_ignore",
]

MIGRATIONS_DIR = Path(__file__).parent / "migrations"
_PG_MIGRATION_LOCK = 0x6E62_6361  # "nbca": the advisory-lock key for migrations


class UTCDateTime(sa.types.TypeDecorator[datetime]):
    """A timezone-aware UTC instant on every back end.

    PostgreSQL stores ``timestamptz``; SQLite stores the naive UTC wall time. Naive
    datetimes are refused, because nbcast never guesses a time zone.
    """

    impl = sa.DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None or value.utcoffset() is None:
            raise StorageError(f"refusing to store naive datetime {value.isoformat()}")
        value = value.astimezone(UTC)
        if dialect.name == "sqlite":
            return value.replace(tzinfo=None)
        return value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)


JSONType = sa.JSON(none_as_null=True).with_variant(
    postgresql.JSONB(none_as_null=True), "postgresql"
)
"""JSON on SQLite, JSONB on PostgreSQL; Python ``None`` is SQL ``NULL`` on both (not a
JSON ``null``), so ``IS NULL`` means the same everywhere."""


class Base(DeclarativeBase):
    """Declarative base of every nbcast table; each plane defines its own models."""

    type_annotation_map = {datetime: UTCDateTime()}  # noqa: RUF012


def import_models() -> None:
    """Import every layer's models so ``Base.metadata`` knows all tables (the one
    import that runs up the stack: the registration, named in the layer test)."""
    import nbcast.definitions.models
    import nbcast.delivery.models
    import nbcast.executor.models
    import nbcast.heartbeats
    import nbcast.oversight.models
    import nbcast.scheduler.models
    import nbcast.tenancy.models  # noqa: F401


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    # isolation_level=None hands transaction control to SQLAlchemy's "BEGIN" below.
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA busy_timeout=30000")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()


def _sqlite_begin(conn: sa.Connection) -> None:
    # BEGIN IMMEDIATE takes the write lock up front, so two writers queue on the
    # busy timeout instead of one failing with "database is locked" mid-transaction.
    conn.exec_driver_sql("BEGIN IMMEDIATE")


def create_engine(url: str, **kwargs: Any) -> Engine:
    """An engine for ``url`` with nbcast's per-dialect settings."""
    if url.startswith("sqlite"):
        path = sa.engine.make_url(url).database
        if path and path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        engine = sa.create_engine(url, **kwargs)
        event.listen(engine, "connect", _sqlite_pragmas)
        event.listen(engine, "begin", _sqlite_begin)
        return engine
    kwargs.setdefault("pool_pre_ping", True)
    return sa.create_engine(url, **kwargs)


class Database:
    """An engine plus a session factory for one nbcast database.

    Use :meth:`open` rather than the constructor: it also brings the schema to the
    head revision.
    """

    def __init__(self, url: str, **engine_kwargs: Any) -> None:
        import_models()  # relationships and flush order need every plane's tables
        self.url = url
        self.engine = create_engine(url, **engine_kwargs)
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)

    @classmethod
    def open(
        cls,
        url: str,
        *,
        upgrade: bool = True,
        owner_url: str | None = None,
        **engine_kwargs: Any,
    ) -> Database:
        """Connect to ``url`` and, unless ``upgrade`` is false, migrate it to head —
        as ``owner_url``'s role when given, granting ``url``'s role what it needs
        (:mod:`nbcast.db_roles`).

        Refuses a database that is not nbcast's (module docstring).
        """
        path = _sqlite_path(url)
        if path is not None:
            _check_sqlite_file(path)
        try:
            db = cls(url, **engine_kwargs)
        except OSError as exc:
            raise StorageError(f"cannot open database {_safe(url)}: {exc.strerror}") from None
        try:
            current = db.current_revision()
            if current == db.head_revision():
                db._check_ours(current)
            else:
                # Checked again under the migration lock: another process may be half
                # way through creating the schema (SQLite runs DDL outside the
                # transaction), which looks like tables without nbcast's revision.
                with db._migration_lock():
                    current = db.current_revision()
                    db._check_ours(current)
                    if upgrade and current != db.head_revision():
                        db._migrate("head", owner_url)
        except StorageError:
            db.dispose()
            raise
        except (sa.exc.DBAPIError, OSError) as exc:
            db.dispose()
            raise StorageError(f"cannot open database {db.safe_url}: {error_reason(exc)}") from None
        if path is not None:
            _private(path)
        return db

    def _check_ours(self, current: str | None) -> None:
        """Refuse a database with a foreign schema or a newer nbcast's."""
        if current is None:
            with self.engine.connect() as conn:
                tables = sa.inspect(conn).get_table_names()
            if tables:
                raise StorageError(
                    f"database {self.safe_url} holds tables ({', '.join(sorted(tables)[:3])}…) "
                    "but no nbcast schema; nbcast will not touch a database that is not its own"
                )
            return
        known = {p.name.split("_", 1)[0] for p in (MIGRATIONS_DIR / "versions").glob("[0-9]*_*.py")}
        if current not in known:
            raise StorageError(
                f"database {self.safe_url} is at schema {current[:32]!r}, which this nbcast "
                f"does not know (newest {self.head_revision()}); upgrade nbcast"
            )

    @functools.cached_property
    def telemetry_engine(self) -> sa.Engine:
        """An engine for writes that are evidence of use, not of nbcast's state (a
        signed link's openings): on PostgreSQL its commits do not wait for the WAL to
        reach the disk (``synchronous_commit = off``, set as each connection opens), so
        a public endpoint does not pay an fsync per request; a PostgreSQL crash may lose
        the last fraction of a second of such rows, never the database's consistency.
        Elsewhere it is :attr:`engine`."""
        if self.dialect != "postgresql":
            return self.engine
        engine = create_engine(self.url, pool_size=4, max_overflow=4)
        event.listen(engine, "connect", _relaxed_commits)
        return engine

    @property
    def dialect(self) -> str:
        """``sqlite`` or ``postgresql``."""
        return self.engine.dialect.name

    @property
    def safe_url(self) -> str:
        """The URL with any password hidden (also one given as a query parameter), for
        messages and logs."""
        return _safe(self.url)

    @contextlib.contextmanager
    def session(self) -> Iterator[Session]:
        """A session in one transaction: committed on success, rolled back on error."""
        with self._sessions() as session, session.begin():
            yield session

    def dispose(self) -> None:
        """Close every pooled connection."""
        self.engine.dispose()
        if "telemetry_engine" in self.__dict__:
            self.telemetry_engine.dispose()

    # -- migrations ---------------------------------------------------------------

    def _alembic_config(self) -> Any:
        from alembic.config import Config

        config = Config()
        config.set_main_option("script_location", str(MIGRATIONS_DIR))
        return config

    @staticmethod
    def head_revision() -> str:
        """The newest revision in the migrations folder.

        Revisions are numbered ``NNNN`` and their files named ``NNNN_*.py`` (a test
        checks this agrees with Alembic's own view), so the check that runs on every
        start reads a directory instead of importing Alembic.
        """
        names = (p.name.split("_", 1)[0] for p in (MIGRATIONS_DIR / "versions").glob("[0-9]*_*.py"))
        return max(names)

    def current_revision(self) -> str | None:
        """The revision the database is at, or None for an empty database."""
        with self.engine.connect() as conn:
            if not sa.inspect(conn).has_table("alembic_version"):
                return None
            return conn.execute(sa.text("SELECT version_num FROM alembic_version")).scalar()

    def upgrade(self, revision: str = "head", *, owner_url: str | None = None) -> None:
        """Apply migrations up to ``revision``, once even under concurrent callers (as
        ``owner_url``'s role when given: :meth:`open`)."""
        with self._migration_lock():
            self._migrate(revision, owner_url)

    def _migrate(self, revision: str, owner_url: str | None) -> None:
        """Migrate as this database's role, or as the owner's and grant this one's."""
        from nbcast.db_roles import application_role, grant_application_role

        role = application_role(self.url)
        if owner_url is None or owner_url == self.url or self.dialect != "postgresql":
            try:
                self._apply_migrations(revision)
            except StorageError as exc:
                if "permission denied" in str(exc) or "must be owner" in str(exc):
                    raise StorageError(
                        f"{exc}; migrations run as the schema's owner: run `nbcast db upgrade` "
                        "with NBCAST_DATABASE_OWNER_URL set to its URL"
                    ) from None
                raise
            return
        owner = Database(owner_url)
        try:
            owner._apply_migrations(revision)
            if role is not None and role != application_role(owner_url):
                with owner.engine.begin() as conn:
                    grant_application_role(conn, role)
        except (sa.exc.DBAPIError, OSError) as exc:
            raise StorageError(
                f"cannot grant the application role on {owner.safe_url}: {error_reason(exc)}"
            ) from None
        finally:
            owner.dispose()

    def _apply_migrations(self, revision: str) -> None:
        """Apply migrations up to ``revision`` (the caller holds the migration lock)."""
        from alembic import command

        config = self._alembic_config()
        sqlite = self.dialect == "sqlite"
        try:
            with self.engine.connect() as conn:
                raw: Any = conn.connection.driver_connection
                if sqlite:
                    # SQLite rebuilds a table to change it; a parent's rows would vanish
                    # for a moment. So, as SQLite's own procedure for schema changes
                    # says: foreign keys off (outside the transaction), migrate, check
                    # every key (foreign_key_check), commit, keys on again.
                    raw.execute("PRAGMA foreign_keys=OFF")
                try:
                    with conn.begin():
                        config.attributes["connection"] = conn
                        command.upgrade(config, revision)
                        if sqlite:
                            broken = conn.exec_driver_sql("PRAGMA foreign_key_check").first()
                            if broken is not None:
                                raise StorageError(
                                    f"cannot migrate database {self.safe_url}: it would "
                                    f"leave a foreign key of {broken[0]} broken"
                                )
                finally:
                    if sqlite:
                        raw.execute("PRAGMA foreign_keys=ON")
        except (sa.exc.DBAPIError, OSError) as exc:
            raise StorageError(
                f"cannot migrate database {self.safe_url}: {error_reason(exc)}"
            ) from None

    @contextlib.contextmanager
    def _migration_lock(self) -> Iterator[None]:
        if self.dialect == "postgresql":
            with self.engine.connect() as conn:
                conn.execute(sa.text("SELECT pg_advisory_lock(:k)"), {"k": _PG_MIGRATION_LOCK})
                conn.commit()
                try:
                    yield
                finally:
                    conn.execute(
                        sa.text("SELECT pg_advisory_unlock(:k)"), {"k": _PG_MIGRATION_LOCK}
                    )
                    conn.commit()
            return
        from filelock import FileLock

        path = self.engine.url.database
        if not path or path == ":memory:":
            yield
            return
        with FileLock(f"{path}.migrate.lock"):
            yield


def _safe(url: str) -> str:
    from nbcast.config import mask_url

    try:
        return mask_url(sa.engine.make_url(url).render_as_string(hide_password=True))
    except Exception:
        return "(unparsable URL)"


def _relaxed_commits(dbapi_connection: Any, _record: Any) -> None:
    """Make a new PostgreSQL connection's commits skip the wait for the WAL flush."""
    cursor = dbapi_connection.cursor()
    cursor.execute("SET synchronous_commit TO off")
    cursor.close()
    dbapi_connection.commit()


def error_reason(exc: BaseException) -> str:
    """One line saying why a database operation failed (the driver's message)."""
    orig = getattr(exc, "orig", None)
    text = str(orig if orig is not None else getattr(exc, "strerror", None) or exc)
    line = text.strip().splitlines()[0] if text.strip() else type(exc).__name__
    return line[:300]


def _sqlite_path(url: str) -> Path | None:
    if not url.startswith("sqlite"):
        return None
    database = sa.engine.make_url(url).database
    if not database or database == ":memory:" or database.startswith("file:"):
        return None
    return Path(database)


def _check_sqlite_file(path: Path) -> None:
    """Refuse an existing file at ``path`` that is not an SQLite database.

    The file is never opened with a plain file handle: closing any handle of a file
    drops every POSIX lock this process holds on it, including those of SQLite
    connections already open here — which would let another process write under them
    and corrupt the database. So its size comes from ``stat`` and its format from a
    read-only SQLite connection, which shares SQLite's own bookkeeping of the file.
    """
    import sqlite3

    try:
        if not path.exists():
            return
        info = path.stat()
    except OSError as exc:
        raise StorageError(f"cannot read database {path}: {exc.strerror}") from None
    if not path.is_file():
        raise StorageError(f"database {path} exists and is not a file")
    if info.st_size == 0:
        raise StorageError(
            f"database {path} exists but is empty (0 bytes): it is not an nbcast database; "
            "nbcast will not overwrite it (move it away to start afresh)"
        )
    if info.st_nlink > 1:
        # Each name would get its own -wal file: SQLite cannot share such a database
        # safely, and one scheduler lock per name would not keep two schedulers apart.
        raise StorageError(
            f"database {path} has {info.st_nlink} hard links; SQLite cannot share a database "
            "file under several names (use one path)"
        )
    try:
        probe = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
        try:
            probe.execute("PRAGMA schema_version").fetchone()
        finally:
            probe.close()
    except sqlite3.DatabaseError as exc:
        raise StorageError(f"database {path} is not an SQLite database ({exc})") from None


def _private(path: Path) -> None:
    """The embedded database's files are the home's secrets: ``0600``."""
    for name in (path.name, f"{path.name}-wal", f"{path.name}-shm"):
        with contextlib.suppress(OSError):
            (path.parent / name).chmod(0o600)


def _table(model: type[Base] | sa.Table) -> sa.Table:
    return model if isinstance(model, sa.Table) else cast(sa.Table, model.__table__)


def insert_ignore(
    model: type[Base] | sa.Table, rows: Sequence[dict[str, Any]], dialect: str
) -> Any:
    """``INSERT … ON CONFLICT DO NOTHING`` for ``rows`` on either back end."""
    table = _table(model)
    if dialect == "postgresql":
        return postgresql.insert(table).values(list(rows)).on_conflict_do_nothing()
    return sqlite.insert(table).values(list(rows)).on_conflict_do_nothing()


def insert_many_ignore(
    session: Session, model: type[Base] | sa.Table, rows: Sequence[dict[str, Any]]
) -> int:
    """Insert ``rows`` with ``ON CONFLICT DO NOTHING``; return how many were new.

    On PostgreSQL the rows are streamed with ``COPY`` into a temporary staging table
    and moved with one ``INSERT … SELECT``: no per-row SQL to build or parse, which is
    what lets the materializer insert tens of thousands of slots a second. On SQLite it
    is an executemany with ``RETURNING``.
    """
    if not rows:
        return 0
    table = _table(model)
    if session.get_bind().dialect.name == "postgresql":
        return _copy_insert(session, table, rows)
    key = next(iter(table.primary_key.columns))
    statement = sqlite.insert(table).on_conflict_do_nothing().returning(key)
    return len(session.execute(statement, list(rows)).all())


def _copy_insert(session: Session, table: sa.Table, rows: Sequence[dict[str, Any]]) -> int:
    """COPY ``rows`` into a session-local staging table, then one ``INSERT … SELECT …
    ON CONFLICT DO NOTHING``: the cheapest way to move many rows into PostgreSQL."""
    import json

    names = list(rows[0])
    columns = ", ".join(f'"{n}"' for n in names)
    json_columns = {n for n in names if isinstance(_impl(table.c[n].type), sa.JSON)}
    stage = f"_nbcast_stage_{table.name}"
    raw = session.connection().connection.driver_connection
    assert raw is not None
    with raw.cursor() as cursor:
        cursor.execute(
            f'CREATE TEMP TABLE IF NOT EXISTS "{stage}" ON COMMIT DELETE ROWS AS '
            f'SELECT {columns} FROM "{table.name}" WITH NO DATA'
        )
        cursor.execute(f'TRUNCATE "{stage}"')
        with cursor.copy(f'COPY "{stage}" ({columns}) FROM STDIN') as copy:
            for row in rows:
                copy.write_row(
                    [
                        json.dumps(row[n]) if n in json_columns and row[n] is not None else row[n]
                        for n in names
                    ]
                )
        cursor.execute(
            f'INSERT INTO "{table.name}" ({columns}) SELECT {columns} FROM "{stage}" '
            "ON CONFLICT DO NOTHING"
        )
        return max(int(cursor.rowcount), 0)


def _impl(kind: Any) -> Any:
    return kind.impl_instance if isinstance(kind, sa.types.TypeDecorator) else kind


def utcnow() -> datetime:
    """The real current instant (for defaults only; components use a Clock)."""
    return datetime.now(UTC)
