"""The environment a report's kernel starts with: the worker's, without nbcast's secrets.

A kernel runs a tenant's code, which can print ``os.environ`` into its report. The
worker's environment holds nbcast's own credentials — ``NBCAST_SMTP_URL`` (with its
password), ``NBCAST_WEBHOOK_SECRET``, ``NBCAST_SLACK_TOKEN``, ``NBCAST_SIGNING_KEYS``,
``NBCAST_DATABASE_URL`` (with its password) — so every kernel nbcast starts gets
:func:`kernel_environment` instead: pooled kernels, kernels forked from a zygote (and
the zygote itself, whose imports run before any kernel exists), kernels started
without a pool, and all of these inside Ray workers.

What a kernel sees:

- the worker's environment, minus every ``NBCAST_*`` variable except those in
  :data:`KERNEL_VARIABLES` (``NBCAST_LAKE``, the example reports' Parquet lake), and
  minus :data:`SECRET_VARIABLES` (``PGPASSWORD``, libpq's password, which nbcast's
  PostgreSQL connection reads when its URL has none; the Jupyter server's token);
- what Jupyter adds: ``JPY_PARENT_PID`` (and the kernelspec's own ``env``);
- ``NBCAST_RUN_CONTEXT``, set by the run's setup code: the path of the run's context
  file (the tenant's warehouse connections and limits);
- in a forked kernel, ``MPLBACKEND`` when unset (as ipykernel sets it) and what the
  zygote's imports put into the environment.

This is what a kernel's environment holds; what it can *reach* is the sandbox's
business (:mod:`nbcast.sandbox`): a sandboxed kernel runs as its tenant's own user and
cannot see the worker's processes or files at all.

Only the standard library (the zygote's server imports this before anything else).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

__all__ = ["KERNEL_VARIABLES", "SECRET_VARIABLES", "is_withheld", "kernel_environment"]

KERNEL_VARIABLES = frozenset({"NBCAST_LAKE"})
"""The ``NBCAST_*`` variables a kernel keeps."""

SECRET_VARIABLES = frozenset(
    {
        "PGPASSWORD",
        "JUPYTER_TOKEN",
        "JUPYTERHUB_API_TOKEN",
        "JPY_API_TOKEN",
        "RAY_AUTH_TOKEN",
    }
)
"""Other variables that hold a secret nbcast or its server uses — libpq's password,
the Jupyter server's and JupyterHub's tokens, Ray's cluster token; kernels do not get
them (a worker started beside the server, as its embedded services are, has them)."""


def is_withheld(name: str) -> bool:
    """Whether variable ``name`` is kept from kernels (module docstring)."""
    if name.upper().startswith("NBCAST_"):
        return name not in KERNEL_VARIABLES
    return name.upper() in SECRET_VARIABLES


def kernel_environment(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """``environ`` (default: this process's) without what kernels must not see."""
    source = os.environ if environ is None else environ
    return {name: value for name, value in source.items() if not is_withheld(name)}
