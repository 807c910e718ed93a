"""Execution plane: runs are inserted by the scheduler; every later change to a run
(lease, start, finish, cancel) belongs to this plane.

- :mod:`~nbcast.executor.models` — the ``runs``, ``run_attempts``, cancel-request and
  warehouse-usage tables, and the states, reasons and outcomes as documented enums;
- :mod:`~nbcast.executor.queue` — the claim and fair share, and :class:`RunQueue`, a
  worker's view over :mod:`~nbcast.executor.leases` (fenced start, heartbeat, success
  and failure with retries, the reaper, cancel requests) and
  :mod:`~nbcast.executor.quotas` (per-run quota, concurrency, warehouse budget);
- :mod:`~nbcast.executor.worker` — the ``nbcast worker`` service;
  :mod:`~nbcast.executor.engines` where attempts run (``local``, ``ray``, plug-ins);
  :mod:`~nbcast.executor.attempt` one attempt, the same on every engine;
  :mod:`~nbcast.executor.notebook_runner` papermill with a watchdog;
  :mod:`~nbcast.executor.kernels` pre-started kernels and the zygote that forks them;
- :mod:`~nbcast.executor.queries` (``runs list|show``: records in
  :mod:`~nbcast.executor.records`, failing cells and lines from
  :mod:`~nbcast.executor.failures`) and :mod:`~nbcast.executor.control` (cancel) — the
  functions the CLI and the API call.
"""
