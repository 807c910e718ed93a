"""``nbcast sla``: the slots that missed their definition's SLA
(:mod:`nbcast.oversight.sla`), over :func:`nbcast.oversight.sla_queries.list_misses`
(any member of the tenant may read them)."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import click

from nbcast.cli.app import DAY_OR_INSTANT, AppContext, pass_app
from nbcast.cli.output import emit_json, table

__all__: list[str] = []


def _bound(value: object, *, end: bool = False) -> datetime | None:
    """An instant as given; a bare date as the start of that UTC day (``end``: of the
    next one, so ``--to`` includes its day)."""
    if value is None or isinstance(value, datetime):
        return value
    assert isinstance(value, date)
    start = datetime(value.year, value.month, value.day, tzinfo=UTC)
    return start + timedelta(days=1) if end else start


@click.group()
def sla() -> None:
    """SLA misses: slots not delivered within their definition's sla.delivered_within."""


@sla.command("list")
@click.option("--definition", default=None, help="Only this definition's misses.")
@click.option(
    "--from", "since", type=DAY_OR_INSTANT, default=None, help="Slots firing from (UTC day)."
)
@click.option(
    "--to", "until", type=DAY_OR_INSTANT, default=None, help="Slots firing before (incl. day)."
)
@click.option(
    "--limit",
    type=int,
    default=None,
    help="One page of at most this many (1 to 1,000); the next page's --after goes to stderr.",
)
@click.option("--after", default=None, help="Continue after this cursor (from --limit).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (a list of misses).")
@pass_app
def sla_list(
    app: AppContext,
    definition: str | None,
    since: object,
    until: object,
    limit: int | None,
    after: str | None,
    as_json: bool,
) -> None:
    """Misses, newest slot first: the slot, its deadline, its state and why, the alert."""
    from nbcast.access import MAX_PAGE
    from nbcast.clock import format_instant
    from nbcast.oversight.sla_queries import SlaMissRecord, list_misses

    low, high = _bound(since), _bound(until, end=True)
    if low is not None and high is not None and low >= high:
        raise click.UsageError("--from must be before --to")
    items: list[SlaMissRecord] = []
    cursor = after
    with app.db.session() as session:
        while True:
            page = list_misses(
                session,
                app.caller,
                definition=definition,
                since=low,
                until=high,
                limit=MAX_PAGE if limit is None else limit,
                after=cursor,
            )
            items.extend(page.items)
            cursor = page.next_after
            if limit is not None or cursor is None:
                break
    if as_json:
        emit_json([m.to_json() for m in items])
    else:
        table(
            None,
            ["definition", "slot", "deadline (UTC)", "state", "reason", "alert", "to"],
            [
                (
                    m.definition,
                    m.slot_key,
                    format_instant(m.deadline),
                    m.state,
                    m.reason or "",
                    m.alert.state,
                    m.alert.to or "",
                )
                for m in items
            ],
            wrap=("to",),
        )
    if cursor is not None:
        click.echo(f"more misses follow: --after {cursor}", err=True)


COMMANDS: list[click.Command] = [sla]
"""The commands this module adds to ``nbcast``."""
