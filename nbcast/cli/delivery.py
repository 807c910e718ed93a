"""The delivery plane: ``delivery-worker``, ``deliveries``, ``deliver``, ``unsubscribe``,
``links``."""

from __future__ import annotations

import os
import socket
from typing import Any

import click

from nbcast.cli.app import AppContext, configure_logging, pass_app, supervise
from nbcast.cli.output import emit_json, table, when

__all__: list[str] = []


def _plane(
    app: AppContext, name: str | None = None, *, lease_seconds: float = 120.0, senders: int = 1
) -> tuple[Any, Any]:
    """The ledger and the render queue, configured from the environment."""
    from nbcast.artifacts import LocalArtifactStore
    from nbcast.delivery.ledger import Ledger
    from nbcast.delivery.rendering import RenderQueue
    from nbcast.delivery.settings import build_channels, load_delivery_settings
    from nbcast.delivery.signing import load_signer

    settings = load_delivery_settings()
    store = LocalArtifactStore(app.settings.artifacts_dir)
    owner = name or f"delivery-{socket.gethostname()}:{os.getpid()}"
    ledger = Ledger(
        app.db,
        app.clock,
        store,
        build_channels(settings),
        load_signer(app.settings.home),
        owner=owner,
        base_url=settings.base_url,
        link_ttl=settings.link_ttl,
        lease_seconds=lease_seconds,
        senders=senders,
        make_channels=lambda: build_channels(settings),
    )
    return ledger, RenderQueue(app.db, app.clock, store, owner=owner)


@click.command("delivery-worker")
@click.option("--name", default=None, help="Worker name (default delivery-host:pid).")
@click.option(
    "--exit-when-idle",
    is_flag=True,
    help="Exit once nothing is left to consume, render or send (retries included).",
)
@click.option("--poll", type=float, default=1.0, show_default=True, help="Seconds between passes.")
@click.option(
    "--lease-seconds",
    type=float,
    default=120.0,
    show_default=True,
    help="How long a send may take before another worker treats its outcome as unknown.",
)
@click.option(
    "--senders",
    type=click.IntRange(1, 64),
    default=4,
    show_default=True,
    help="Messages sent at once, each sender with its own connections (SMTP session).",
)
@pass_app
def delivery_worker(
    app: AppContext,
    name: str | None,
    exit_when_idle: bool,
    poll: float,
    lease_seconds: float,
    senders: int,
) -> None:
    """Render succeeded runs and deliver them to their subscribers; stop with SIGTERM."""
    from nbcast.delivery.worker import DeliveryWorker

    configure_logging()
    ledger, renders = _plane(app, name, lease_seconds=lease_seconds, senders=senders)
    service = DeliveryWorker(app.db, app.clock, ledger, renders, poll_interval=poll)
    service.exit_when_idle = exit_when_idle

    try:
        supervise(app, service)
    finally:
        ledger.close()
    s = ledger.stats
    click.echo(
        f"delivery worker done: {s.sent} sent, {s.found} found already delivered, "
        f"{s.retried} retries, {s.failed} failed, {s.suppressed} suppressed, "
        f"{s.duplicates} possible duplicates"
    )


@click.group()
def deliveries() -> None:
    """The delivery ledger."""


