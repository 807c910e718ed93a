"""Alembic migrations of nbcast's schema (applied by ``nbcast db upgrade``)."""
