"""``nbcast schedule preview``: what a schedule will do, without touching any definition."""

from __future__ import annotations

from datetime import date, datetime
from typing import Any

import click

from nbcast.cli.app import DAY_OR_INSTANT, INSTANT, AppContext
from nbcast.cli.output import emit_json, table

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
    from nbcast.scheduler.preview import preview, preview_definition

    if definition is not None:
        given = [
            f"--{name.replace('_', '-')}"
            for name in ("cron", "every", "start", "zone", "dst_gap", "dst_fold")
            if ctx.get_parameter_source(name) is click.core.ParameterSource.COMMANDLINE
        ]
        if given:  # the definition's own schedule and policies are what is previewed
            raise click.UsageError(
                "--definition previews the definition's own schedule: "
                + ", ".join(g.replace("--zone", "--tz") for g in given)
                + " cannot be given with it"
            )
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
            _print_preview(rows, title=f"{definition} v{info.version}")
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
    _print_preview(rows)


def _print_preview(rows: list[Any], title: str | None = None) -> None:
    """Preview rows as a table (skipped slots dimmed; parameters fold)."""
    from nbcast.scheduler.preview import table_cells

    columns, cells = table_cells(rows)
    table(
        title,
        columns,
        cells,
        wrap=["parameters"],
        dim=[row["status"] == "skipped" for row in rows],
    )


COMMANDS = [schedule]
"""The commands this module adds to ``nbcast``."""
