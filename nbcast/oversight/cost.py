"""Cost attribution: what each run used, per UTC day and definition, and the report.

**Per run** (from the live rows):

- ``attempts`` — its attempts (``run_attempts``);
- ``cpu_s`` — the kernels' CPU seconds, summed over attempts;
- ``wall_s`` — the attempts' wall time (``duration_s``), summed;
- ``peak_mem_mb`` — the largest peak resident memory of any attempt's kernel;
- ``warehouse_rows``, ``warehouse_bytes``, ``warehouse_s`` — what its queries
  returned and took (``warehouse_usage``), summed;
- ``render_s`` — the seconds its renditions took to render, summed;
- ``deliveries`` — its ledger rows that reached SENT.

A figure the execution plane did not record (a NULL ``cpu_s`` or ``peak_mem_mb``, an
attempt without ``duration_s``) counts as 0, and the report says so. ``runs`` counts
the run rows of the period except SKIPPED and MISSED, which record a slot that did
not run.

**Per tenant, day and definition.** A run belongs to the UTC day of its ``fire_at``.
When retention deletes runs it first folds their figures into ``cost_days`` with
:func:`fold_costs`, in the transaction that deletes them, adding to the row of that
(tenant, day, definition) if there is one; :func:`cost_report` adds ``cost_days`` to
the live rows, so a report reads the same before and after retention. Both sides are
computed by one function (:func:`figures_by_day`), so they cannot drift apart.

:func:`cost_report` is the query behind ``nbcast cost report`` (any member of the
tenant may read its own report); :func:`plot_report` draws it as stacked daily bars.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, fields
from datetime import UTC, date, datetime, time, timedelta
from pathlib import Path
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from nbcast.access import Caller
from nbcast.definitions.models import ReportDefinition
from nbcast.delivery.models import Delivery, DeliveryState, Rendition
from nbcast.errors import ConfigError
from nbcast.executor.models import RunAttempt, WarehouseUsage
from nbcast.limits import clip
from nbcast.oversight.models import CostDay
from nbcast.scheduler.models import Run, RunState

__all__ = [
    "MAX_PLOT_DAYS",
    "MAX_REPORT_DAYS",
    "NULL_NOTE",
    "PLOTTED",
    "CostReport",
    "CostRow",
    "Figures",
    "check_period",
    "cost_report",
    "figures_by_day",
    "fold_costs",
    "plot_report",
    "tenant_costs",
]

MAX_REPORT_DAYS = 3_660
"""The longest period one report covers (about ten years)."""

MAX_PLOT_DAYS = 366
"""The longest period one plot draws (a bar per day)."""

NULL_NOTE = (
    "CPU seconds and peak memory not recorded by the executor (NULL) count as 0, "
    "as does an attempt without a duration"
)
"""What the report says about figures that were not recorded."""

_NOT_RUN = (RunState.SKIPPED.value, RunState.MISSED.value)


@dataclass(frozen=True, kw_only=True)
class Figures:
    """The cost figures of some runs (module docstring); ``+`` adds two sets (peak
    memory: the larger)."""

    runs: int = 0
    attempts: int = 0
    cpu_s: float = 0.0
    wall_s: float = 0.0
    peak_mem_mb: float = 0.0
    warehouse_rows: int = 0
    warehouse_bytes: int = 0
    warehouse_s: float = 0.0
    render_s: float = 0.0
    deliveries: int = 0

    def __add__(self, other: Figures) -> Figures:
        values = {
            f.name: getattr(self, f.name) + getattr(other, f.name)
            for f in fields(self)
            if f.name != "peak_mem_mb"
        }
        return Figures(**values, peak_mem_mb=max(self.peak_mem_mb, other.peak_mem_mb))

    def to_json(self) -> dict[str, Any]:
        """The figures as a JSON object (floats rounded to microseconds / bytes)."""
        return {
            f.name: round(v, 6) if isinstance(v := getattr(self, f.name), float) else v
            for f in fields(self)
        }

    @classmethod
    def of_row(cls, row: CostDay) -> Figures:
        """The figures kept in a ``cost_days`` row."""
        return cls(**{f.name: getattr(row, f.name) for f in fields(cls)})


def _number(value: Any) -> float:
    number = float(value or 0.0)
    return number if math.isfinite(number) and number > 0 else 0.0


def _run_figures(session: Session, runs: sa.Select[Any]) -> Iterator[tuple[int, datetime, Figures]]:
    """(definition id, fire_at, figures) of every run ``runs`` selects (a select of
    ``Run.id``), streamed."""
    run_ids = runs.subquery().select()
    attempts = (
        sa.select(
            RunAttempt.run_id.label("run_id"),
            sa.func.count().label("attempts"),
            sa.func.sum(sa.func.coalesce(RunAttempt.cpu_s, 0.0)).label("cpu_s"),
            sa.func.sum(sa.func.coalesce(RunAttempt.duration_s, 0.0)).label("wall_s"),
            sa.func.max(sa.func.coalesce(RunAttempt.peak_mem_mb, 0.0)).label("peak"),
        )
        .where(RunAttempt.run_id.in_(run_ids))
        .group_by(RunAttempt.run_id)
        .subquery()
    )
    warehouse = (
        sa.select(
            WarehouseUsage.run_id.label("run_id"),
            sa.func.sum(WarehouseUsage.rows).label("rows"),
            sa.func.sum(WarehouseUsage.bytes).label("bytes"),
            sa.func.sum(WarehouseUsage.seconds).label("seconds"),
        )
        .where(WarehouseUsage.run_id.in_(run_ids))
        .group_by(WarehouseUsage.run_id)
        .subquery()
    )
    renders = (
        sa.select(
            Rendition.run_id.label("run_id"),
            sa.func.sum(sa.func.coalesce(Rendition.seconds, 0.0)).label("seconds"),
        )
        .where(Rendition.run_id.in_(run_ids))
        .group_by(Rendition.run_id)
        .subquery()
    )
    sent = (
        sa.select(Delivery.run_id.label("run_id"), sa.func.count().label("sent"))
        .where(Delivery.run_id.in_(run_ids), Delivery.state == DeliveryState.SENT.value)
        .group_by(Delivery.run_id)
        .subquery()
    )
    query = (
        sa.select(
            Run.definition_id,
            Run.fire_at,
            Run.state,
            attempts.c.attempts,
            attempts.c.cpu_s,
            attempts.c.wall_s,
            attempts.c.peak,
            warehouse.c.rows,
            warehouse.c.bytes,
            warehouse.c.seconds.label("warehouse_s"),
            renders.c.seconds.label("render_s"),
            sent.c.sent,
        )
        .select_from(Run)
        .outerjoin(attempts, attempts.c.run_id == Run.id)
        .outerjoin(warehouse, warehouse.c.run_id == Run.id)
        .outerjoin(renders, renders.c.run_id == Run.id)
        .outerjoin(sent, sent.c.run_id == Run.id)
        .where(Run.id.in_(run_ids))
        .execution_options(yield_per=2_000)
    )
    for row in session.execute(query):
        yield (
            row.definition_id,
            row.fire_at,
            Figures(
                runs=0 if row.state in _NOT_RUN else 1,
                attempts=int(row.attempts or 0),
                cpu_s=_number(row.cpu_s),
                wall_s=_number(row.wall_s),
                peak_mem_mb=_number(row.peak),
                warehouse_rows=int(row.rows or 0),
                warehouse_bytes=int(row.bytes or 0),
                warehouse_s=_number(row.warehouse_s),
                render_s=_number(row.render_s),
                deliveries=int(row.sent or 0),
            ),
        )


def figures_by_day(session: Session, runs: sa.Select[Any]) -> dict[tuple[date, int], Figures]:
    """The figures of the runs ``runs`` selects (``sa.select(Run.id).where(…)``), added
    up per (UTC day of ``fire_at``, definition id)."""
    totals: dict[tuple[date, int], Figures] = {}
    for definition_id, fire_at, figures in _run_figures(session, runs):
        key = (fire_at.astimezone(UTC).date(), definition_id)
        totals[key] = totals[key] + figures if key in totals else figures
    return totals


def fold_costs(session: Session, tenant_id: int, run_ids: Sequence[int]) -> int:
    """Add the figures of ``run_ids`` (runs of ``tenant_id`` about to be deleted) to
    ``cost_days``, in the caller's transaction; return how many rows were written."""
    if not run_ids:
        return 0
    totals = figures_by_day(session, sa.select(Run.id).where(Run.id.in_(list(run_ids))))
    table = cast(sa.Table, CostDay.__table__)
    dialect = session.get_bind().dialect.name
    insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
    for (day, definition_id), figures in sorted(totals.items()):
        values = {"tenant_id": tenant_id, "day": day, "definition_id": definition_id}
        values.update({f.name: getattr(figures, f.name) for f in fields(Figures)})
        statement = insert(table).values(values)
        excluded = statement.excluded
        added = {
            f.name: table.c[f.name] + excluded[f.name]
            for f in fields(Figures)
            if f.name != "peak_mem_mb"
        }
        added["peak_mem_mb"] = sa.case(
            (excluded.peak_mem_mb > table.c.peak_mem_mb, excluded.peak_mem_mb),
            else_=table.c.peak_mem_mb,
        )
        session.execute(
            statement.on_conflict_do_update(
                index_elements=["tenant_id", "day", "definition_id"], set_=added
            )
        )
    return len(totals)


