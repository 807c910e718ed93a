"""``nbcast delivery-worker``: outbox intake, renders and sends, in one loop.

One pass (:meth:`DeliveryWorker.step`): consume the outbox into renditions and ledger
rows; return deliveries whose worker died to the queue (:meth:`Ledger.reap`); render
what is pending (each render in its own child process, under a time limit); send
what is due (SLA alerts are the oversight service's: :mod:`nbcast.oversight.service`).
The worker writes only the delivery plane's tables; a failure in one stage is logged
and the loop goes on, so a broken renderer or an unreachable SMTP server never stops
the other stages — or the scheduler and the executor, which do not wait for delivery
at all.

**Idle** (``--exit-when-idle``) means nothing is due within :data:`IDLE_HORIZON`
(60 s): no outbox row to consume, no rendition or delivery due by then, no
send in flight whose lease ends by then. A delivery waiting for a retry further away (a peer
asked for a long ``Retry-After``, a backoff grew) does not keep the worker alive: it
stays PENDING, with its ``not_before``, for the next worker run to send.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta

import sqlalchemy as sa

from nbcast.clock import Clock
from nbcast.daemon import Service, Step, Supervisor
from nbcast.db import Database
from nbcast.delivery.intake import consume_outbox
from nbcast.delivery.ledger import Ledger
from nbcast.delivery.models import (
    DELIVERY_LEASE,
    RENDITION_LEASE,
    Delivery,
    DeliveryState,
    Rendition,
    RenditionState,
)
from nbcast.delivery.rendering import RenderQueue
from nbcast.executor.models import OutboxRow
from nbcast.leasing import free

__all__ = ["IDLE_HORIZON", "DeliveryWorker"]

log = logging.getLogger("nbcast.delivery")

IDLE_HORIZON = timedelta(seconds=60)
"""How far ahead :meth:`DeliveryWorker.idle` looks for work due (module docstring)."""


@dataclass
class StepCounts:
    """What one pass did."""

    consumed: int = 0
    reaped: int = 0
    rendered: int = 0
    delivered: int = 0

    @property
    def busy(self) -> bool:
        return bool(self.consumed or self.reaped or self.rendered or self.delivered)


class DeliveryWorker(Service):
    """Runs the delivery plane's loop (module docstring)."""

    kind = "delivery-worker"

    def __init__(
        self,
        db: Database,
        clock: Clock,
        ledger: Ledger,
        renders: RenderQueue,
        *,
        poll_interval: float = 1.0,
        batch: int = 50,
        idle_horizon: timedelta = IDLE_HORIZON,
    ) -> None:
        super().__init__()
        self.db = db
        self.clock = clock
        self.ledger = ledger
        self.renders = renders
        self.poll_interval = poll_interval
        self.batch = batch
        self.idle_horizon = idle_horizon
        self.exit_when_idle = False
        self.name = ledger.owner

    def stop(self) -> None:
        """Finish the current pass, then end (first SIGTERM)."""
        super().stop()
        self.clock.wake()

    def step(self) -> StepCounts:
        """One pass of the loop."""
        counts = StepCounts()
        for stage in ("consume", "reap", "render", "deliver"):
            try:
                if stage == "consume":
                    with self.db.session() as session:
                        counts.consumed = consume_outbox(session, self.clock.now())
                elif stage == "reap":
                    counts.reaped = self.ledger.reap()
                elif stage == "render":
                    counts.rendered = self.renders.render_pending()
                else:
                    counts.delivered = self.ledger.deliver_due(self.batch)
            except Exception:  # one stage failing must not stop the others
                log.exception("delivery stage %s failed", stage)
        return counts

    def idle(self) -> bool:
        """Nothing to consume, render or send within ``idle_horizon`` (module
        docstring): retries due later are left for the next run."""
        horizon = self.clock.now() + self.idle_horizon
        rendering = Rendition.state == RenditionState.PENDING.value
        due_rendition = rendering & free(RENDITION_LEASE, horizon)
        # A delivery is claimed only once its run has no PENDING rendition: one that
        # waits on a rendition due after the horizon is not due either.
        held_back = (
            sa.select(Rendition.id)
            .where(
                Rendition.run_id == Delivery.run_id,
                rendering,
                ~free(RENDITION_LEASE, horizon),
            )
            .exists()
        )
        due_delivery = (
            (Delivery.state == DeliveryState.PENDING.value)
            & (Delivery.not_before <= horizon)
            & ~held_back
        )
        in_flight = (Delivery.state == DeliveryState.SENDING.value) & free(DELIVERY_LEASE, horizon)
        with self.db.session() as session:
            return not session.scalar(
                sa.select(
                    sa.exists().where(OutboxRow.consumed_at.is_(None))
                    | sa.exists().where(due_rendition)
                    | sa.exists().where(due_delivery)
                    | sa.exists().where(in_flight)
                )
            )

    def steps(self) -> Iterator[Step]:
        """One :meth:`step` per step; done when stopped, or — with ``exit_when_idle``
        — once :meth:`idle`."""
        self.renders.warm_up()
        while not self.stopping:
            counts = self.step()
            done = not counts.busy and self.exit_when_idle and self.idle()
            yield Step(busy=counts.busy, sleep=self.poll_interval, done=done, detail=self._detail())
            if done:
                break
        log.info("delivery worker stopped: %s", self.ledger.stats)

    def _detail(self) -> dict[str, int]:
        s = self.ledger.stats
        return {
            "sent": s.sent,
            "failed": s.failed,
            "suppressed": s.suppressed,
            "retried": s.retried,
            "duplicates": s.duplicates,
        }

    def run(self, *, exit_when_idle: bool = False) -> None:
        """Run under a :class:`~nbcast.daemon.Supervisor` until stopped (or, with
        ``exit_when_idle``, until :meth:`idle`)."""
        self.exit_when_idle = exit_when_idle
        Supervisor(self.db, self.clock, self).run()
