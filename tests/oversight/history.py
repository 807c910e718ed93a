"""A few weeks of a tenant's history, made through the real planes on a fixed clock:
two daily reports, materialized by the scheduler, run through the executor's queue
(successes with warehouse figures, a failure, missed slots), rendered and delivered
as signed links by the delivery plane — for the retention and cost tests.

The executed notebooks are built (:func:`tests.delivery.plane.executed_notebook`)
instead of run by a kernel: most days' runs produce the same bytes, so one blob is
shared by many runs (and both reports), and some produce bytes of their own. The
attempts' CPU seconds and peak memory are written as the executor records them (its
own recording is another part of issue 13); some attempts are left NULL.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from nbcast.access import Caller
from nbcast.clock import FixedClock
from nbcast.db import Database, import_models
from nbcast.delivery.channels.link import LinkChannel
from nbcast.delivery.models import Rendition, SignedLink
from nbcast.executor.models import RunAttempt
from nbcast.executor.queue import RunQueue
from nbcast.scheduler.control import run_now
from nbcast.scheduler.materializer import Materializer
from nbcast.scheduler.models import Run
from tests.delivery.plane import Plane, executed_notebook

START = datetime(2026, 10, 1, 6, 0, tzinfo=UTC)
"""When the reports are published; their first slots fire the next morning."""

DAYS = 14
"""Days of history."""

SHARED = executed_notebook(marker="shared")
"""What most runs produce: one blob for all of them."""

LINK = {"channel": "link", "to": "cfo@example.com"}


@dataclass
class History:
    """The planes and what was made (run ids of note)."""

    plane: Plane
    live_link_run: int = 0
    """A run of day 2 whose link lives 90 days: kept, rows and files."""
    failed_run: int = 0
    manual_run: int = 0
    """A manual run on day 3 (no slot), with a live link until :meth:`revoke_manual`."""
    unique_runs: list[int] = field(default_factory=list)
    """Runs whose executed notebook is theirs alone."""

    @property
    def db(self) -> Database:
        return self.plane.db

    @property
    def clock(self) -> FixedClock:
        return self.plane.clock


def _complete(history: History, day: int) -> None:
    """Complete every due run as a worker would: mostly successes with warehouse
    figures, one failure (day 5, report sales), unique output on days 1 and 6."""
    plane = history.plane
    queue = RunQueue(plane.db, plane.clock, owner="test-worker")
    while leases := queue.claim(10):
        for lease in queue.start_many(leases):
            usage = [
                {"rows": 10 * day + 1, "bytes": 1000 * day + 7, "seconds": 0.25, "sql_sha256": "0"},
                {"rows": 2, "bytes": 64, "seconds": 0.5, "sql_sha256": "1"},
            ]
            if day == 5 and lease.definition == "sales":
                queue.fail(lease, {"ename": "ValueError"}, duration_s=1.5, usage=usage, retry=False)
                history.failed_run = lease.run_id
                continue
            unique = day in (1, 6)
            produced = (
                executed_notebook(marker=f"day-{day}-{lease.definition}") if unique else SHARED
            )
            sha = plane.store.put(produced).sha256
            queue.succeed(lease, artifact_sha256=sha, duration_s=2.0 + day, usage=usage)
            if unique:
                history.unique_runs.append(lease.run_id)
        with plane.db.session() as session:  # what the executor records of its kernels
            session.execute(
                sa.update(RunAttempt)
                .where(RunAttempt.cpu_s.is_(None), RunAttempt.run_id % 3 != 0)
                .values(cpu_s=1.25 * day, peak_mem_mb=100.0 + day)
            )


def make_history(db: Database, folder: Path, *, days: int = DAYS, html: bool = True) -> History:
    """Publish ``sales`` (07:00 UTC; HTML and CSV, or CSV only without ``html``) and
    ``ops`` (07:30 UTC; CSV), both daily with a link subscription, and live ``days``
    days: each morning the scheduler materializes, the worker completes, the delivery
    plane renders and hands out links (alive two days). Days 4 and 9 are not
    materialized until the next morning (their slots are recorded missed); day 2's
    links live 90 days; day 3 also has a manual run (later that morning) whose link
    lives 90 days. The store is ``folder``/artifacts. Day 1 is 2026-10-02."""
    import_models()
    plane = Plane(db, FixedClock(START), folder)
    history = History(plane)
    for name, minute, outputs in (
        ("sales", 0, ("html", "csv") if html else ("csv",)),
        ("ops", 30, ("csv",)),
    ):
        plane.publish(
            name,
            [LINK],
            outputs=outputs,
            schedule={"cron": f"{minute} 7 * * *", "timezone": "UTC"},
        )
    materializer = Materializer(db, plane.clock, name="test-scheduler")
    renders = plane.renders()
    renders.warm_up(
        ("html", "csv") if html else ("csv",)
    )  # forked renders start with nbconvert imported
    short = plane.ledger({"link": LinkChannel()}, link_ttl=timedelta(days=2))
    long = plane.ledger({"link": LinkChannel()}, link_ttl=timedelta(days=90))
    for day in range(1, days + 1):
        plane.clock.set(START.replace(hour=7, minute=45) + timedelta(days=day))
        if day in (4, 9):
            continue
        materializer.tick()
        _complete(history, day)
        plane.pump(long if day == 2 else short, renders)
        if day == 2:
            with db.session() as session:
                history.live_link_run = int(
                    session.scalar(
                        sa.select(Run.id).where(
                            Run.fire_at == plane.clock.now().replace(hour=7, minute=0)
                        )
                    )
                    or 0
                )
        if day == 3:
            history.manual_run = run_now(
                db, plane.clock, Caller(tenant="default", user="t"), "sales", {}
            )
            _complete(history, day)
            plane.pump(long, renders)
    return history


def revoke_manual(history: History) -> None:
    """Revoke the manual run's links (so retention may take it)."""
    with history.db.session() as session:
        session.execute(
            sa.update(SignedLink)
            .where(SignedLink.run_id == history.manual_run)
            .values(revoked_at=history.clock.now())
        )


