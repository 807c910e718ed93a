"""A Ray worker's warm kernels end once it has been idle (``NBCAST_RAY_WARM_IDLE_S``):
a Ray worker process outlives the nbcast worker that sent it tasks, and without this
its ready kernel — a sandbox of the last tenant served — lived as long as the process.

The pool is driven the way the Ray task body drives it (:func:`_take_pool`,
:func:`_give_back_pool`), in this process, with a real kernel."""

from __future__ import annotations

import os
import time
from types import SimpleNamespace
from typing import Any

import pytest

from nbcast.executor.engines import ray as ray_engine


def test_the_idle_limit_is_bounded_and_defaults_to_a_minute() -> None:
    assert ray_engine.warm_idle_s({}) == 60.0
    assert ray_engine.warm_idle_s({"NBCAST_RAY_WARM_IDLE_S": "2.5"}) == 2.5
    for bad in ("0", "-1", "3601", "nan", "inf", "soon", "1e400"):
        assert ray_engine.warm_idle_s({"NBCAST_RAY_WARM_IDLE_S": bad}) == 60.0, bad


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.kernels
def test_warm_kernels_end_after_the_idle_limit_and_not_while_busy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("NBCAST_RAY_WARM_IDLE_S", "1")
    monkeypatch.setenv("NBCAST_RAY_WARM_KERNELS", "1")
    job: Any = SimpleNamespace(sandbox=None)
    pool = ray_engine._take_pool(job)
    try:
        assert pool.wait_ready(timeout=120)
        pids = pool.kernel_pids()
        assert pids
        assert all(alive(pid) for pid in pids)
        time.sleep(2.5)  # busy (an attempt running) for longer than the limit
        assert ray_engine._POOL is pool
        assert not pool.closed
    finally:
        ray_engine._give_back_pool()
    deadline = time.monotonic() + 15
    while ray_engine._POOL is not None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert ray_engine._POOL is None
    assert pool.closed
    deadline = time.monotonic() + 15
    while any(alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(alive(pid) for pid in pids)
    # The next attempt starts a new pool, with its own reaper.
    again = ray_engine._take_pool(job)
    try:
        assert again is not pool
        assert ray_engine._REAPER is not None
    finally:
        ray_engine._give_back_pool()
        with ray_engine._POOL_LOCK:
            ray_engine._POOL = None
        again.close()
