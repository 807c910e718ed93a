"""A scratch PostgreSQL database for a test or a benchmark: :func:`scratch_database`.

::

    from nbcast.db import Database
    from nbcast.testing.postgres import scratch_database

    ADMIN = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
    with scratch_database(ADMIN, prefix="myapp_test") as url:
        Database.open(url).dispose()        # migrate nbcast's schema into it
        ...                                 # NBCAST_DATABASE_URL=url nbcast ...

Design decisions
----------------
* **Unique and disposable.** The database is named ``<prefix>_<pid>_<random>``, so
  concurrent test sessions and benchmarks on one server never meet. On exit every
  connection still open to it (a worker that was killed, a pool not yet disposed) is
  terminated, then it is dropped.
* **A missing server is its own error.** When the admin URL cannot be reached,
  :class:`PostgresUnavailable` is raised (with the driver's first line) before anything
  is yielded, so a test suite can skip, a benchmark can report "skipped", and CI can
  fail, each as it sees fit.
* **Empty.** Nothing is created in it; migrating nbcast's schema is the caller's call.
* The admin URL needs a role that may ``CREATE DATABASE`` and terminate backends
  (e.g. ``postgres``); SQLAlchemy and a PostgreSQL driver (``psycopg``, a dependency of
  nbcast) are imported when the function is called.
"""

from __future__ import annotations

import contextlib
import os
import re
import uuid
from collections.abc import Iterator

__all__ = ["PostgresUnavailable", "scratch_database"]

_PREFIX = re.compile(r"[a-z_][a-z0-9_]{0,40}")


class PostgresUnavailable(RuntimeError):
    """The admin URL's PostgreSQL server could not be reached (the message says why)."""


@contextlib.contextmanager
def scratch_database(admin_url: str, *, prefix: str = "nbcast_scratch") -> Iterator[str]:
    """Create a new, empty database on ``admin_url``'s server, yield its URL, then drop it.

    ``prefix`` is lower-case letters, digits and ``_`` (at most 41 characters). Raises
    :class:`PostgresUnavailable` when the server cannot be reached.
    """
    import sqlalchemy as sa

    if _PREFIX.fullmatch(prefix) is None:
        raise ValueError(f"prefix {prefix!r}: use lower-case letters, digits and '_'")
    name = f"{prefix}_{os.getpid()}_{uuid.uuid4().hex[:6]}"
    admin = sa.create_engine(admin_url, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    except sa.exc.OperationalError as exc:
        admin.dispose()
        reason = (str(exc.orig).strip().splitlines() or [repr(exc)])[0]
        raise PostgresUnavailable(reason) from exc
    except BaseException:
        admin.dispose()
        raise
    url = sa.engine.make_url(admin_url).set(database=name).render_as_string(hide_password=False)
    try:
        yield url
    finally:
        try:
            with admin.connect() as conn:
                conn.execute(
                    sa.text(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                        "WHERE datname = :name AND pid <> pg_backend_pid()"
                    ),
                    {"name": name},
                )
                conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}"'))
        finally:
            admin.dispose()
