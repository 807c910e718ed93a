"""The Ray engine: one Ray task per attempt, locally or on a cluster.

Each attempt is a task named ``nbcast:<tenant>/<definition>@<slot>`` (so the Ray
dashboard shows who is running what) with ``num_cpus`` and ``memory`` from the
tenant's quota and one unit of the tenant's custom resource
``nbcast_tenant_<tenant>``: a cluster whose nodes declare that resource (``ray start
--resources='{"nbcast_tenant_acme": 4}'``) enforces the tenant's share itself. When
the cluster does not declare a tenant's resource the task is submitted without it
(logged once) — nbcast's claim already keeps the tenant within its concurrency
quota — rather than left pending forever.

``address=None`` starts a local Ray (``ray.init()``) that declares every tenant's
resource at its concurrency quota; ``"auto"`` or ``"ray://host:10001"`` joins a
cluster. Runs started, succeeded and failed are counted per tenant with
``ray.util.metrics`` (``nbcast_runs_started`` and so on), next to Ray's own metrics.

**Sandboxes and the cluster.** A sandboxed kernel on its tenant's ``host`` network
reaches whatever the Ray node reaches, the cluster's GCS and dashboard included; a Ray
that asks for no token (``RAY_AUTH_MODE=disabled``) would take a job from it and run it
as the Ray workers' user, outside any sandbox. So with Ray's token auth off, an
attempt of a tenant whose network is ``host`` is refused at submit
(``submit_refused``, not retried): turn token auth on (Ray's default), or give such
tenants ``network: none``.

Tasks never write to the database: the worker that holds the lease records their
outcome through fenced writes, so a task that outlives its lease cannot complete
its run. Within a Ray worker process, kernels come from a process-local warm pool
(``NBCAST_RAY_WARM_KERNELS=0``: none) of kernels forked from a zygote
(:mod:`nbcast.executor.kernels.zygote`), as in the local engine; ``NBCAST_RAY_FORKED_KERNELS=0``
(or ``NBCAST_FORKED_KERNELS=0``) starts them plainly instead.

**Warm kernels end when their Ray worker idles.** A Ray worker process outlives the
nbcast worker that sent it tasks (Ray keeps idle workers for reuse, up to one per CPU),
and its pool keeps a ready kernel — in a sandbox of the last tenant it served — for
the next task. Once no attempt has reached the process for ``NBCAST_RAY_WARM_IDLE_S``
seconds (default 60, between 1 and 3,600) the pool is closed, its kernels, their
sandboxes and the zygote with it; the next task starts a new pool. So a stopped
worker or a quiet tenant leaves no sandbox behind for longer than that.

Forked kernels in Ray workers, decided after a stall. Once, in the demo, a run inside
a Ray worker got no kernel within 60 s, and forked kernels were turned off in Ray
workers (3,150 instead of 15,500 runs/hour). What was found:

- **The cause: a kernel that lost the race for one of its ports hung instead of
  exiting.** jupyter_client picks five free ports, closes them, and the kernel binds
  them later; a process that binds one meanwhile makes the kernel's bind fail. For
  the IOPub port, ipykernel's exit handler then waits in ``zmq.Context.term()`` for a
  socket it never closed: the kernel stays alive, holding its shell port, never
  answering, until the pool's 60 s timeout. Reproduced deterministically with an
  occupied IOPub port, for forked and for plain kernels alike (a plain kernel hangs
  the same way); in Ray stress runs (hundreds of tasks, workers restarted and killed,
  more workers than CPUs) about one kernel start in 700 hit a taken port. Ray widens
  the window: every Ray worker has its own jupyter_client port cache (kernels of
  different workers are not kept apart), Ray's own processes bind ephemeral ports,
  and the first kernel of each worker had its ports chosen *before* the zygote was
  started, so the window spanned the zygote's imports (seconds at the niceness 15
  Ray gives its workers, on a busy machine).
- **The fix** (:mod:`nbcast.executor.kernels.zygote`, :mod:`nbcast.executor.kernels.zygote_server`,
  :mod:`nbcast.executor.kernels`): the zygote is started before ports are chosen;
  a forked kernel checks that it, not another process, listens on each of its ports
  and is killed at once otherwise; a forked kernel's exit handlers are bounded (5 s);
  the pool gives a run whose kernel failed to start up to two more starts; and a
  zygote that cannot be started or does not answer a fork request within 30 s is
  killed and the kernel started with ``Popen`` (a warning is logged), so no zygote
  problem can hang a run.
- **Ruled out** (checked inside Ray workers): the signal mask (Ray blocks ``SIGINT``
  in its workers; the zygote's children clear their mask, plain kernels inherit it),
  ``SIGCHLD`` handling, inherited descriptors (the zygote gets only stdio and its
  socket), threads in the zygote (one: Ray sets ``OMP_NUM_THREADS``), the worker's
  environment and working directory (sent with every fork), Ray killing or recycling
  workers (the zygote exits with its worker; the next worker starts its own), and
  stderr (Ray's per-worker log files, not a pipe).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from typing import TYPE_CHECKING, Any

from nbcast.executor.attempt import AttemptJob, AttemptReport
from nbcast.executor.engines.base import Engine, Resources
from nbcast.sandbox.policy import Network
from nbcast.scheduler.models import RunState

if TYPE_CHECKING:
    from nbcast.db import Database

__all__ = ["RayEngine"]

log = logging.getLogger(__name__)
_POOL: Any = None
_POOL_LOCK = threading.Lock()
_BUSY = 0
_LAST_USE = 0.0
_REAPER: threading.Thread | None = None

DEFAULT_WARM_IDLE_S = 60.0
MAX_WARM_IDLE_S = 3600.0


def warm_idle_s(environ: dict[str, str] | None = None) -> float:
    """``NBCAST_RAY_WARM_IDLE_S``: how long a Ray worker keeps its warm kernels without
    an attempt (module docstring); a value that is not a number in [1, 3600] is
    replaced by the default, with a warning in the Ray worker's log."""
    text = (os.environ if environ is None else environ).get("NBCAST_RAY_WARM_IDLE_S", "")
    if not text.strip():
        return DEFAULT_WARM_IDLE_S
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 1.0 <= value <= MAX_WARM_IDLE_S:  # NaN fails too
        log.warning("NBCAST_RAY_WARM_IDLE_S=%.40r is not 1-3600 seconds; using 60", text)
        return DEFAULT_WARM_IDLE_S
    return value


