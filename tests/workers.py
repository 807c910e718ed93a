"""Running the real execution worker in a test: the set-up five test files shared."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from nbcast.clock import SystemClock
from nbcast.db import Database
from nbcast.executor.engines.local import LocalEngine
from nbcast.executor.worker import Worker


def work_until_idle(
    db: Database,
    *,
    artifacts: str | Path,
    work_dir: str | Path,
    name: str = "test-worker",
    capacity: int = 1,
    pool_size: int = 1,
    **options: Any,
) -> None:
    """A real worker on the local engine runs what is queued, then stops."""
    with LocalEngine(capacity=capacity, pool_size=pool_size) as engine:
        Worker(
            db,
            SystemClock(),
            engine,
            name=name,
            artifacts=str(artifacts),
            work_dir=str(work_dir),
            **options,
        ).run(exit_when_idle=True)
