"""Runs: ``run`` (a manual run), ``runs list|show``, ``cancel``."""

from __future__ import annotations

import click

from nbcast.cli.app import AppContext, pass_app
from nbcast.cli.output import emit_json, table
from nbcast.clock import format_instant

__all__: list[str] = []


@click.command("run")
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
        emit_json({"id": run_id, "definition": name, "kind": "manual", "state": "QUEUED"})
    else:
        click.echo(f"queued manual run {run_id} of {name}")


@click.group()
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
    from nbcast.executor.queries import list_runs

    items = list_runs(app.db, app.settings.tenant, definition=definition, state=state, limit=limit)
    if as_json:
        emit_json([r.to_json() for r in items])
        return
    table(
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


@click.command()
@click.argument("run_id", type=int)
@pass_app
def cancel(app: AppContext, run_id: int) -> None:
    """Cancel a queued or running run."""
    from nbcast.executor.control import cancel_run

    click.echo(
        f"run {run_id}: "
        + cancel_run(app.db, app.clock, app.settings.tenant, run_id, by=app.settings.user)
    )


COMMANDS = [run_command, runs, cancel]
"""The commands this module adds to ``nbcast``."""
