"""A delivery plane on a real database for tests: publish reports with subscriptions,
run them through the executor's real queue (claim → start → fenced success, which
writes the outbox), and pump the delivery plane until it is idle.

The executed notebook is built directly (cells with outputs, tables recorded with
``nbcast.delivery.tables.encode_table``, exactly what ``nbcast.output.table`` puts in
a display output) instead of running a kernel per test; the table API itself is
tested with a real kernel in ``test_tables.py``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import nbformat
import pandas as pd

from nbcast.access import Caller
from nbcast.artifacts import LocalArtifactStore
from nbcast.clock import FixedClock
from nbcast.db import Database
from nbcast.definitions.versions import publish
from nbcast.delivery.channels.base import Channel
from nbcast.delivery.intake import consume_outbox
from nbcast.delivery.ledger import Ledger
from nbcast.delivery.rendering import RendererLookup, RenderQueue
from nbcast.delivery.signing import Signer
from nbcast.delivery.tables import encode_table
from nbcast.delivery.worker import DeliveryWorker
from nbcast.executor.queue import RunQueue
from nbcast.output import TABLE_MIME_TYPE
from nbcast.scheduler.control import run_now
from nbcast.tenancy.tenants import ensure_tenant
from tests.notebooks import make_notebook

SIGNER = Signer([("k1", "test-signing-secret-0123456789")])


def executed_notebook(rows: int = 3, marker: str = "hello") -> bytes:
    """An executed report: a heading, a printed line, and one recorded table."""
    frame = pd.DataFrame({"region": [f"r{i}" for i in range(rows)], "sales": list(range(rows))})
    nb = nbformat.v4.new_notebook()
    code = nbformat.v4.new_code_cell("output.table(df, 'sales')")
    code.outputs = [
        nbformat.v4.new_output("stream", name="stdout", text=f"{marker}\n"),
        nbformat.v4.new_output(
            "display_data",
            data={
                "text/html": frame.to_html(),
                "text/plain": frame.to_string(),
                TABLE_MIME_TYPE: encode_table(frame, "sales"),
            },
            metadata={"nbcast": {"table": "sales"}},
        ),
    ]
    nb.cells = [nbformat.v4.new_markdown_cell("# Sales"), code]
    for i, cell in enumerate(nb.cells):
        cell["id"] = f"cell-{i}"
    return nbformat.writes(nb).encode()


LOOPBACK = {"NBCAST_WEBHOOK_ALLOW_HTTP": "1", "NBCAST_WEBHOOK_ALLOWED_HOSTS": "127.0.0.1"}
"""The webhook policy a test of receivers on 127.0.0.1 publishes under, as a user's
test of their own deployment would configure it."""


@dataclass
class Plane:
    """Everything a delivery test needs, on one database."""

    db: Database
    clock: FixedClock
    folder: Path
    store: LocalArtifactStore = field(init=False)

    def __post_init__(self) -> None:
        self.store = LocalArtifactStore(self.folder / "artifacts")

    def publish(
        self,
        name: str,
        subscriptions: list[dict[str, Any]],
        *,
        outputs: tuple[str, ...] = ("html",),
        schedule: dict[str, Any] | None = None,
        tenant: str = "default",
    ) -> None:
        block: dict[str, Any] = {
            "name": name,
            "outputs": list(outputs),
            "subscriptions": subscriptions,
        }
        if schedule is not None:
            block["schedule"] = schedule
        path = make_notebook(self.folder / "defs" / tenant / f"{name}.ipynb", nbcast=block)
        with self.db.session() as session:
            ensure_tenant(session, tenant)
        publish(
            self.db,
            path,
            caller=Caller(tenant=tenant, user="t"),
            now=self.clock.now(),
            environ=LOOPBACK,
        )

    def succeed(
        self,
        name: str,
        *,
        rows: int = 3,
        marker: str = "hello",
        notebook: bytes | None = None,
        tenant: str = "default",
    ) -> int:
        """Queue a manual run of ``name`` (of ``tenant``) and complete it through the
        executor's queue, storing ``notebook`` (default: :func:`executed_notebook`) as
        what it produced."""
        run_id = run_now(self.db, self.clock, Caller(tenant=tenant, user="t"), name, {})
        queue = RunQueue(self.db, self.clock, owner="test-worker")
        leases = [lease for lease in queue.claim(10) if lease.run_id == run_id]
        assert len(leases) == 1
        queue.start(leases[0])
        produced = executed_notebook(rows, marker) if notebook is None else notebook
        sha = self.store.put(produced).sha256
        queue.succeed(leases[0], artifact_sha256=sha, duration_s=0.1)
        return run_id

    def complete_due(self) -> list[int]:
        """Complete every due QUEUED run through the executor's queue (as a worker
        whose notebooks all succeed would); return their ids."""
        queue = RunQueue(self.db, self.clock, owner="test-worker")
        done = []
        while leases := queue.claim(10):
            for lease in queue.start_many(leases):
                sha = self.store.put(executed_notebook()).sha256
                queue.succeed(lease, artifact_sha256=sha, duration_s=0.1)
                done.append(lease.run_id)
        return done

    def ledger(self, channels: dict[str, Channel], **options: Any) -> Ledger:
        return Ledger(
            self.db,
            self.clock,
            self.store,
            channels,
            SIGNER,
            owner=options.pop("owner", "test-delivery"),
            base_url="https://reports.example.com",
            **options,
        )

    def renders(self, lookup: RendererLookup | None = None, **options: Any) -> RenderQueue:
        return RenderQueue(
            self.db, self.clock, self.store, owner="test-render", lookup=lookup, **options
        )

    def pump(self, ledger: Ledger, renders: RenderQueue, *, rounds: int = 50) -> None:
        """Consume, render and deliver until nothing is left, moving the clock past
        retry delays when only waiting work remains."""
        for _ in range(rounds):
            with self.db.session() as session:
                consumed = consume_outbox(session, self.clock.now())
            busy = consumed + ledger.reap() + renders.render_pending(10) + ledger.deliver_due(50)
            if not busy:
                if not self._waiting():
                    return
                self.clock.advance(timedelta(hours=2))
        raise AssertionError("the delivery plane did not settle")

    def settle(self, worker: DeliveryWorker, *, rounds: int = 200) -> None:
        """Run the delivery worker's passes (:meth:`DeliveryWorker.step`) until nothing
        is left, moving the clock past retry delays when only waiting work remains."""
        for _ in range(rounds):
            if worker.step().busy:
                continue
            if not self._waiting():
                return
            self.clock.advance(timedelta(hours=2))
        raise AssertionError("the delivery worker did not settle")

    def _waiting(self) -> bool:
        with self.db.engine.connect() as conn:
            return bool(
                conn.exec_driver_sql(
                    "SELECT EXISTS (SELECT 1 FROM deliveries WHERE state IN ('PENDING','SENDING'))"
                    " OR EXISTS (SELECT 1 FROM renditions WHERE state = 'PENDING')"
                ).scalar()
            )


def receipts(plane: Plane) -> list[dict[str, Any]]:
    """Every ledger row, oldest first, as plain dicts."""
    with plane.db.engine.connect() as conn:
        rows = conn.exec_driver_sql(
            "SELECT id, run_id, channel, recipient, state, reason, attempt, possible_duplicate,"
            " receipt FROM deliveries ORDER BY id"
        ).all()
    result = []
    for r in rows:
        receipt = r.receipt if not isinstance(r.receipt, str) else json.loads(r.receipt)
        result.append({**r._asdict(), "receipt": receipt})
    return result
