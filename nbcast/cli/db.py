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
    """Apply all migrations (also done automatically on first use)."""
    from nbcast.config import prepare_home
    from nbcast.db import Database

    prepare_home(app.settings.home)
    database = Database.open(app.settings.database_url, upgrade=False)
    before = database.current_revision()
    database.upgrade()
    after = database.current_revision()
    click.echo(f"database {database.safe_url}: {before or 'empty'} -> {after}")


COMMANDS = [db]
"""The commands this module adds to ``nbcast``."""
