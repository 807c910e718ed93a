"""An attempt frees its file descriptors when it ends, not at the next garbage collection.

nbclient runs its synchronous calls on a per-thread asyncio loop that
``jupyter_core.utils.run_sync`` creates and never closes: before the fix every attempt
thread left one open loop (an epoll and a socket pair, 3 fds) that only the cyclic
garbage collector freed, and CI once hit "zmq.error.ZMQError: Too many open files" in
``tests/executor/test_worker_isolation.py``. The test runs attempts on real (pooled)
kernels, each on its own short-lived thread as an engine's threads come and go, with
the garbage collector off, and counts the process's open fds. Before the fix they grew
by 90 over 30 attempts; now by none.
"""

from __future__ import annotations

import gc
import json
import os
import threading
import time
from pathlib import Path

import pytest

from nbcast.executor.attempt import AttemptJob, AttemptReport, execute_attempt
from nbcast.executor.kernels import KernelPool
from tests.executor.test_permanent_failures import notebook_dict

pytestmark = pytest.mark.timeout(180)

ATTEMPTS = 30
BOUND = 10
"""Fds the attempts may leave open between them (3 per attempt before the fix)."""


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def settle(pool: KernelPool) -> None:
    """Wait until the pool is back to its own kernels (released ones shut down, the
    replacement warm), so fds are counted at the same point every time."""
    assert pool.wait_ready(60)
    deadline = time.monotonic() + 30
    while len(pool.kernel_pids()) != pool.size and time.monotonic() < deadline:
        time.sleep(0.02)
    assert len(pool.kernel_pids()) == pool.size


def attempt_on_a_thread(tmp_path: Path, pool: KernelPool, run_id: int) -> AttemptReport:
    job = AttemptJob(
        run_id=run_id,
        attempt=1,
        tenant="default",
        definition="fds",
        label=f"nbcast:default/fds@manual-{run_id}",
        notebook_json=json.dumps(notebook_dict()),
        parameters={"n": run_id},
        timeout_s=60,
        work_dir=str(tmp_path / "runs"),
        artifacts=str(tmp_path / "artifacts"),
    )
    outcomes: list[AttemptReport] = []
    thread = threading.Thread(
        target=lambda: outcomes.append(execute_attempt(job, pool=pool)), name=f"attempt-{run_id}"
    )
    thread.start()
    thread.join(120)
    assert not thread.is_alive()
    assert len(outcomes) == 1
    return outcomes[0]


def test_attempt_threads_leave_no_open_fds_for_the_garbage_collector(tmp_path: Path) -> None:
    with KernelPool(size=1) as pool:
        # The first attempt imports and caches what every later one shares.
        assert attempt_on_a_thread(tmp_path, pool, 0).state.value == "SUCCEEDED"
        gc.collect()
        gc.disable()
        try:
            settle(pool)
            before = open_fds()
            states = [
                attempt_on_a_thread(tmp_path, pool, i).state.value for i in range(1, ATTEMPTS + 1)
            ]
            settle(pool)
            grown = open_fds() - before
        finally:
            gc.enable()
    assert states == ["SUCCEEDED"] * ATTEMPTS
    assert grown < BOUND, f"{ATTEMPTS} attempts left {grown} fds open until a garbage collection"
