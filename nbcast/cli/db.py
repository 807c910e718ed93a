"""``nbcast db``: database maintenance."""

from __future__ import annotations

import click

from nbcast.cli.app import AppContext, pass_app

__all__: list[str] = []


@click.group()
def db() -> None:
    """Database maintenance."""


@db.command("upgrade")
@pass_app
def db_upgrade(app: AppContext) -> None:
    """Apply all migrations (also done automatically on first use).

    On PostgreSQL with NBCAST_DATABASE_OWNER_URL set, they run as that (owner) role,
    and NBCAST_DATABASE_URL's role is granted what the application needs — it owns
    nothing, so it cannot switch the audit log's append-only trigger off."""
    from nbcast.config import prepare_home
    from nbcast.db import Database

    prepare_home(app.settings.home)
    database = Database.open(app.settings.database_url, upgrade=False)
    before = database.current_revision()
    database.upgrade(owner_url=app.settings.database_owner_url)
    after = database.current_revision()
    click.echo(f"database {database.safe_url}: {before or 'empty'} -> {after}")


COMMANDS = [db]
"""The commands this module adds to ``nbcast``."""
