"""Runs: ``run`` (a manual run), ``runs list|show``, ``cancel``.

Every command calls the execution plane's queries (:mod:`nbcast.executor.queries`)
and commands (:mod:`nbcast.executor.control`); none holds SQL of its own.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo

import click

from nbcast.cli.app import INSTANT, AppContext, pass_app
from nbcast.cli.output import emit_json, table, when
from nbcast.clock import format_instant
from nbcast.scheduler.models import RunState

if TYPE_CHECKING:
    from nbcast.executor.records import RunRecord
    from nbcast.views.runs import RunDetail

__all__: list[str] = []


@click.command("run")
@click.argument("name")
@click.option(
    "-p",
    "--parameter",
    "parameters",
    multiple=True,
    metavar="KEY=VALUE",
    help='A parameter value: JSON (a slot binding too, {"$period": …}), or a plain string.',
)
@click.option(
    "--at",
    type=INSTANT,
    default=None,
    help="The instant the run is for (default: now): its period is the slot interval "
    "that holds it. With --test: dry-run the slot firing then (or the first after).",
)
@click.option(
    "--test",
    is_flag=True,
    help="A test run: rendered, but sent to no subscriber (only to --to, by default "
    "your own address when you have one); marked TEST, counted for nothing.",
)
@click.option(
    "--to",
    "to",
    multiple=True,
    metavar="ADDRESS",
    help="With --test: email the test run here instead (repeat for more; at most 10).",
)
@click.option(
    "--nobody",
    is_flag=True,
    help="With --test: send it to no one (only render it; the files are in `runs show`).",
)
@click.option(
    "--slot",
    default=None,
    metavar="KEY",
    help="With --test: dry-run this slot (2026-12-07T07:00): its version, bound "
    "parameters, audiences and row filters, exactly as the scheduler will run it.",
)
@click.option(
    "--as",
    "recipient",
    default=None,
    metavar="RECIPIENT",
    help="With --test: only the audience of this recipient's subscriptions.",
)
@click.option(
    "--version",
    "version",
    type=click.IntRange(1, 2**31 - 1),
    default=None,
    help="With --test: try this version instead of the latest.",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_app
def run_command(
    app: AppContext,
    name: str,
    parameters: tuple[str, ...],
    at: datetime | None,
    test: bool,
    to: tuple[str, ...],
    nobody: bool,
    slot: str | None,
    recipient: str | None,
    version: int | None,
    as_json: bool,
) -> None:
    """Queue a manual run of NAME's latest version (one per audience: recipients with
    their own parameters or row filter get their own run); with --test, a test run
    that no subscriber receives, or a dry run of one slot."""
    from nbcast.definitions.parameters import parse_assignments
    from nbcast.errors import ConfigError
    from nbcast.scheduler.control import run_now_all

    values = parse_assignments(parameters)
    if test:
        if nobody and to:
            raise ConfigError("--nobody and --to contradict each other")
        addresses = () if nobody else to or None
        _test_run(app, name, values, at, addresses, slot, recipient, version, as_json)
        return
    if to or nobody or slot or recipient or version:
        raise ConfigError("--to, --nobody, --slot, --as and --version go with --test")
    ids = run_now_all(app.db, app.clock, app.caller, name, values, at=at)
    if as_json:
        emit_json(
            {
                "id": ids[0],
                "ids": ids,
                "definition": name,
                "kind": "manual",
                "state": RunState.QUEUED,
            }
        )
    elif len(ids) == 1:
        click.echo(f"queued manual run {ids[0]} of {name}")
    else:
        listed = ", ".join(str(i) for i in ids)
        click.echo(f"queued manual runs {listed} of {name}, one per audience")


def _test_run(
    app: AppContext,
    name: str,
    values: dict[str, Any],
    at: datetime | None,
    to: tuple[str, ...] | None,
    slot: str | None,
    recipient: str | None,
    version: int | None,
    as_json: bool,
) -> None:
    from nbcast.scheduler.trial import queue_test_run

    runs = queue_test_run(
        app.db,
        app.clock,
        app.caller,
        name,
        values,
        to=to,
        slot=slot,
        at=at,
        recipient=recipient,
        version=version,
    )
    if as_json:
        emit_json({"id": runs[0].id, "runs": [r.to_json() for r in runs]})
        return
    first = runs[0]
    what = f"a dry run of slot {first.slot_key}" if first.slot_key else "a test run"
    ids = ", ".join(str(r.id) for r in runs)
    click.echo(f"queued {what} of {name} v{first.version}: run {ids}")
    if first.to:
        click.echo(f"it goes only to {', '.join(first.to)}, marked TEST")
    else:
        click.echo("it goes to no one: see its renditions with `nbcast runs show`")


@click.command("rerun")
@click.argument("run_id", metavar="RUN", type=int)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_app
def rerun_command(app: AppContext, run_id: int, as_json: bool) -> None:
    """Queue RUN again: the same version, parameters and period (a finished run, or a
    SKIPPED or MISSED slot)."""
    from nbcast.scheduler.control import rerun_run

    new_id = rerun_run(app.db, app.clock, app.caller, run_id)
    if as_json:
        emit_json({"id": new_id, "rerun_of": run_id, "kind": "rerun", "state": RunState.QUEUED})
    else:
        click.echo(f"queued run {new_id}: a rerun of run {run_id}")


@click.group()
def runs() -> None:
    """Inspect runs."""


@runs.command("list")
@click.option("--definition", default=None, help="Only this definition.")
@click.option("--state", default=None, help="Only this state (QUEUED, FAILED, SKIPPED, …).")
@click.option(
    "--kind", default=None, help="Only this kind (scheduled, backfill, manual, rerun, test)."
)
@click.option("--since", type=INSTANT, default=None, help="Only runs firing at or after this.")
@click.option("--until", type=INSTANT, default=None, help="Only runs firing before this.")
@click.option(
    "--order",
    type=click.Choice(["asc", "desc"]),
    default="asc",
    show_default=True,
    help="Oldest or newest fire time first.",
)
@click.option(
    "--limit",
    type=int,
    default=None,
    help="One page of at most this many (1 to 1,000); the next page's --after goes to stderr.",
)
@click.option("--after", default=None, help="Continue after this cursor (from --limit).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (a list of runs).")
@pass_app
def runs_list(
    app: AppContext,
    definition: str | None,
    state: str | None,
    kind: str | None,
    since: datetime | None,
    until: datetime | None,
    order: str,
    limit: int | None,
    after: str | None,
    as_json: bool,
) -> None:
    """List runs by fire time (oldest first); every run, or one page with --limit."""
    from nbcast.access import MAX_PAGE
    from nbcast.executor.queries import list_runs

    items: list[RunRecord] = []
    cursor = after
    with app.db.session() as session:
        while True:
            page = list_runs(
                session,
                app.caller,
                definition=definition,
                state=state,
                kind=kind,
                since=since,
                until=until,
                order="desc" if order == "desc" else "asc",
                limit=MAX_PAGE if limit is None else limit,
                after=cursor,
            )
            items.extend(page.items)
            cursor = page.next_after
            if limit is not None or cursor is None:
                break
    if as_json:
        emit_json([r.to_json() for r in items])
    else:
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
    if cursor is not None:
        click.echo(f"more runs follow: --after {cursor}", err=True)


@runs.command("show")
@click.argument("run_id", metavar="RUN", type=int)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_app
def runs_show(app: AppContext, run_id: int, as_json: bool) -> None:
    """Show RUN: its context, every attempt and why it ended (the failing cell and
    line), its executed notebook, renditions and deliveries."""
    from nbcast.artifacts import open_store
    from nbcast.views.runs import get_run

    store = open_store(app.settings.artifacts_location)
    with app.db.session() as session:
        detail = get_run(session, app.caller, run_id, artifacts=store)
    if as_json:
        emit_json(detail.to_json())
    else:
        _show(detail)


@runs.command("diff")
@click.argument("run_a", metavar="RUN_A", type=int)
@click.argument("run_b", metavar="RUN_B", type=int)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_app
def runs_diff(app: AppContext, run_a: int, run_b: int, as_json: bool) -> None:
    """Compare the reports of RUN_A and RUN_B as a reader would: recorded tables cell by
    cell (numbers with their change), text by cell, images; timings, execution counts
    and ids ignored. To see what a new version changes, dry-run it on a slot the live
    version ran (`nbcast run NAME --test --nobody --version N --slot KEY`) and compare
    the two runs."""
    from nbcast.artifacts import open_store
    from nbcast.views.run_compare import compare_runs

    store = open_store(app.settings.artifacts_location)
    with app.db.session() as session:
        comparison = compare_runs(session, app.caller, run_a, run_b, store)
    if as_json:
        emit_json(comparison.to_json())
    else:
        click.echo("\n".join(comparison.lines()))


def _seconds(value: float | None) -> str:
    return f"{value:.2f}s" if value is not None else ""


def _period(context: dict[str, Any] | None) -> str:
    """The interval a run covers, in its schedule's zone: ``[start, end) Zone``."""
    if not context or "interval_start" not in context:
        return ""
    zone = context.get("timezone", "")
    return f"[{context['interval_start']}, {context.get('interval_end', '')}) {zone}".rstrip()


