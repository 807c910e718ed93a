"""``nbcast audit``: verify the hash-chained audit log, checkpoint it, export it.

``verify`` prints how many entries hold and exits 0; a broken chain — or a chain that
no longer holds what a signed checkpoint says it held — prints the first broken entry
(tenant, sequence number, what is wrong) and exits 1: a finding, not a usage error (2).
``checkpoint`` signs the heads now (:mod:`nbcast.tenancy.checkpoints`) and can append
them to a file outside the home; ``public-key`` prints the key that checks them.
"""

from __future__ import annotations

import json
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

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
@click.option(
    "--checkpoints",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Also check against the newest checkpoints in this exported file.",
)
@click.option(
    "--public-key",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="The audit key's public half (PEM) to check checkpoints with (default: the "
    "installation's key).",
)
@pass_app
def audit_verify(
    app: AppContext, every_tenant: bool, checkpoints: Path | None, public_key: Path | None
) -> None:
    """Check that no entry was edited, deleted, inserted or reordered, and that the
    chain still holds what its signed checkpoints say."""
    from nbcast.tenancy.audit_trail import verify_log
    from nbcast.tenancy.checkpoints import load_key, read_export

    key = _public_key(public_key) if public_key is not None else None
    if key is None:
        key = load_key(app.settings.home, create=False)
    exported = read_export(checkpoints) if checkpoints is not None else None
    with app.db.session() as session:
        tenants, checked, broken = verify_log(
            session,
            app.caller,
            app.clock.now(),
            every_tenant=every_tenant,
            key=key,
            exported=exported,
        )
    if broken is not None:
        click.echo(f"audit log BROKEN: {broken} ({checked:,} entries before it hold)")
        sys.exit(1)
    click.echo(f"audit log intact: {checked:,} entries in {tenants} tenant(s)")


def _public_key(path: Path) -> Any:
    from nbcast.errors import ConfigError
    from nbcast.tenancy.checkpoints import AuditKey

    try:
        text = path.read_text(encoding="ascii", errors="strict")[:64_000]
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"--public-key: cannot read {path}: {exc}") from None
    return AuditKey.from_pem(text)


@audit.command("checkpoint")
@click.option(
    "--all-tenants", "every_tenant", is_flag=True, help="Every tenant's chain (operators)."
)
@click.option(
    "--export",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Also append the checkpoints to this file (keep it outside the home).",
)
@pass_app
def audit_checkpoint(app: AppContext, every_tenant: bool, export: Path | None) -> None:
    """Sign the audit heads now (the scheduler does so at least hourly)."""
    from nbcast.tenancy.audit_trail import checkpoint_log
    from nbcast.tenancy.checkpoints import append_export, load_key

    key = load_key(app.settings.home, create=True)
    assert key is not None
    made, refused = checkpoint_log(app.db, app.clock, app.caller, key, every_tenant=every_tenant)
    if export is not None:
        append_export(export, made)
    for checkpoint in made:
        click.echo(
            f"checkpoint: tenant {checkpoint.tenant} at entry {checkpoint.seq:,} "
            f"({checkpoint.head[:12]}…)"
        )
    if not made and not refused:
        click.echo("no new entries since the last checkpoints")
    if refused:
        click.echo(
            "NOT signed, the chain does not hold: " + ", ".join(refused) + " (nbcast audit verify)"
        )
        sys.exit(1)


@audit.command("public-key")
@pass_app
def audit_public_key(app: AppContext) -> None:
    """Print the public half of the audit key (PEM): what checks checkpoints."""
    from nbcast.tenancy.checkpoints import load_key

    key = load_key(app.settings.home, create=True)
    assert key is not None
    click.echo(key.public_pem(), nl=False)


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
    from nbcast.tenancy.audit_trail import export_log

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