def _reap_idle_pool(idle_s: float) -> None:
    """Close this Ray worker's pool once it has been idle for ``idle_s`` (a daemon
    thread, one per process; it ends with the pool it closed)."""
    global _POOL, _REAPER
    while True:
        time.sleep(min(idle_s, 5.0) / 2)
        with _POOL_LOCK:
            if _POOL is None:
                _REAPER = None
                return
            if _BUSY or time.monotonic() - _LAST_USE < idle_s:
                continue
            pool, _POOL, _REAPER = _POOL, None, None
        pool.close()
        return


def _take_pool(job: AttemptJob) -> Any:
    """This Ray worker's pool (started on first use, with its idle reaper), marked busy."""
    from nbcast.executor.kernels import KernelPool

    global _POOL, _BUSY, _REAPER
    with _POOL_LOCK:
        _BUSY += 1
        if _POOL is None and os.environ.get("NBCAST_RAY_WARM_KERNELS", "1") == "1":
            # Zygote-forked kernels unless NBCAST_RAY_FORKED_KERNELS=0 (module
            # docstring); None keeps the pool's own switch, NBCAST_FORKED_KERNELS.
            forked = None if os.environ.get("NBCAST_RAY_FORKED_KERNELS", "1") != "0" else False
            # A sandboxed job's kernels are kept per tenant: none is started before one asks.
            _POOL = KernelPool(size=1, forked=forked, profiles=() if job.sandbox else None)
        if _POOL is not None and _REAPER is None:
            _REAPER = threading.Thread(
                target=_reap_idle_pool,
                args=(warm_idle_s(),),
                name="nbcast-warm-reaper",
                daemon=True,
            )
            _REAPER.start()
        return _POOL


def _give_back_pool() -> None:
    global _BUSY, _LAST_USE
    with _POOL_LOCK:
        _BUSY -= 1
        _LAST_USE = time.monotonic()


def _run_in_ray(job: AttemptJob) -> AttemptReport:
    """The Ray task body: execute the attempt on this node with a warm kernel."""
    import dataclasses

    import ray

    from nbcast.executor.attempt import execute_attempt

    pool = _take_pool(job)
    try:
        outcome = execute_attempt(job, pool=pool)
    finally:
        _give_back_pool()
    node = ray.get_runtime_context().get_node_id()
    return dataclasses.replace(outcome, host=f"{socket.gethostname()}/ray-node-{node[:12]}")


def auth_disabled() -> bool:
    """Whether this process talks to Ray without token auth (``RAY_AUTH_MODE=disabled``;
    Ray's default, since 2.5x, is token auth)."""
    return os.environ.get("RAY_AUTH_MODE", "").strip().lower() == "disabled"


def resource_name(tenant: str) -> str:
    """The custom resource that stands for ``tenant``'s share on a Ray cluster."""
    return f"nbcast_tenant_{tenant}"


def dashboard_url(context: Any) -> str | None:
    """The dashboard URL of a ``ray.init()`` context (``host:port``, made ``http://…``),
    or None when Ray runs without one or says nothing."""
    found = getattr(context, "dashboard_url", None)
    if not isinstance(found, str) or not found.strip():
        return None
    found = found.strip()
    return found if found.startswith(("http://", "https://")) else f"http://{found}"


