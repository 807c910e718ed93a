"""``nbcast cost``: see :mod:`nbcast.oversight.cost`.

``cost report --from D --to D`` prints the tenant's cost per definition and UTC day
(``--tenant`` picks the tenant; any member may read its own), ``--json`` for programs,
``--plot FILE.png`` saves a stacked daily chart as well.
"""

from __future__ import annotations

from datetime import date
from pathlib import Path
from typing import Any

import click

from nbcast.cli.app import AppContext, pass_app
from nbcast.cli.output import emit_json, table
from nbcast.limits import WALL_TIME_MAX, WALL_TIME_MIN

__all__: list[str] = []


class Day(click.ParamType):  # type: ignore[type-arg]
    """A calendar date, ``YYYY-MM-DD`` (a UTC day)."""

    name = "YYYY-MM-DD"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> date:
        """``value`` as a date, or fail the command."""
        import re

        if isinstance(value, date):
            return value
        text = str(value).strip()
        if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", text):
            self.fail(f"{text[:40]!r} is not a date (YYYY-MM-DD)", param, ctx)
        try:
            day = date.fromisoformat(text)
        except ValueError:
            self.fail(f"{text} is not a calendar date", param, ctx)
        low, high = WALL_TIME_MIN.date(), WALL_TIME_MAX.date()
        if not low <= day < high:
            self.fail(f"{text} is outside {low.isoformat()}..{high.isoformat()}", param, ctx)
        return day


@click.group()
def cost() -> None:
    """What the tenant's runs used: CPU, wall time, memory, warehouse, rendering,
    deliveries."""


@cost.command("report")
@click.option("--from", "start", type=Day(), required=True, help="First UTC day (included).")
@click.option("--to", "end", type=Day(), required=True, help="Last UTC day (included).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.option(
    "--plot",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Also save a stacked daily chart to this .png file.",
)
@pass_app
def cost_report(app: AppContext, start: date, end: date, as_json: bool, plot: Path | None) -> None:
    """The tenant's cost per definition and UTC day of fire time, live runs and the
    figures kept of runs retention deleted."""
    from nbcast.oversight.cost import (
        MAX_PLOT_DAYS,
        NULL_NOTE,
        check_period,
        cost_report,
        plot_report,
    )

    check_period(start, end)
    if plot is not None and (end - start).days + 1 > MAX_PLOT_DAYS:
        raise click.UsageError(f"--plot draws at most {MAX_PLOT_DAYS} days")
    if plot is not None and plot.suffix.lower() != ".png":
        raise click.UsageError(f"--plot {str(plot)[:200]!r} must name a .png file")
    if plot is not None and not plot.parent.is_dir():
        raise click.UsageError(f"--plot: no folder {str(plot.parent)[:200]!r}")
    with app.db.session() as session:
        report = cost_report(session, app.caller, start, end, app.clock.now())
    if plot is not None:
        plot_report(report, plot)
    if as_json:
        emit_json({**report.to_json(), "plot": str(plot) if plot is not None else None})
        return
    columns = [
        "definition",
        "day",
        "runs",
        "attempts",
        "cpu s",
        "wall s",
        "peak MB",
        "wh rows",
        "wh bytes",
        "wh s",
        "render s",
        "sent",
    ]

    def cells(name: str, day: str, f: Any) -> tuple[str, ...]:
        return (
            name,
            day,
            f"{f.runs:,}",
            f"{f.attempts:,}",
            f"{f.cpu_s:,.1f}",
            f"{f.wall_s:,.1f}",
            f"{f.peak_mem_mb:,.0f}",
            f"{f.warehouse_rows:,}",
            f"{f.warehouse_bytes:,}",
            f"{f.warehouse_s:,.1f}",
            f"{f.render_s:,.1f}",
            f"{f.deliveries:,}",
        )

    rows = [cells(r.definition, r.day.isoformat(), r.figures) for r in report.rows]
    totals = report.totals()
    rows += [cells(name, "total", f) for name, f in sorted(totals.items())]
    if totals:
        rows.append(cells("all", "total", report.total()))
    table(
        f"cost of tenant {report.tenant}, {start.isoformat()} to {end.isoformat()} (UTC days)",
        columns,
        rows,
    )
    if not report.rows:
        click.echo("no runs in this period")
    click.echo(f"note: {NULL_NOTE}")
    if plot is not None:
        click.echo(f"plot saved to {plot}")


COMMANDS = [cost]
"""The commands this module adds to ``nbcast``."""
