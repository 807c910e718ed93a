"""``nbcast warehouse``: set up recipient-scoped data on a PostgreSQL warehouse
(:mod:`nbcast.warehouse.rls`).

``protect TABLE COLUMN [--attribute A]`` turns on row-level security for a table so
that recipient-scoped runs see only the rows whose COLUMN equals their row filter's
attribute A (default: COLUMN); ``drop-roles`` retires every row filter's login role.
Both act on the warehouse with the admin URL in ``$NBCAST_WAREHOUSE_ADMIN_URL`` (never
an argument: a command line is visible to every local user), not on nbcast's database.
"""

from __future__ import annotations

import click

from nbcast.cli.output import emit_json
from nbcast.credentials import credential
from nbcast.errors import ConfigError

__all__: list[str] = []

ADMIN_URL_VARIABLE = "NBCAST_WAREHOUSE_ADMIN_URL"


def _admin_url() -> str:
    url = (credential(ADMIN_URL_VARIABLE) or "").strip()
    if not url:
        raise ConfigError(
            f"set ${ADMIN_URL_VARIABLE} to the warehouse's admin URL (a role that owns the "
            "tables and may create roles)"
        )
    return url


@click.group("warehouse")
def warehouse_group() -> None:
    """Recipient-scoped data on a PostgreSQL warehouse (row-level security)."""


@warehouse_group.command("protect")
@click.argument("table")
@click.argument("column")
@click.option("--attribute", default=None, help="The row filter's attribute (default: COLUMN).")
@click.option(
    "--reader-role",
    default=None,
    help="The role scoped runs read as members of (default: nbcast_reader).",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def protect_command(
    table: str, column: str, attribute: str | None, reader_role: str | None, as_json: bool
) -> None:
    """Filter TABLE ([schema.]name) on COLUMN for recipient-scoped runs."""
    from nbcast.warehouse.rls import DEFAULT_READER_ROLE, protect_table

    done = protect_table(
        _admin_url(), table, column, attribute, reader_role=reader_role or DEFAULT_READER_ROLE
    )
    if as_json:
        emit_json(
            {
                "table": done.table,
                "column": done.column,
                "attribute": done.attribute,
                "policy": done.policy,
                "unscoped_policy_added": done.unscoped_policy_added,
            }
        )
        return
    click.echo(
        f"{done.table}: scoped runs see the rows whose {done.column} is their "
        f"{done.attribute!r} (policy {done.policy})"
    )
    if done.unscoped_policy_added:
        click.echo("  other sessions see every row, as before (policy nbcast_unscoped)")


@warehouse_group.command("drop-roles")
def drop_roles_command() -> None:
    """Drop every row filter's login role (later scoped runs make theirs again)."""
    from nbcast.warehouse.rls import drop_scoped_roles

    click.echo(f"dropped {drop_scoped_roles(_admin_url())} row filter role(s)")


COMMANDS: list[click.Command] = [warehouse_group]
"""The commands this module adds to ``nbcast``."""