# -- what a test compares ---------------------------------------------------------------


def snapshot(db: Database) -> dict[int, dict[str, Any]]:
    """Every run with what retention looks at: definition, fire time, state, its slot
    row, the shas it refers to, and whether a live link points at it (now)."""
    with db.session() as session:
        rows = session.execute(
            sa.select(
                Run.id,
                Run.definition_id,
                Run.fire_at,
                Run.state,
                Run.slot_key,
                Run.audience,
                Run.reason,
                Run.artifact_sha256,
            )
        ).all()
        attempts = session.execute(
            sa.select(RunAttempt.run_id, RunAttempt.artifact_sha256).where(
                RunAttempt.artifact_sha256.is_not(None)
            )
        ).all()
        renditions = session.execute(
            sa.select(Rendition.run_id, Rendition.sha256).where(Rendition.sha256.is_not(None))
        ).all()
        links = session.execute(
            sa.select(
                SignedLink.run_id, SignedLink.sha256, SignedLink.expires_at, SignedLink.revoked_at
            )
        ).all()
    runs: dict[int, dict[str, Any]] = {}
    for r in rows:
        runs[r.id] = {
            "definition_id": r.definition_id,
            "fire_at": r.fire_at,
            "state": r.state,
            "slot": (r.slot_key, r.audience, r.state, r.reason),
            "shas": {r.artifact_sha256} - {None},
            "links": [],
        }
    for run_id, sha in [*attempts, *renditions]:
        runs[run_id]["shas"].add(sha)
    for link in links:
        runs[link.run_id]["links"].append((link.sha256, link.expires_at, link.revoked_at))
    return runs


def live(run: dict[str, Any], now: datetime) -> bool:
    """Whether a live link points at one of ``run``'s files."""
    return any(revoked is None and expires > now for _, expires, revoked in run["links"])


def table_counts(db: Database) -> dict[str, int]:
    """Rows in every table of the schema."""
    from nbcast.db import Base

    import_models()
    with db.engine.connect() as conn:
        return {
            table.name: int(
                conn.execute(sa.select(sa.func.count()).select_from(table)).scalar_one()
            )
            for table in Base.metadata.sorted_tables
        }


def store_files(folder: Path) -> dict[str, int]:
    """Every blob in the store under ``folder``/artifacts, with its size."""
    root = folder / "artifacts"
    return {p.name: p.stat().st_size for p in root.rglob("*") if p.is_file() and len(p.name) == 64}