# -- the report -----------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class CostRow:
    """The figures of one definition on one UTC day."""

    definition: str
    day: date
    figures: Figures

    def to_json(self) -> dict[str, Any]:
        """The JSON form (one row of ``nbcast cost report --json``)."""
        return {
            "definition": self.definition,
            "day": self.day.isoformat(),
            **self.figures.to_json(),
        }


@dataclass(frozen=True, kw_only=True)
class CostReport:
    """A tenant's cost per definition and day over ``[start, end]`` (both included)."""

    tenant: str
    start: date
    end: date
    rows: list[CostRow]
    """Ordered by definition, then day; only days with runs (or kept figures)."""

    def totals(self) -> dict[str, Figures]:
        """The figures of each definition over the period."""
        out: dict[str, Figures] = {}
        for row in self.rows:
            out[row.definition] = out.get(row.definition, Figures()) + row.figures
        return out

    def total(self) -> Figures:
        """The figures of the whole period."""
        result = Figures()
        for row in self.rows:
            result = result + row.figures
        return result

    def days(self) -> list[date]:
        """Every day of the period, in order."""
        return [self.start + timedelta(days=n) for n in range((self.end - self.start).days + 1)]

    def to_json(self) -> dict[str, Any]:
        """The JSON form of ``nbcast cost report --json``."""
        return {
            "tenant": self.tenant,
            "from": self.start.isoformat(),
            "to": self.end.isoformat(),
            "note": NULL_NOTE,
            "rows": [row.to_json() for row in self.rows],
            "definitions": {name: f.to_json() for name, f in sorted(self.totals().items())},
            "total": self.total().to_json(),
        }


