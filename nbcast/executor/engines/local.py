"""The local engine: attempts run on this machine, each in its own kernel process.

A thread per running attempt drives papermill; kernels come from a
:class:`~nbcast.executor.kernels.KernelPool` of pre-started kernels (one kernel per
run, never reused), so kernel start and the heavy imports are off the critical path.
``capacity`` (config ``--concurrency``) bounds the attempts running at once.
"""

from __future__ import annotations

import queue
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from nbcast.executor.attempt import AttemptJob, AttemptReport, execute_attempt
from nbcast.executor.engines.base import Engine, Resources
from nbcast.scheduler.models import RunState

if TYPE_CHECKING:
    from nbcast.db import Database

__all__ = ["LocalEngine"]


class LocalEngine(Engine):
    """Runs attempts in threads on this machine, kernels from a warm pool."""

    name = "local"

    def __init__(
        self, capacity: int = 2, *, warm_kernels: bool = True, pool_size: int | None = None
    ) -> None:
        self.capacity = capacity
        self._threads = ThreadPoolExecutor(
            max_workers=capacity, thread_name_prefix="nbcast-attempt"
        )
        self._done: queue.SimpleQueue[tuple[int, int, AttemptReport]] = queue.SimpleQueue()
        self._cancels: dict[tuple[int, int], threading.Event] = {}
        self._pool: Any = None
        if warm_kernels:
            from nbcast.executor.kernels import KernelPool

            self._pool = KernelPool(size=pool_size or capacity)

    @classmethod
    def for_worker(
        cls,
        db: Database,
        *,
        capacity: int,
        warm_kernels: bool = True,
        address: str | None = None,
    ) -> LocalEngine:
        """``capacity`` threads, a warm pool unless ``warm_kernels`` is False."""
        return cls(capacity, warm_kernels=warm_kernels)

    def submit(self, job: AttemptJob, resources: Resources) -> None:
        cancel = threading.Event()
        key = (job.run_id, job.attempt)
        self._cancels[key] = cancel
        future = self._threads.submit(execute_attempt, job, pool=self._pool, cancel=cancel)

        def finished(done: Future[AttemptReport]) -> None:
            self._cancels.pop(key, None)
            try:
                outcome = done.result()
            except BaseException as exc:  # execute_attempt itself broke
                outcome = AttemptReport(
                    state=RunState.FAILED,
                    duration_s=0.0,
                    error={"ename": type(exc).__name__, "evalue": str(exc)},
                )
            self._done.put((job.run_id, job.attempt, outcome))

        future.add_done_callback(finished)

    def poll(self) -> list[tuple[int, int, AttemptReport]]:
        ended = []
        while True:
            try:
                ended.append(self._done.get_nowait())
            except queue.Empty:
                return ended

    def cancel(self, run_id: int, attempt: int) -> None:
        event = self._cancels.get((run_id, attempt))
        if event is not None:
            event.set()

    def close(self) -> None:
        for event in list(self._cancels.values()):
            event.set()
        self._threads.shutdown(wait=True, cancel_futures=True)
        if self._pool is not None:
            self._pool.close()
