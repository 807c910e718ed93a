"""The scheduler's commands: ``schedule preview``, ``scheduler run|tick``, ``pause``,
``resume``, ``backfill``, ``run`` and ``runs list``. Registered on :data:`nbcast.cli.cli`."""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

import click

from nbcast.cli import AppContext, _emit_json, _table, cli, pass_app
from nbcast.clock import format_instant
from nbcast.errors import ConfigError

__all__: list[str] = []


class InstantType(click.ParamType):  # type: ignore[type-arg]
    """An ISO 8601 instant with an offset or ``Z``; a bad one exits with status 2."""

    name = "INSTANT"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> datetime:
        if isinstance(value, datetime):
            return value
        from nbcast.clock import parse_instant

        try:
            return parse_instant(str(value))
        except ConfigError as exc:
            self.fail(str(exc), param, ctx)


INSTANT = InstantType()


# -- schedule preview ----------------------------------------------------------------


@cli.group()
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
@click.option("--from", "range_from", type=INSTANT, required=True, help="Range start (incl.).")
@click.option("--to", "range_to", type=INSTANT, required=True, help="Range end (excl.).")
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
@click.option("--json", "as_json", is_flag=True, help="Print one JSON array.")
def schedule_preview(
    cron: str | None,
    every: str | None,
    start: datetime | None,
    zone: str,
    range_from: datetime,
    range_to: datetime,
    dst_gap: str,
    dst_fold: str,
    as_json: bool,
) -> None:
    """List every slot whose fire instant lies in [--from, --to), in fire order."""
    from nbcast.scheduler.preview import preview, render_table

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
        _emit_json(rows)
        return
    from rich.console import Console

    Console(highlight=False).print(render_table(rows))


# -- the scheduler service -------------------------------------------------------------


@cli.group()
def scheduler() -> None:
    """Run the scheduler, or one pass of it."""


@scheduler.command("run")
@click.option("--name", default=None, help="Replica name (default host:pid).")
@click.option(
    "--max-sleep",
    type=float,
    default=5.0,
    show_default=True,
    help="Longest sleep between passes, in clock seconds.",
)
@click.option(
    "--batch", type=int, default=200, show_default=True, help="Definitions claimed per transaction."
)
@pass_app
def scheduler_run(app: AppContext, name: str | None, max_sleep: float, batch: int) -> None:
    """The long-running scheduler: materialize due slots, sleep, repeat; stops on SIGTERM."""
    from nbcast.scheduler.service import SchedulerService, scheduler_lock

    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    with scheduler_lock(app.db):
        service = SchedulerService(app.db, app.clock, name=name, batch=batch, max_sleep=max_sleep)
        service.install_signal_handlers()
        service.run()


@scheduler.command("tick")
@click.option("--now", type=INSTANT, default=None, help="Materialize as of this instant.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_app
def scheduler_tick(app: AppContext, now: datetime | None, as_json: bool) -> None:
    """Materialize everything due as of --now (default: the clock) and exit."""
    from nbcast.scheduler.materializer import Materializer
    from nbcast.scheduler.service import scheduler_lock

    with scheduler_lock(app.db):
        result = Materializer(app.db, app.clock, name="tick").tick(now)
    if as_json:
        _emit_json(
            {
                "definitions": result.definitions,
                "slots": result.slots,
                "inserted": result.inserted,
                "by_state": result.by_state,
            }
        )
        return
    states = ", ".join(f"{n} {s}" for s, n in sorted(result.by_state.items())) or "nothing due"
    click.echo(f"materialized {result.slots} slots of {result.definitions} definitions: {states}")


# -- control ---------------------------------------------------------------------------


@cli.command()
@click.argument("name")
@pass_app
def pause(app: AppContext, name: str) -> None:
    """Pause definition NAME: nothing new is recorded until resume."""
    from nbcast.scheduler.control import pause as do_pause

    changed = do_pause(app.db, app.clock, app.settings.tenant, name, by=app.settings.user)
    click.echo(f"{name}: paused" if changed else f"{name}: already paused")


@cli.command()
@click.argument("name")
@pass_app
def resume(app: AppContext, name: str) -> None:
    """Resume NAME; slots that fell during the pause are recorded SKIPPED (paused)."""
    from nbcast.scheduler.control import resume as do_resume

    result = do_resume(app.db, app.clock, app.settings.tenant, name, by=app.settings.user)
    if result is None:
        click.echo(f"{name}: not paused")
    else:
        click.echo(
            f"{name}: resumed; {result.skipped_paused} slots recorded SKIPPED (paused), "
            f"{result.caught_up} due before the pause materialized"
        )


@cli.command()
@click.argument("name")
@click.option("--from", "range_from", type=INSTANT, required=True, help="Range start (incl.).")
@click.option("--to", "range_to", type=INSTANT, required=True, help="Range end (excl.).")
@pass_app
def backfill(app: AppContext, name: str, range_from: datetime, range_to: datetime) -> None:
    """Materialize NAME's slots in [--from, --to) as backfill runs."""
    from nbcast.scheduler.control import backfill as do_backfill

    result = do_backfill(
        app.db, app.clock, app.settings.tenant, name, range_from, range_to, by=app.settings.user
    )
    click.echo(
        f"{name}: {result.slots} slots in range, {result.inserted} new backfill rows, "
        f"{result.slots - result.inserted} already recorded"
    )


@cli.command("run")
@click.argument("name")
@click.option(
    "-p",
    "--parameter",
    "parameters",
    multiple=True,
    metavar="KEY=VALUE",
    help="A parameter value (JSON, or a plain string).",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_app
def run_command(app: AppContext, name: str, parameters: tuple[str, ...], as_json: bool) -> None:
    """Queue a manual run of NAME's latest version."""
    from nbcast.definitions.parameters import parse_assignments
    from nbcast.scheduler.control import run_now

    values = parse_assignments(parameters)
    run_id = run_now(app.db, app.clock, app.settings.tenant, name, values)
    if as_json:
        _emit_json({"id": run_id, "definition": name, "kind": "manual", "state": "QUEUED"})
    else:
        click.echo(f"queued manual run {run_id} of {name}")


@cli.group()
def runs() -> None:
    """Inspect runs."""


@runs.command("list")
@click.option("--definition", default=None, help="Only this definition.")
@click.option("--state", default=None, help="Only this state (QUEUED, SKIPPED, MISSED, …).")
@click.option("--limit", type=int, default=None, help="At most this many rows.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_app
def runs_list(
    app: AppContext, definition: str | None, state: str | None, limit: int | None, as_json: bool
) -> None:
    """List runs, oldest fire time first."""
    from nbcast.scheduler.control import list_runs

    items = list_runs(app.db, app.settings.tenant, definition=definition, state=state, limit=limit)
    if as_json:
        _emit_json([r.to_json() for r in items])
        return
    _table(
        None,
        ["id", "definition", "slot", "kind", "state", "reason", "fire at (UTC)", "v"],
        [
            (
                r.id,
                r.definition,
                r.slot_key or "-",
                r.kind,
                r.state,
                r.reason or "",
                format_instant(r.fire_at),
                r.version,
            )
            for r in items
        ],
    )
