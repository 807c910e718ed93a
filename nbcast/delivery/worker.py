"""``nbcast delivery-worker``: outbox intake, renders and sends, in one loop.

One pass (:meth:`DeliveryWorker.step`): consume the outbox into renditions and ledger
rows; return deliveries whose worker died to the queue (:meth:`Ledger.reap`); render
what is pending (each render in its own child process, under a time limit); send
what is due. The worker writes only the delivery plane's tables; a failure in one
stage is logged and the loop goes on, so a broken renderer or an unreachable SMTP
server never stops the other stages — or the scheduler and the executor, which do
not wait for delivery at all.
"""

from __future__ import annotations

import logging
import signal
import threading
from dataclasses import dataclass
from types import FrameType

import sqlalchemy as sa

from nbcast.clock import Clock
from nbcast.db import Database
from nbcast.delivery.intake import consume_outbox
from nbcast.delivery.ledger import Ledger
from nbcast.delivery.models import Delivery, OutboxRow, Rendition
from nbcast.delivery.rendering import RenderQueue

__all__ = ["DeliveryWorker"]

log = logging.getLogger("nbcast.delivery")


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


class DeliveryWorker:
    """Runs the delivery plane's loop (module docstring)."""

    def __init__(
        self,
        db: Database,
        clock: Clock,
        ledger: Ledger,
        renders: RenderQueue,
        *,
        poll_interval: float = 1.0,
        batch: int = 50,
    ) -> None:
        self.db = db
        self.clock = clock
        self.ledger = ledger
        self.renders = renders
        self.poll_interval = poll_interval
        self.batch = batch
        self._stop = threading.Event()

    def install_signal_handlers(self) -> None:
        """SIGTERM/SIGINT finish the current pass, then stop."""

        def handler(_signum: int, _frame: FrameType | None) -> None:
            self.stop()

        signal.signal(signal.SIGTERM, handler)
        signal.signal(signal.SIGINT, handler)

    def stop(self) -> None:
        self._stop.set()
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
        """Nothing to consume, render or send now or later (retries included)."""
        with self.db.session() as session:
            return not session.scalar(
                sa.select(
                    sa.exists().where(OutboxRow.consumed_at.is_(None))
                    | sa.exists().where(Rendition.state == "PENDING")
                    | sa.exists().where(Delivery.state.in_(("PENDING", "SENDING")))
                )
            )

    def run(self, *, exit_when_idle: bool = False) -> None:
        """Loop until stopped (or, with ``exit_when_idle``, until :meth:`idle`)."""
        self.renders.warm_up()
        while not self._stop.is_set():
            counts = self.step()
            if counts.busy:
                continue
            if exit_when_idle and self.idle():
                break
            self.clock.sleep(self.poll_interval)
        log.info("delivery worker stopped: %s", self.ledger.stats)
