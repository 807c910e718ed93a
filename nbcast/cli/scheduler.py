"""The scheduler: ``scheduler run|tick``, ``pause``, ``resume``, ``backfill``."""

from __future__ import annotations

from datetime import date, datetime

import click

from nbcast.cli.app import (
    DAY_OR_INSTANT,
    INSTANT,
    AppContext,
    Seconds,
    configure_logging,
    pass_app,
    supervise,
)
from nbcast.cli.output import emit_json

__all__: list[str] = []


@click.group()
def scheduler() -> None:
    """Run the scheduler, or one pass of it."""


@scheduler.command("run")
@click.option("--name", default=None, help="Replica name (default host:pid).")
@click.option(
    "--max-sleep",
    type=Seconds(0, 3600),
    default=5.0,
    show_default=True,
    help="Longest sleep between passes, in clock seconds.",
)
@click.option(
    "--batch",
    type=click.IntRange(1, 10_000),
    default=200,
    show_default=True,
    help="Definitions claimed per transaction.",
)
@pass_app
def scheduler_run(app: AppContext, name: str | None, max_sleep: float, batch: int) -> None:
    """The long-running scheduler: materialize due slots, sleep, repeat; stops on SIGTERM.
    (SLA checks, audit checkpoints and retention are ``nbcast oversight``'s.)"""
    from nbcast.scheduler.service import SchedulerService, scheduler_lock

    configure_logging()
    with scheduler_lock(app.db):
        service = SchedulerService(
            app.db,
            app.clock,
            name=name,
            batch=batch,
            max_sleep=max_sleep,
        )
        supervise(app, service)


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
        emit_json(
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


@click.command()
@click.argument("name")
@pass_app
def pause(app: AppContext, name: str) -> None:
    """Pause definition NAME: nothing new is recorded until resume."""
    from nbcast.scheduler.control import pause as do_pause

    changed = do_pause(app.db, app.clock, app.caller, name)
    click.echo(f"{name}: paused" if changed else f"{name}: already paused")


@click.command()
@click.argument("name")
@pass_app
def resume(app: AppContext, name: str) -> None:
    """Resume NAME; slots that fell during the pause are recorded SKIPPED (paused)."""
    from nbcast.scheduler.control import resume as do_resume

    result = do_resume(app.db, app.clock, app.caller, name)
    if result is None:
        click.echo(f"{name}: not paused")
    else:
        click.echo(
            f"{name}: resumed; {result.skipped_paused} slots recorded SKIPPED (paused), "
            f"{result.caught_up} due before the pause materialized"
        )


@click.command()
@click.argument("name")
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
@pass_app
def backfill(
    app: AppContext, name: str, range_from: datetime | date, range_to: datetime | date
) -> None:
    """Materialize NAME's slots in [--from, --to) as backfill runs."""
    from nbcast.scheduler.control import backfill as do_backfill

    result = do_backfill(app.db, app.clock, app.caller, name, range_from, range_to)
    click.echo(
        f"{name}: {result.slots} slots in range, {result.inserted} new backfill rows, "
        f"{result.slots - result.inserted} already recorded"
    )


COMMANDS = [scheduler, pause, resume, backfill]
"""The commands this module adds to ``nbcast``."""
