"""The delivery plane: ``delivery-worker``, ``deliveries``, ``deliver``, ``unsubscribe``,
``links`` — over :mod:`nbcast.delivery.queries` and :mod:`nbcast.delivery.commands`
(no SQL here: every read and change is scoped to the caller's tenant there)."""

from __future__ import annotations

import os
import socket
from typing import Any

import click

from nbcast.cli.app import AppContext, Seconds, configure_logging, pass_app, supervise
from nbcast.cli.output import emit_json, table, when

__all__: list[str] = []


def _plane(
    app: AppContext, name: str | None = None, *, lease_seconds: float = 120.0, senders: int = 1
) -> tuple[Any, Any]:
    """The ledger and the render queue, configured from the environment."""
    from nbcast.artifacts import open_store
    from nbcast.delivery.channels import build_channels
    from nbcast.delivery.ledger import Ledger
    from nbcast.delivery.rendering import RenderQueue
    from nbcast.delivery.settings import load_delivery_settings
    from nbcast.delivery.signing import load_signer

    settings = load_delivery_settings()
    store = open_store(app.settings.artifacts_location)
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
@click.option(
    "--poll",
    type=Seconds(0.01, 3600),
    default=1.0,
    show_default=True,
    help="Seconds between passes.",
)
@click.option(
    "--lease-seconds",
    type=Seconds(1, 86_400),
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
@click.option("--state", default=None, help="Only deliveries in this state (e.g. FAILED).")
@click.option("--channel", default=None, help="Only deliveries on this channel.")
@click.option("--report", "definition", default=None, help="Only this report's deliveries.")
@click.option("--limit", type=int, default=100, show_default=True, help="At most 1,000.")
@click.option("--after", default=None, help="The cursor a previous page ended with.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_app
def deliveries_list(
    app: AppContext,
    run_id: int | None,
    state: str | None,
    channel: str | None,
    definition: str | None,
    limit: int,
    after: str | None,
    as_json: bool,
) -> None:
    """Ledger rows, newest first: who got which run, how, and what the channel said."""
    from nbcast.delivery.queries import list_deliveries

    with app.db.session() as session:
        page = list_deliveries(
            session,
            app.caller,
            run_id=run_id,
            state=state,
            channel=channel,
            definition=definition,
            limit=limit,
            after=after,
        )
    if as_json:
        emit_json([record.to_json() for record in page.items])
        return
    table(
        "deliveries",
        ["id", "run", "report", "channel", "recipient", "state", "reason", "tries", "sent"],
        [
            [
                d.id,
                d.run_id,
                d.report,
                d.channel,
                d.recipient,
                d.state.value + (" (dup?)" if d.possible_duplicate else ""),
                None if d.reason is None else d.reason.value,
                d.attempts,
                when(d.sent_at),
            ]
            for d in page.items
        ],
    )
    _more(page.next_after)


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
    from nbcast.delivery.commands import retry_failed_deliveries

    count = retry_failed_deliveries(app.db, app.clock, app.caller, run_id)
    click.echo(f"run {run_id}: {count} failed deliveries queued again")


@click.command()
@click.option("--report", default="*", show_default=True, help="Report name, or * for all.")
@click.option(
    "--channel",
    default="email",
    show_default=True,
    help="A channel name: email, slack, link, webhook, or a plug-in's.",
)
@click.option("--to", "recipient", default=None, help="The recipient to stop sending to.")
@click.option("--token", default=None, help="A one-click unsubscribe token instead.")
@pass_app
def unsubscribe(
    app: AppContext, report: str, channel: str, recipient: str | None, token: str | None
) -> None:
    """Stop delivering a report (or every report) to a recipient."""
    from nbcast.delivery.commands import unsubscribe_recipient, unsubscribe_with_token
    from nbcast.delivery.signing import load_signer
    from nbcast.errors import ConfigError

    if token:
        done = unsubscribe_with_token(
            app.db,
            app.clock,
            app.caller,
            token,
            source="cli",
            signer=load_signer(app.settings.home),
        )
        click.echo(f"unsubscribed {done.recipient} from {done.scope} ({done.channel})")
        return
    if not recipient:
        raise ConfigError("give --to RECIPIENT or --token TOKEN")
    unsubscribe_recipient(
        app.db, app.clock, app.caller, report=report, channel=channel, recipient=recipient
    )
    click.echo(f"unsubscribed {recipient} from {report} ({channel})")


@click.group()
def links() -> None:
    """Signed links to rendered reports."""


@links.command("list")
@click.option("--run", "run_id", type=int, default=None, help="Only this run's links.")
@click.option("--limit", type=int, default=200, show_default=True, help="At most 1,000.")
@click.option("--after", default=None, help="The cursor a previous page ended with.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_app
def links_list(
    app: AppContext, run_id: int | None, limit: int, after: str | None, as_json: bool
) -> None:
    """Links handed out, newest first, with their expiry, whether they were revoked,
    and how many times they were opened."""
    from nbcast.delivery.queries import list_links

    with app.db.session() as session:
        page = list_links(session, app.caller, run_id=run_id, limit=limit, after=after)
    if as_json:
        emit_json([record.to_json() for record in page.items])
        return
    table(
        "links",
        ["id", "run", "recipient", "file", "expires", "revoked", "opens"],
        [
            [
                r.id,
                r.run_id,
                r.recipient,
                r.filename,
                when(r.expires_at),
                when(r.revoked_at),
                r.opens,
            ]
            for r in page.items
        ],
    )
    _more(page.next_after)


@links.command("revoke")
@click.argument("link_id", type=int)
@pass_app
def links_revoke(app: AppContext, link_id: int) -> None:
    """Revoke a signed link: it stops opening at once. A link that cannot be revoked
    (none of that id in the tenant, or revoked already) is an error: exit status 2."""
    from nbcast.delivery.commands import revoke_link
    from nbcast.errors import LinkError
    from nbcast.limits import clip

    if not revoke_link(app.db, app.clock, app.caller, link_id):
        raise LinkError(
            f"link {clip(link_id)}: no such link in tenant {app.caller.tenant}, "
            "or it is revoked already"
        )
    click.echo(f"link {link_id}: revoked")


def _more(cursor: str | None) -> None:
    """Say how to get the next page, when there is one."""
    if cursor is not None:
        click.echo(f"more: --after {cursor}")


COMMANDS = [delivery_worker, deliveries, deliver, unsubscribe, links]
"""The commands this module adds to ``nbcast``."""
