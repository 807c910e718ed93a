"""``nbcast schedule preview``: what a schedule will do, without touching any definition."""

from __future__ import annotations

from datetime import date, datetime
from typing import Any

import click

from nbcast.cli.app import DAY_OR_INSTANT, INSTANT, AppContext
from nbcast.cli.output import console, emit_json

__all__: list[str] = []


@click.group()
def schedule() -> None:
    """Work with schedules without touching any definition."""


@schedule.command("preview")
@click.option("--cron", help="A five-field cron expression (cronie syntax).")
@click.option("--every", help="An interval such as 15m or 1h30m (instead of --cron).")
@click.option(
    "--start",
    type=INSTANT,
    default=None,
    help="Anchor instant of an --every schedule (default: the Unix epoch).",
)
@click.option("--tz", "zone", default="UTC", show_default=True, help="IANA time zone.")
@click.option(
    "--from",
    "range_from",
    type=DAY_OR_INSTANT,
    required=True,
    help="Range start (incl.; a date: its start in the schedule's zone).",
)
@click.option(
    "--to",
    "range_to",
    type=DAY_OR_INSTANT,
    required=True,
    help="Range end (excl.; a date: its start in the schedule's zone).",
)
@click.option(
    "--dst-gap",
    type=click.Choice(["auto", "shift", "skip"]),
    default="auto",
    show_default=True,
    help="What a slot in a DST gap does.",
)
@click.option(
    "--dst-fold",
    type=click.Choice(["auto", "first", "last", "both"]),
    default="auto",
    show_default=True,
    help="Which pass of a repeated time fires.",
)
@click.option(
    "--definition",
    default=None,
    help="Preview this published definition's schedule and policies, with each slot's "
    "parameter values (instead of --cron/--every).",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON array.")
@click.pass_context
def schedule_preview(
    ctx: click.Context,
    definition: str | None,
    cron: str | None,
    every: str | None,
    start: datetime | None,
    zone: str,
    range_from: datetime | date,
    range_to: datetime | date,
    dst_gap: str,
    dst_fold: str,
    as_json: bool,
) -> None:
    """List every slot whose fire instant lies in [--from, --to), in fire order."""
    from nbcast.scheduler.preview import preview, preview_definition, render_table

    if definition is not None:
        if cron is not None or every is not None or start is not None:
            raise click.UsageError("--definition previews a definition: no --cron/--every/--start")
        from nbcast.definitions.parameters import schema_to_json
        from nbcast.definitions.queries import definition_row, get_version

        app = ctx.find_object(AppContext)
        assert app is not None
        with app.db.session() as session:
            info = get_version(session, app.caller, definition)
            definition_row(session, app.caller, definition)
        rows: list[Any] = preview_definition(
            info.block,
            schema_to_json(info.schema),
            range_from=range_from,
            range_to=range_to,
        )
        if as_json:
            emit_json(rows)
        else:
            console().print(render_table(rows, title=f"{definition} v{info.version}"))
        return

    rows = preview(
        cron=cron,
        every=every,
        start=start,
        tz=zone,
        dst_gap=dst_gap,
        dst_fold=dst_fold,
        range_from=range_from,
        range_to=range_to,
    )
    if as_json:
        emit_json(rows)
        return
    console().print(render_table(rows))


COMMANDS = [schedule]
"""The commands this module adds to ``nbcast``."""
