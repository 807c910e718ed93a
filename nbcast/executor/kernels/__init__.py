"""The kernel machinery: pre-started kernels for runs, and the zygote that forks them.

- :mod:`~nbcast.executor.kernels.pool` — :class:`KernelPool`, pre-started and
  pre-warmed kernels, each serving exactly one run;
- :mod:`~nbcast.executor.kernels.process` — one kernel below the pool: its OS process
  (:class:`KernelProcess`), its readiness (:func:`wait_until_connected`), silent code in
  it (:func:`execute_silently`);
- :mod:`~nbcast.executor.kernels.zygote` — the zygote's client: a pre-imported process
  that forks kernels; :mod:`~nbcast.executor.kernels.zygote_server` its server side;
- :mod:`~nbcast.executor.kernels.forked` — forked kernels as jupyter_client sees them
  (a provisioner and a kernel manager);
- :mod:`~nbcast.executor.kernels.slot` — one kernel the pool brings up and down;
  :mod:`~nbcast.executor.kernels.demand` — how many kernels of each kind it keeps;
- :mod:`~nbcast.executor.kernels.sandboxed` — one kernel's sandbox as the machinery
  uses it: run folder, bubblewrap sandbox, cgroup, IPC sockets, environment.

The names below are imported on first use (PEP 562), not with the package: the
zygote's server runs as ``python -m nbcast.executor.kernels.zygote_server`` and must
start with the standard library only, and ``import nbcast.executor.kernels`` should
not pull in jupyter_client for a caller that only wants a submodule.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nbcast.executor.kernels.pool import (
        DEFAULT_WARMUP,
        DEFAULT_WARMUP_MODULES,
        KernelPool,
        PooledKernel,
        PoolStats,
    )
    from nbcast.executor.kernels.process import (
        KernelProcess,
        execute_silently,
        wait_until_connected,
        warmup_code,
    )

__all__ = [
    "DEFAULT_WARMUP",
    "DEFAULT_WARMUP_MODULES",
    "KernelPool",
    "KernelProcess",
    "PoolStats",
    "PooledKernel",
    "execute_silently",
    "wait_until_connected",
    "warmup_code",
]

_HOMES = {
    "DEFAULT_WARMUP": "pool",
    "DEFAULT_WARMUP_MODULES": "pool",
    "KernelPool": "pool",
    "PoolStats": "pool",
    "PooledKernel": "pool",
    "KernelProcess": "process",
    "execute_silently": "process",
    "wait_until_connected": "process",
    "warmup_code": "process",
}


def __getattr__(name: str) -> Any:
    """Import ``name`` from its submodule on first use (module docstring)."""
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
