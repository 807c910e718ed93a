"""Alembic environment: runs on the connection :meth:`nbcast.db.Database.upgrade` passes."""

from __future__ import annotations

from alembic import context

from nbcast.db import Base, import_models

import_models()
config = context.config
connection = config.attributes.get("connection")
if connection is None:  # pragma: no cover - nbcast always passes a connection
    raise RuntimeError("run migrations through `nbcast db upgrade`")

context.configure(
    connection=connection,
    target_metadata=Base.metadata,
    render_as_batch=connection.dialect.name == "sqlite",
    compare_type=True,
)
with context.begin_transaction():
    context.run_migrations()