def _day_start(day: date) -> datetime:
    return datetime.combine(day, time(0), tzinfo=UTC)


def tenant_costs(
    session: Session, tenant_id: int, start: date, end: date
) -> dict[tuple[date, int], Figures]:
    """The live runs' figures plus ``cost_days`` of ``tenant_id`` over ``[start, end]``,
    per (day, definition id) (unchecked: for the report and retention's tests)."""
    runs = sa.select(Run.id).where(
        Run.tenant_id == tenant_id,
        Run.fire_at >= _day_start(start),
        Run.fire_at < _day_start(end + timedelta(days=1)),
    )
    totals = figures_by_day(session, runs)
    kept = session.scalars(
        sa.select(CostDay).where(
            CostDay.tenant_id == tenant_id, CostDay.day >= start, CostDay.day <= end
        )
    )
    for row in kept:
        key = (row.day, row.definition_id)
        figures = Figures.of_row(row)
        totals[key] = totals[key] + figures if key in totals else figures
    return totals


def check_period(start: date, end: date) -> None:
    """:class:`ConfigError` unless ``start <= end`` and the period is at most
    :data:`MAX_REPORT_DAYS` long."""
    if start > end:
        raise ConfigError(f"--from {start.isoformat()} is after --to {end.isoformat()}")
    if (end - start).days + 1 > MAX_REPORT_DAYS:
        raise ConfigError(f"a cost report covers at most {MAX_REPORT_DAYS:,} days")