class RayEngine(Engine):
    """Runs each attempt as a Ray task (see the module docstring)."""

    name = "ray"

    def __init__(
        self,
        capacity: int = 2,
        *,
        address: str | None = None,
        tenants: dict[str, int] | None = None,
        num_cpus: int | None = None,
        temp_dir: str | None = None,
        include_dashboard: bool | None = None,
    ) -> None:
        import ray
        from ray.util import metrics

        self.capacity = capacity
        context: Any = None
        if not ray.is_initialized():
            options: dict[str, Any] = {
                "namespace": "nbcast",
                "ignore_reinit_error": True,
                "log_to_driver": False,
            }
            if address:
                options["address"] = address
            else:
                options["num_cpus"] = num_cpus or os.cpu_count() or 2
                options["resources"] = {
                    resource_name(t): float(n) for t, n in (tenants or {}).items()
                }
                if temp_dir:
                    options["_temp_dir"] = temp_dir
                if include_dashboard is not None:
                    options["include_dashboard"] = include_dashboard
            context = ray.init(**options)
        self.dashboard_url = dashboard_url(context)
        """Where Ray's dashboard answers (``http://127.0.0.1:8265``), as Ray reports it
        for the cluster this engine started or joined; None without a dashboard. The
        worker records it in its heartbeat and the overview links it."""
        self._ray = ray
        self._task = ray.remote(max_retries=0)(_run_in_ray)
        self._refs: dict[Any, tuple[int, int, str]] = {}
        self._by_attempt: dict[tuple[int, int], Any] = {}
        self._warned: set[str] = set()
        self._started = metrics.Counter(
            "nbcast_runs_started", "attempts started", tag_keys=("tenant",)
        )
        self._succeeded = metrics.Counter(
            "nbcast_runs_succeeded", "attempts succeeded", tag_keys=("tenant",)
        )
        self._failed = metrics.Counter(
            "nbcast_runs_failed", "attempts not succeeded", tag_keys=("tenant",)
        )

    @classmethod
    def for_worker(
        cls,
        db: Database,
        *,
        capacity: int,
        warm_kernels: bool = True,
        address: str | None = None,
    ) -> RayEngine:
        """Join the cluster at ``address`` (else start a local Ray declaring every
        tenant's resource at its concurrency quota, in ``NBCAST_RAY_TEMP_DIR`` if set);
        without ``warm_kernels``, Ray workers start a fresh kernel per run."""
        from nbcast.tenancy.tenants import all_tenants

        with db.session() as session:
            tenants = {t.name: t.max_concurrent_runs for t in all_tenants(session)}
        if not warm_kernels:
            os.environ["NBCAST_RAY_WARM_KERNELS"] = "0"  # read by the Ray task body
        return cls(
            capacity,
            address=address,
            tenants=tenants,
            temp_dir=os.environ.get("NBCAST_RAY_TEMP_DIR"),
        )

    def submit(self, job: AttemptJob, resources: Resources) -> None:
        if job.sandbox is not None and job.sandbox.network is Network.host and auth_disabled():
            # A kernel on the host's network would reach the cluster's dashboard and GCS,
            # which then take its jobs, run as the Ray workers' user outside any sandbox.
            raise ValueError(
                "Ray runs without token auth (RAY_AUTH_MODE=disabled): a sandboxed report "
                f"of tenant {resources.tenant} with network host could submit jobs to it; "
                "turn Ray's token auth on, or set the tenant's network to none"
            )
        custom = resource_name(resources.tenant)
        options: dict[str, Any] = {
            "name": job.label,
            "num_cpus": resources.num_cpus,
            "memory": resources.memory_mb * 1024 * 1024,
        }
        if custom in self._ray.cluster_resources():
            options["resources"] = {custom: 1}
        elif custom not in self._warned:
            self._warned.add(custom)
            log.warning(
                "the Ray cluster declares no %s resource; tenant %s's share is "
                "enforced by nbcast's claims only",
                custom,
                resources.tenant,
            )
        ref = self._task.options(**options).remote(job)
        self._refs[ref] = (job.run_id, job.attempt, resources.tenant)
        self._by_attempt[(job.run_id, job.attempt)] = ref
        self._started.inc(1, tags={"tenant": resources.tenant})

    def poll(self) -> list[tuple[int, int, AttemptReport]]:
        if not self._refs:
            return []
        ready, _ = self._ray.wait(list(self._refs), num_returns=len(self._refs), timeout=0)
        ended = []
        for ref in ready:
            run_id, attempt, tenant = self._refs.pop(ref)
            self._by_attempt.pop((run_id, attempt), None)
            try:
                outcome: AttemptReport = self._ray.get(ref)
            except self._ray.exceptions.TaskCancelledError:
                outcome = AttemptReport(
                    state=RunState.CANCELLED, duration_s=0.0, error={"message": "cancelled"}
                )
            except Exception as exc:  # the task or its worker died
                outcome = AttemptReport(
                    state=RunState.FAILED,
                    duration_s=0.0,
                    error={"ename": type(exc).__name__, "evalue": str(exc)[:2000]},
                )
            counter = self._succeeded if outcome.state is RunState.SUCCEEDED else self._failed
            counter.inc(1, tags={"tenant": tenant})
            ended.append((run_id, attempt, outcome))
        return ended

    def cancel(self, run_id: int, attempt: int) -> None:
        ref = self._by_attempt.get((run_id, attempt))
        if ref is not None:
            self._ray.cancel(ref, force=False)

    def close(self) -> None:
        for ref in list(self._refs):
            self._ray.cancel(ref, force=False)
        self._refs.clear()