def _nominal(context: dict[str, Any] | None) -> str:
    """The slot's nominal time (a manual run's: the instant it was asked for), local
    with its offset, then the zone's abbreviation and name — which pass of a fold it
    is, said as people say it: ``2026-11-01T01:30:00-05:00 (EST, America/New_York)``."""
    if not context or "nominal" not in context:
        return ""
    nominal, zone = str(context["nominal"]), str(context.get("timezone", ""))
    try:
        abbreviation = datetime.fromisoformat(nominal).astimezone(ZoneInfo(zone)).tzname()
    except (ValueError, KeyError, OverflowError):  # a zone this machine lacks: as stored
        return f"{nominal} ({zone})" if zone else nominal
    return f"{nominal} ({abbreviation}, {zone})"


def _dry_run_slot(kind: str, context: dict[str, Any] | None) -> str:
    """A dry run's slot, said so."""
    from nbcast.scheduler.runs import dry_run_slot

    slot = dry_run_slot(kind, context)
    return f"{slot} (a dry run of it)" if slot else ""


def _test_to(addresses: list[str] | None) -> str:
    """Where a test run goes: its addresses, or no one (not a test run: nothing)."""
    if addresses is None:
        return ""
    return ", ".join(addresses) + " (TEST)" if addresses else "no one (TEST)"


