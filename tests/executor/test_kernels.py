"""KernelPool with real kernels: refills, hands out each kernel once, leaks nothing."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from nbcast.executor.kernels import (
    DEFAULT_WARMUP,
    DEFAULT_WARMUP_MODULES,
    KernelPool,
    warmup_code,
)

pytestmark = pytest.mark.timeout(120)


def kernel_children() -> set[int]:
    """Live (non-zombie) kernel processes started by this test process: ipykernel
    processes, and kernels forked by the zygote (they carry the zygote's command line,
    so they are found as the zygote's children)."""
    found = set()
    for child in psutil.Process().children(recursive=True):
        try:
            if child.status() == psutil.STATUS_ZOMBIE:
                continue
            command = " ".join(child.cmdline())
            parent = child.parent()
            zygote = "nbcast.executor.kernels.zygote_server"
            forked = parent is not None and zygote in " ".join(parent.cmdline())
            if forked:
                found.add(child.pid)
            elif zygote not in command and "ipykernel" in command:
                # (the fork server itself lives as long as the worker: not a kernel)
                found.add(child.pid)
        except psutil.NoSuchProcess:
            pass
    return found


def no_kernels_left(within: float = 10.0) -> bool:
    """Whether every kernel process of this test has exited within ``within`` seconds
    (a forked kernel is reaped by the zygote a moment after it is killed)."""
    deadline = time.monotonic() + within
    while kernel_children():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def gone(pid: int, within: float = 10.0) -> bool:
    """Whether ``pid`` has exited (and been reaped) within ``within`` seconds."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not psutil.pid_exists(pid):
            return True
        time.sleep(0.05)
    return False


@pytest.fixture
def pool() -> Iterator[KernelPool]:
    with KernelPool(size=2) as pool:
        yield pool


def test_warmup_code_imports_without_binding_names() -> None:
    namespace: dict[str, object] = {}
    exec(warmup_code(["json", "no_such_module_xyz"]), namespace)
    assert set(namespace) == {"__builtins__"}
    assert warmup_code(DEFAULT_WARMUP_MODULES) == DEFAULT_WARMUP
    assert "pandas" in DEFAULT_WARMUP_MODULES


def test_pool_refills_with_fresh_kernels_and_close_leaves_none(pool: KernelPool) -> None:
    assert pool.wait_ready(60)
    first = set(pool.kernel_pids())
    assert len(first) == 2

    kernel = pool.acquire(timeout=60)
    assert kernel.warm
    assert kernel.wait_s == 0.0
    assert kernel.pid in first
    kernel.start_run()
    with pytest.raises(RuntimeError, match="exactly one run"):
        kernel.start_run()
    kernel.release()

    assert pool.wait_ready(60)
    assert kernel.pid is not None
    assert gone(kernel.pid)
    refilled = set(pool.kernel_pids())
    assert len(refilled) == 2
    assert kernel.pid not in refilled  # never handed back to the pool
    stats = pool.stats()
    assert (stats.ready, stats.in_use, stats.served_warm) == (2, 0, 1)

    in_use = pool.acquire(timeout=60)  # still checked out when the pool closes
    pids = set(pool.kernel_pids()) | {in_use.pid}
    assert pids <= kernel_children()
    pool.close()
    assert pool.closed
    assert all(gone(pid) for pid in pids if pid is not None)
    assert no_kernels_left()
    in_use.release()  # harmless after close
    with pytest.raises(RuntimeError, match="closed"):
        pool.acquire(timeout=1)


def test_empty_pool_starts_a_cold_kernel_instead_of_waiting() -> None:
    with KernelPool(size=0) as pool:
        kernel = pool.acquire(timeout=60)
        assert not kernel.warm
        assert kernel.wait_s > 0
        assert pool.stats().in_use == 1
        pid = kernel.pid
        kernel.release(wait=True)
        assert pid is not None
        assert gone(pid)
    assert no_kernels_left()


def test_acquire_claims_a_kernel_still_being_prepared() -> None:
    with KernelPool(size=1) as pool:
        kernel = pool.acquire(timeout=60)  # nothing is ready yet
        assert not kernel.warm
        stats = pool.stats()
        assert stats.served_waiting == 1
        assert stats.preparing + stats.ready == 1  # a replacement, not a second cold start
        kernel.kill()
        assert kernel.pid is not None
        assert gone(kernel.pid)
    assert no_kernels_left()


def test_acquire_timeout_stops_the_kernel_it_started() -> None:
    with KernelPool(size=0) as pool:
        with pytest.raises(TimeoutError):
            pool.acquire(timeout=0.05)
        deadline = time.monotonic() + 10
        while pool.kernel_pids() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert pool.kernel_pids() == []
        assert pool.stats().preparing == 0
    assert no_kernels_left()


def test_a_failing_warmup_discards_the_kernel_but_runs_still_get_one() -> None:
    with KernelPool(size=1, warmup="raise RuntimeError('broken warm-up')") as pool:
        assert not pool.wait_ready(1)  # nothing ever becomes ready
        kernel = pool.acquire(timeout=60)  # served cold instead
        assert not kernel.warm
        assert kernel.pid is not None
        assert psutil.pid_exists(kernel.pid)
        kernel.release(wait=True)
    assert no_kernels_left()


def test_an_unknown_kernelspec_fails_acquire() -> None:
    from jupyter_client.kernelspec import NoSuchKernel

    with KernelPool(size=1, kernel_name="no-such-kernel-xyz") as pool:
        with pytest.raises(NoSuchKernel):
            pool.acquire(timeout=10)
        assert pool.stats().preparing == 0  # backing off, not spinning


FLAKY_KERNEL = """
import os, sys
marker, connection_file = sys.argv[1], sys.argv[2]
if not os.path.exists(marker):  # the first start fails, as one whose port was taken
    open(marker, "w").close()
    sys.exit(3)
os.execv(sys.executable, [sys.executable, "-m", "ipykernel_launcher", "-f", connection_file])
"""


def test_a_run_whose_kernel_fails_to_start_gets_another(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script, marker = tmp_path / "flaky.py", tmp_path / "started-once"
    script.write_text(FLAKY_KERNEL)
    spec = tmp_path / "kernels" / "flaky"
    spec.mkdir(parents=True)
    argv = [sys.executable, str(script), str(marker), "{connection_file}"]
    (spec / "kernel.json").write_text(
        json.dumps({"argv": argv, "display_name": "flaky", "language": "python"})
    )
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path))
    with KernelPool(size=0, kernel_name="flaky", warmup=None, forked=False) as pool:
        kernel = pool.acquire(timeout=60)
        assert marker.exists()  # the first start failed
        assert kernel.pid is not None
        assert psutil.pid_exists(kernel.pid)
        kernel.release(wait=True)
    assert no_kernels_left()
