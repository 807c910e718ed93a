"""A small world for SLA tests on a real database: definitions with a schedule and an
SLA published by an owner with an email address, slots materialized by the real
materializer, runs failed or completed through the executor's real queue, reports and
alerts sent by the real delivery worker, and what the monitor recorded read back."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from nbcast.access import Caller
from nbcast.artifacts import LocalArtifactStore
from nbcast.clock import Clock
from nbcast.db import Database
from nbcast.definitions.models import ReportDefinition
from nbcast.definitions.versions import publish
from nbcast.delivery.channels.base import Channel
from nbcast.delivery.ledger import Ledger
from nbcast.delivery.rendering import RenderQueue
from nbcast.delivery.worker import DeliveryWorker
from nbcast.executor.lease import Lease
from nbcast.executor.queue import RunQueue
from nbcast.oversight.models import SlaMiss, SlaWatermark
from nbcast.oversight.sla import check_slas
from nbcast.oversight.sla_alerts import AlertWorker
from nbcast.scheduler.materializer import Materializer, TickResult
from nbcast.tenancy.models import AuditEntry, User
from tests.delivery.plane import SIGNER, executed_notebook
from tests.notebooks import make_notebook

OWNER = "owner@example.com"
RECIPIENT = "cfo@example.com"
ALICE = Caller(tenant="default", user="t")
QUIET: dict[str, str] = {}
"""The environment the monitor reads in most tests: no NBCAST_SLA_* variable."""


@dataclass(frozen=True)
class Pass:
    """What one step of the two services did."""

    busy: bool
    alerted: int


@dataclass(frozen=True)
class Services:
    """The delivery worker and the oversight service's alerts, as one step: the SLA
    tests follow a report from its run to its owner's inbox."""

    delivery: DeliveryWorker
    alerts: AlertWorker

    def step(self) -> Pass:
        delivered = self.delivery.step()
        alerted = self.alerts.send_due()
        return Pass(busy=delivered.busy or alerted > 0, alerted=alerted)


@dataclass
class World:
    """Definitions, their slots and what became of them, on one database and clock."""

    db: Database
    clock: Clock
    folder: Path
    store: LocalArtifactStore = field(init=False)
    leases: dict[str, Lease] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.store = LocalArtifactStore(self.folder / "artifacts")
        self.queue = RunQueue(self.db, self.clock, owner="test-worker", lease_seconds=86_400)

    def publish(
        self,
        name: str,
        schedule: dict[str, Any],
        *,
        within: str | None = "30m",
        subscriptions: list[dict[str, Any]] | None = None,
        email: str | None = OWNER,
    ) -> None:
        """Publish ``name`` as ALICE (its owner, with ``email``), promising ``within``."""
        block: dict[str, Any] = {
            "name": name,
            "schedule": schedule,
            "subscriptions": [{"channel": "email", "to": RECIPIENT}]
            if subscriptions is None
            else subscriptions,
        }
        if within is not None:
            block["sla"] = {"delivered_within": within}
        path = make_notebook(self.folder / "defs" / f"{name}.ipynb", nbcast=block)
        publish(self.db, path, caller=ALICE, now=self.clock.now())
        with self.db.session() as session:
            session.execute(sa.update(User).where(User.name == ALICE.user).values(email=email))

    def tick(self) -> TickResult:
        """One pass of the real materializer (as a scheduler replica)."""
        return Materializer(self.db, self.clock, name="test-scheduler").tick()

    def claim(self) -> dict[str, Lease]:
        """Claim and start every due run; their leases by definition name (with
        ``@<audience>`` for a recipient-scoped run)."""
        while leases := self.queue.claim(10):
            for lease in self.queue.start_many(leases):
                key = f"{lease.definition}@{lease.audience}" if lease.audience else lease.definition
                self.leases[key] = lease
        return self.leases

    def fail(self, name: str) -> None:
        """Fail ``name``'s claimed run for good."""
        lease = self.leases.pop(name)
        self.queue.fail(lease, {"message": "the warehouse is down"}, retry=False)

    def succeed(self, name: str) -> None:
        """Complete ``name``'s claimed run with an executed report."""
        lease = self.leases.pop(name)
        sha = self.store.put(executed_notebook()).sha256
        self.queue.succeed(lease, artifact_sha256=sha, duration_s=0.1)

    def worker(self, channels: dict[str, Channel]) -> Services:
        """The real delivery worker and the oversight service's alert sender over
        ``channels`` (links to reports.example.com), stepped together."""
        ledger = Ledger(
            self.db,
            self.clock,
            self.store,
            channels,
            SIGNER,
            owner="test-delivery",
            base_url="https://reports.example.com",
        )
        renders = RenderQueue(self.db, self.clock, self.store, owner="test-render")
        alerts = AlertWorker(
            self.db,
            self.clock,
            channels,
            owner="test-oversight",
            lease=timedelta(minutes=2),
            base_url="https://reports.example.com",
        )
        return Services(DeliveryWorker(self.db, self.clock, ledger, renders), alerts)

    def check(self, environ: dict[str, str] | None = None, **options: Any) -> dict[str, Any]:
        """One pass of the monitor (no time budget unless ``max_seconds`` is given: a
        loaded machine must not change what one pass judges)."""
        options.setdefault("max_seconds", 3600.0)
        return check_slas(
            self.db, self.clock, environ=QUIET if environ is None else environ, **options
        )

    def misses(self) -> list[dict[str, Any]]:
        """Every miss, by definition name then slot."""
        columns = (
            SlaMiss.slot_key,
            SlaMiss.state,
            SlaMiss.reason,
            SlaMiss.fire_at,
            SlaMiss.deadline,
            SlaMiss.alert_state,
            SlaMiss.alert_channel,
            SlaMiss.alert_to,
            SlaMiss.alert_attempts,
            SlaMiss.alert_error,
        )
        with self.db.session() as session:
            rows = session.execute(
                sa.select(ReportDefinition.name.label("definition"), *columns)
                .join(ReportDefinition, ReportDefinition.id == SlaMiss.definition_id)
                .order_by(ReportDefinition.name, SlaMiss.slot_key)
            ).all()
        return [dict(r._mapping) for r in rows]

    def watermark(self, name: str) -> Any:
        """``name``'s SLA watermark (None: never checked)."""
        with self.db.session() as session:
            return session.scalar(
                sa.select(SlaWatermark.checked_until)
                .join(ReportDefinition, ReportDefinition.id == SlaWatermark.definition_id)
                .where(ReportDefinition.name == name)
            )

    def audited(self) -> list[dict[str, Any]]:
        """The ``sla.missed`` audit entries, in order."""
        import json

        with self.db.session() as session:
            rows = session.execute(
                sa.select(AuditEntry.actor, AuditEntry.object, AuditEntry.details)
                .where(AuditEntry.action == "sla.missed")
                .order_by(AuditEntry.id)
            ).all()
        return [{"actor": a, "object": o, **json.loads(d)} for a, o, d in rows]

    def runs(self, name: str) -> list[tuple[str, str, str | None]]:
        """``name``'s slot rows: (slot key, state, reason)."""
        with self.db.engine.connect() as conn:
            rows = conn.execute(
                sa.text(
                    "SELECT r.slot_key, r.state, r.reason FROM runs r"
                    " JOIN report_definitions d ON d.id = r.definition_id"
                    " WHERE d.name = :n AND r.slot_key IS NOT NULL ORDER BY r.fire_at"
                ),
                {"n": name},
            ).all()
        return [(r[0], r[1], r[2]) for r in rows]


def minutes(n: float) -> timedelta:
    """``n`` minutes."""
    return timedelta(minutes=n)
