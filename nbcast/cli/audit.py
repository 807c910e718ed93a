"""``nbcast audit``: verify the hash-chained audit log, export it as JSON lines.

``verify`` prints how many entries hold and exits 0; a broken chain prints the first
broken entry (tenant, sequence number, what is wrong) and exits 1 — a finding, not a
usage error (2).
"""

from __future__ import annotations

import json
import sys
from datetime import datetime
from pathlib import Path

import click

from nbcast.cli.app import DAY_OR_INSTANT, AppContext, pass_app

__all__: list[str] = []


@click.group()
def audit() -> None:
    """The tenant's audit log (admins)."""


@audit.command("verify")
@click.option(
    "--all-tenants", "every_tenant", is_flag=True, help="Every tenant's chain (operators)."
)
@pass_app
def audit_verify(app: AppContext, every_tenant: bool) -> None:
    """Check that no entry was edited, deleted, inserted or reordered."""
    from nbcast.governance.audit_trail import verify_log

    with app.db.session() as session:
        tenants, checked, broken = verify_log(
            session, app.caller, app.clock.now(), every_tenant=every_tenant
        )
    if broken is not None:
        click.echo(f"audit log BROKEN: {broken} ({checked:,} entries before it hold)")
        sys.exit(1)
    click.echo(f"audit log intact: {checked:,} entries in {tenants} tenant(s)")


def _bound(value: object, zone_end: bool = False) -> datetime | None:
    from datetime import UTC, date, timedelta

    if value is None:
        return None
    if isinstance(value, datetime):
        return value
    assert isinstance(value, date)
    start = datetime(value.year, value.month, value.day, tzinfo=UTC)
    return start + timedelta(days=1) if zone_end else start


@audit.command("export")
@click.option("--from", "since", type=DAY_OR_INSTANT, default=None, help="From (incl.; UTC day).")
@click.option("--to", "until", type=DAY_OR_INSTANT, default=None, help="To (incl. that UTC day).")
@click.option(
    "-o", "--output", type=click.Path(dir_okay=False, path_type=Path), help="File (default: -)."
)
@pass_app
def audit_export(app: AppContext, since: object, until: object, output: Path | None) -> None:
    """Write the tenant's entries as JSON lines (one object per entry, in order)."""
    from nbcast.governance.audit_trail import export_log

    low, high = _bound(since), _bound(until, zone_end=True)
    if low is not None and high is not None and low >= high:
        raise click.UsageError("--from must be before --to")
    count = 0
    with app.db.session() as session:
        # The role is checked here, before the file exists: a refusal creates nothing.
        found = export_log(session, app.caller, app.clock.now(), since=low, until=high)
        handle = output.open("x", encoding="utf-8") if output is not None else sys.stdout
        try:
            for entry in found:
                handle.write(json.dumps(entry.to_json(), ensure_ascii=False) + "\n")
                count += 1
        finally:
            if output is not None:
                handle.close()
    if output is not None:
        click.echo(f"wrote {count:,} entries to {output}")


COMMANDS = [audit]
"""The commands this module adds to ``nbcast``."""
