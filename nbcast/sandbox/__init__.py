"""The kernel sandbox: every attempt's kernel runs as its tenant's own user, in
namespaces that show it only what its run needs.

A report's code is hostile until proven otherwise. The worker, its database, the
signing keys, the services' environments and the server's tokens are on one side;
each attempt's kernel is on the other:

- :mod:`~nbcast.sandbox.policy` — what one attempt's sandbox is (:class:`SandboxSpec`:
  the tenant's uid and gid, network setting, memory, processes, lake scope) and the
  installation's switch (``NBCAST_SANDBOX``, ``nbcast worker --sandbox``);
- :mod:`~nbcast.sandbox.view` — the files a sandbox shows, and those it hides even
  under a folder it shows;
- :mod:`~nbcast.sandbox.launcher` — :class:`Sandbox`, built by bubblewrap around a
  stub the kernel joins;
- :mod:`~nbcast.sandbox.enter` — the join, in the process that becomes the kernel
  (standard library only: the zygote imports it);
- :mod:`~nbcast.sandbox.limits` — processes and memory: cgroups where the worker may
  make them, resource limits always;
- :mod:`~nbcast.sandbox.support` — whether, and how, this machine can sandbox.

The names below are imported on first use (PEP 562): the zygote imports
:mod:`nbcast.sandbox.enter` and must not pull in anything else.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nbcast.sandbox.launcher import Sandbox, SandboxError
    from nbcast.sandbox.policy import Network, SandboxSetting, SandboxSpec
    from nbcast.sandbox.support import Support, sandbox_support

__all__ = [
    "Network",
    "Sandbox",
    "SandboxError",
    "SandboxSetting",
    "SandboxSpec",
    "Support",
    "sandbox_support",
]

_HOMES = {
    "Network": "policy",
    "SandboxSetting": "policy",
    "SandboxSpec": "policy",
    "Sandbox": "launcher",
    "SandboxError": "launcher",
    "Support": "support",
    "sandbox_support": "support",
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
