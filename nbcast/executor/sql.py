"""SQL pieces the run queue's modules share (:mod:`~nbcast.executor.queue`,
:mod:`~nbcast.executor.leases`, :mod:`~nbcast.executor.quotas`).

The queue writes through SQLAlchemy Core statements on these tables — no ORM unit of
work or bulk-update bookkeeping on the hot path — while the ORM models in
:mod:`nbcast.executor.models` stay the schema's one source.
"""

from __future__ import annotations

from typing import cast

import sqlalchemy as sa

from nbcast.executor.models import OutboxRow, RunAttempt, WarehouseUsage
from nbcast.scheduler.models import Run

__all__ = ["ATTEMPTS", "OUTBOX", "RUNS", "USAGE"]

RUNS = cast(sa.Table, Run.__table__)
"""``runs``."""
ATTEMPTS = cast(sa.Table, RunAttempt.__table__)
"""``run_attempts``."""
USAGE = cast(sa.Table, WarehouseUsage.__table__)
"""``warehouse_usage``."""
OUTBOX = cast(sa.Table, OutboxRow.__table__)
"""``delivery_outbox``: the executor inserts a row when a run succeeds (nothing else)."""