def cost_report(
    session: Session, caller: Caller, start: date, end: date, now: datetime | None = None
) -> CostReport:
    """The caller's tenant's cost per definition and UTC day over ``[start, end]``
    (any member of the tenant)."""
    from nbcast.tenancy.roles import Role, require

    check_period(start, end)
    tenant = require(session, caller, Role.viewer, "reading the cost report", now).tenant
    totals = tenant_costs(session, tenant.id, start, end)
    names = dict(
        session.execute(
            sa.select(ReportDefinition.id, ReportDefinition.name).where(
                ReportDefinition.tenant_id == tenant.id
            )
        )
        .tuples()
        .all()
    )
    rows = [
        CostRow(definition=names.get(definition_id, f"#{definition_id}"), day=day, figures=f)
        for (day, definition_id), f in totals.items()
    ]
    rows.sort(key=lambda r: (r.definition, r.day))
    return CostReport(tenant=tenant.name, start=start, end=end, rows=rows)


# -- the plot -------------------------------------------------------------------------

PLOTTED = (
    ("wall_s", "wall time, s"),
    ("cpu_s", "kernel CPU, s"),
    ("warehouse_bytes", "warehouse, MB"),
    ("render_s", "rendering, s"),
)
"""The figures :func:`plot_report` draws, one panel each."""


def plot_report(report: CostReport, path: str | Path) -> Path:
    """Draw ``report`` as stacked daily bars (one colour per definition; a panel for
    each of :data:`PLOTTED`) and save it as a PNG at ``path``.

    Deterministic: the same report gives the same bytes (matplotlib's object API on
    the Agg canvas, no global backend switched, no software or date in the PNG's
    metadata)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    days = report.days()
    if len(days) > MAX_PLOT_DAYS:
        raise ConfigError(
            f"a plot draws at most {MAX_PLOT_DAYS} days; this report has {len(days):,}"
        )
    index = {day: n for n, day in enumerate(days)}
    names = sorted({row.definition for row in report.rows})
    figure = Figure(figsize=(10, 7), dpi=100)
    FigureCanvasAgg(figure)
    axes = figure.subplots(2, 2, sharex=True).flatten()
    colours = [f"C{n % 10}" for n in range(len(names))]
    for ax, (field, label) in zip(axes, PLOTTED, strict=True):
        bottom = [0.0] * len(days)
        for name, colour in zip(names, colours, strict=True):
            heights = [0.0] * len(days)
            for row in report.rows:
                if row.definition == name:
                    value = float(getattr(row.figures, field))
                    heights[index[row.day]] = value / 1e6 if field == "warehouse_bytes" else value
            ax.bar(range(len(days)), heights, bottom=bottom, color=colour, label=name, width=0.8)
            bottom = [b + h for b, h in zip(bottom, heights, strict=True)]
        ax.set_title(label, fontsize=10)
        ax.grid(axis="y", alpha=0.3)
    step = max(1, len(days) // 10)
    for ax in axes[2:]:
        ticks = list(range(0, len(days), step))
        ax.set_xticks(ticks, [days[t].isoformat() for t in ticks], rotation=45, ha="right")
    if names:
        figure.legend(
            *axes[0].get_legend_handles_labels(), loc="upper right", fontsize=8, frameon=False
        )
    else:
        figure.text(0.5, 0.5, "no runs in this period", ha="center", va="center")
    figure.suptitle(
        f"nbcast cost, tenant {report.tenant}: {report.start.isoformat()} to "
        f"{report.end.isoformat()} (UTC days of fire time)",
        fontsize=11,
    )
    figure.tight_layout(rect=(0, 0, 0.86 if names else 1, 0.95))
    target = Path(path)
    # Never through a planted link (O_NOFOLLOW), created private; an existing file of
    # one's own is rewritten in place.
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(target, flags, 0o600)
    except OSError as exc:
        raise ConfigError(
            f"cannot write the plot to {clip(str(target), 200)}: {exc.strerror}"
        ) from None
    with os.fdopen(fd, "wb") as handle:
        figure.savefig(handle, format="png", metadata={"Software": None})
    return target