def _show(run: RunDetail) -> None:
    """``runs show`` for people: the run's facts, then a table per kind of row."""
    state = f"{run.state} ({run.reason})" if run.reason else run.state
    click.echo(f"run {run.id}: {run.definition} v{run.version}, {state}")
    facts: list[tuple[str, Any]] = [
        ("tenant", run.tenant),
        ("kind", run.kind + (f" of run {run.rerun_of}" if run.rerun_of else "")),
        ("slot", run.slot_key or _dry_run_slot(run.kind, run.context) or "-"),
        ("sent to", _test_to(run.test_to)),
        ("nominal", _nominal(run.context)),
        ("fire at", when(run.fire_at)),
        ("period", _period(run.context)),
        ("created", when(run.created_at)),
        ("started", when(run.started_at)),
        ("finished", when(run.finished_at)),
        ("parameters", json.dumps(run.parameters, sort_keys=True, ensure_ascii=False)),
        ("attempts", run.attempt),
        ("notebook", run.notebook_sha256 or ""),
    ]
    if run.next_try_at is not None:
        facts.append(("next try", when(run.next_try_at)))
    if run.error is not None:
        facts.append(("why", run.error.summary()))
    if run.cancel_requested_at is not None:
        by = run.cancel_requested_by or "?"
        facts.append(("cancel", f"requested by {by} at {when(run.cancel_requested_at)}"))
    for key, value in facts:
        if value not in ("", None):
            click.echo(f"  {key:<11} {value}")
    if run.attempts:
        table(
            "attempts",
            ["#", "outcome", "started", "took", "worker", "host", "engine", "error"],
            [
                (
                    a.attempt,
                    a.outcome or "running",
                    when(a.started_at),
                    _seconds(a.duration_s),
                    a.worker,
                    a.host,
                    a.engine,
                    a.error.summary() if a.error is not None else "",
                )
                for a in run.attempts
            ],
            wrap=["host"],
        )
    if run.renditions:
        table(
            "renditions",
            ["format", "variant", "state", "file", "sha256", "error"],
            [
                (
                    r.format,
                    r.variant or "-",
                    r.state,
                    r.filename or "",
                    (r.sha256 or "")[:12],
                    _error_text(r.error),
                )
                for r in run.renditions
            ],
        )
    if run.deliveries:
        table(
            "deliveries",
            ["channel", "recipient", "state", "reason", "tries", "sent at"],
            [
                (d.channel, d.recipient, d.state, d.reason or "", d.attempts, when(d.sent_at))
                for d in run.deliveries
            ],
        )


def _error_text(error: dict[str, Any] | None) -> str:
    if not error:
        return ""
    parts = [str(error.get(k)) for k in ("ename", "evalue", "message") if error.get(k)]
    return ": ".join(parts) or json.dumps(error, sort_keys=True, default=str)[:500]


@click.command()
@click.argument("run_id", metavar="RUN", type=int)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_app
def cancel(app: AppContext, run_id: int, as_json: bool) -> None:
    """Ask for RUN to be cancelled: a queued run is ended by a worker's next step, a
    running one is stopped at its next heartbeat."""
    from nbcast.executor.control import cancel_run

    result = cancel_run(app.db, app.clock, app.caller, run_id)
    if as_json:
        emit_json(result.to_json())
        return
    if result.already_requested:
        said = f"cancel already requested by {result.requested_by} at {when(result.requested_at)}"
    else:
        said = "cancel requested"
    click.echo(f"run {run_id} ({result.state.value}): {said}; {result.next_step}")


COMMANDS = [run_command, rerun_command, runs, cancel]
"""The commands this module adds to ``nbcast``."""