@deliveries.command("list")
@click.option("--run", "run_id", type=int, default=None, help="Only this run's deliveries.")
@click.option("--state", default=None, help="Only deliveries in this state.")
@click.option("--limit", type=int, default=100, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_app
def deliveries_list(
    app: AppContext, run_id: int | None, state: str | None, limit: int, as_json: bool
) -> None:
    """Ledger rows, newest first: who got which run, how, and what the channel said."""
    import sqlalchemy as sa

    from nbcast.definitions.models import ReportDefinition
    from nbcast.delivery.models import Delivery
    from nbcast.governance.models import Tenant

    query = (
        sa.select(Delivery, ReportDefinition.name)
        .join(ReportDefinition, ReportDefinition.id == Delivery.definition_id)
        .join(Tenant, Tenant.id == Delivery.tenant_id)
        .where(Tenant.name == app.settings.tenant)
        .order_by(Delivery.id.desc())
        .limit(limit)
    )
    if run_id is not None:
        query = query.where(Delivery.run_id == run_id)
    if state is not None:
        query = query.where(Delivery.state == state.upper())
    with app.db.session() as session:
        rows = session.execute(query).all()
    items: list[dict[str, Any]] = [
        {
            "id": d.id,
            "run": d.run_id,
            "report": name,
            "channel": d.channel,
            "recipient": d.recipient,
            "formats": d.formats,
            "state": d.state,
            "reason": d.reason,
            "attempts": d.attempt,
            "possible_duplicate": d.possible_duplicate,
            "sent_at": d.sent_at,
            "receipt": d.receipt,
            "error": d.error,
        }
        for d, name in rows
    ]
    if as_json:
        emit_json(items)
        return
    table(
        "deliveries",
        ["id", "run", "report", "channel", "recipient", "state", "reason", "tries", "sent"],
        [
            [
                i["id"],
                i["run"],
                i["report"],
                i["channel"],
                i["recipient"],
                i["state"] + (" (dup?)" if i["possible_duplicate"] else ""),
                i["reason"],
                i["attempts"],
                when(i["sent_at"]),
            ]
            for i in items
        ],
    )


@click.command()
@click.option(
    "--retry-failed",
    "run_id",
    type=int,
    required=True,
    help="Send this run's FAILED deliveries again (SENT ones are never re-sent).",
)
@pass_app
def deliver(app: AppContext, run_id: int) -> None:
    """Ask for deliveries to be sent again."""
    from nbcast.delivery.ledger import retry_failed
    from nbcast.governance.tenants import get_tenant

    with app.db.session() as session:
        tenant = get_tenant(session, app.settings.tenant)
        count = retry_failed(session, run_id, app.clock.now(), tenant_id=tenant.id)
    click.echo(f"run {run_id}: {count} failed deliveries queued again")


@click.command()
@click.option("--report", default="*", show_default=True, help="Report name, or * for all.")
@click.option(
    "--channel", type=click.Choice(["email", "slack", "webhook", "link"]), default="email"
)
@click.option("--to", "recipient", default=None, help="The recipient to stop sending to.")
@click.option("--token", default=None, help="A one-click unsubscribe token instead.")
@pass_app
def unsubscribe(
    app: AppContext, report: str, channel: str, recipient: str | None, token: str | None
) -> None:
    """Stop delivering a report (or every report) to a recipient."""
    from nbcast.delivery.signing import load_signer
    from nbcast.delivery.unsubscribe import record_unsubscribe, use_token
    from nbcast.errors import ConfigError
    from nbcast.governance.tenants import get_tenant

    now = app.clock.now()
    with app.db.session() as session:
        if token:
            tenant = get_tenant(session, app.settings.tenant)
            named = use_token(
                session,
                load_signer(app.settings.home),
                token,
                now,
                source="cli",
                tenant_id=tenant.id,
            )
            click.echo(
                f"unsubscribed {named['recipient']} from {named['scope']} ({named['channel']})"
            )
            return
        if not recipient:
            raise ConfigError("give --to RECIPIENT or --token TOKEN")
        if len(recipient) > 512 or "\x00" in recipient or len(report) > 128 or "\x00" in report:
            raise ConfigError("--to is at most 512 characters and --report 128, without NUL")
        tenant = get_tenant(session, app.settings.tenant)
        record_unsubscribe(
            session,
            tenant_id=tenant.id,
            scope=report,
            channel=channel,
            recipient=recipient,
            source="cli",
            now=now,
        )
    click.echo(f"unsubscribed {recipient} from {report} ({channel})")


@click.group()
def links() -> None:
    """Signed links to rendered reports."""


@links.command("list")
@click.option("--run", "run_id", type=int, default=None)
@click.option("--json", "as_json", is_flag=True)
@pass_app
def links_list(app: AppContext, run_id: int | None, as_json: bool) -> None:
    """Links handed out, with their expiry and whether they were revoked."""
    import sqlalchemy as sa

    from nbcast.delivery.models import SignedLink
    from nbcast.governance.models import Tenant

    query = (
        sa.select(SignedLink)
        .join(Tenant, Tenant.id == SignedLink.tenant_id)
        .where(Tenant.name == app.settings.tenant)
        .order_by(SignedLink.id.desc())
        .limit(200)
    )
    if run_id is not None:
        query = query.where(SignedLink.run_id == run_id)
    with app.db.session() as session:
        rows = list(session.scalars(query))
    items: list[dict[str, Any]] = [
        {
            "id": r.id,
            "run": r.run_id,
            "recipient": r.recipient,
            "file": r.filename,
            "expires_at": r.expires_at,
            "revoked_at": r.revoked_at,
        }
        for r in rows
    ]
    if as_json:
        emit_json(items)
        return
    table(
        "links",
        ["id", "run", "recipient", "file", "expires", "revoked"],
        [
            [
                i["id"],
                i["run"],
                i["recipient"],
                i["file"],
                when(i["expires_at"]),
                when(i["revoked_at"]),
            ]
            for i in items
        ],
    )


@links.command("revoke")
@click.argument("link_id", type=int)
@pass_app
def links_revoke(app: AppContext, link_id: int) -> None:
    """Revoke a signed link: it stops opening at once."""
    from nbcast.delivery.links import revoke_link
    from nbcast.governance.tenants import get_tenant

    with app.db.session() as session:
        tenant = get_tenant(session, app.settings.tenant)
        done = revoke_link(session, link_id, app.clock.now(), tenant_id=tenant.id)
    click.echo(f"link {link_id}: " + ("revoked" if done else "no such link, or already revoked"))


COMMANDS = [delivery_worker, deliveries, deliver, unsubscribe, links]
"""The commands this module adds to ``nbcast``."""
