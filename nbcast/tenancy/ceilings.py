"""Quota ceilings: what an operator lets a tenant's admins set its quotas to.

A tenant's admin changes its quotas (``nbcast tenants set-quota``, the API's
``PATCH /tenants/{t}/quota``) — but only **within its ceilings**, which operators
alone set (``nbcast tenants set-ceiling``, ``PUT /tenants/{t}/ceilings``). Before
ceilings, an admin could raise the tenant's share to a million and remove both of
its daily budgets: a tenant's admin is a tenant's person, and the installation's
capacity is not theirs to give.

Decisions:

- **Every quota has a ceiling** (:data:`CEILING_FIELDS`: concurrency, CPUs, memory,
  processes, run timeout, attempts, share, both daily budgets). A tenant's ceilings
  start as its quotas when it is created (and, for tenants made before ceilings, as
  their quotas then: migration 0016): an admin may lower a quota and raise it back,
  never past what an operator gave.
- **A budget's ceiling is a number or** ``None``. A number: the admin may set the
  budget up to it, and may not remove it (no budget means unlimited, which is above
  any number). ``None``: the operator allows no budget at all.
- **Operators are not held by ceilings** when they change quotas themselves. When an
  operator lowers a ceiling below the tenant's quota, the quota comes down to it in
  the same transaction (a ceiling the quota already exceeds would mean nothing), and
  the audit entry says both.
- **Refusals name the quota, its ceiling and who may raise it**, and write nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nbcast.errors import AccessDeniedError, ConfigError
from nbcast.tenancy.models import Tenant

__all__ = ["CEILING_FIELDS", "ceilings_of", "check_within", "lower_to_ceilings"]

CEILING_FIELDS = (
    "max_concurrent_runs",
    "cpus_per_run",
    "memory_mb_per_run",
    "run_timeout_s",
    "max_attempts",
    "share",
    "max_processes_per_run",
    "budget_warehouse_bytes_per_day",
    "budget_cpu_s_per_day",
)
"""The quotas that have a ceiling (all of them)."""

_BUDGETS = frozenset({"budget_warehouse_bytes_per_day", "budget_cpu_s_per_day"})


def ceilings_of(tenant: Tenant) -> dict[str, Any]:
    """The tenant's ceilings: the stored ones, or (never set) its quotas."""
    stored = tenant.quota_ceilings or {}
    return {
        field: stored[field] if field in stored else getattr(tenant, field)
        for field in CEILING_FIELDS
    }


def check_within(tenant: Tenant, values: Mapping[str, Any]) -> None:
    """Refuse (:class:`AccessDeniedError`) quota ``values`` above the tenant's ceilings,
    or the removal of a budget that has a ceiling (module docstring)."""
    ceilings = ceilings_of(tenant)
    for field, value in values.items():
        if field not in ceilings:
            continue
        ceiling = ceilings[field]
        if ceiling is None:
            continue
        if value is None and field in _BUDGETS:
            raise AccessDeniedError(
                f"{field} cannot be removed: its ceiling is {ceiling:,}; only an operator "
                "can lift it (nbcast tenants set-ceiling)"
            )
        if value is not None and value > ceiling:
            raise AccessDeniedError(
                f"{field} {value:,} is above the tenant's ceiling of {ceiling:,}; only an "
                "operator can raise it (nbcast tenants set-ceiling)"
            )


def lower_to_ceilings(tenant: Tenant, ceilings: Mapping[str, Any]) -> dict[str, Any]:
    """Set ``ceilings`` on ``tenant`` (operators only: the caller checks) and bring
    every quota above its new ceiling down to it; return the quotas it changed."""
    unknown = sorted(set(ceilings) - set(CEILING_FIELDS))
    if unknown:
        raise ConfigError(f"unknown quota {unknown[0][:64]!r} (known: {', '.join(CEILING_FIELDS)})")
    merged = {**ceilings_of(tenant), **ceilings}
    lowered: dict[str, Any] = {}
    for field, ceiling in ceilings.items():
        if ceiling is None:
            if field not in _BUDGETS:
                raise ConfigError(f"{field} needs a ceiling")
            continue
        current = getattr(tenant, field)
        if current is None or current > ceiling:  # no budget is above any budget
            setattr(tenant, field, ceiling)
            lowered[field] = ceiling
    tenant.quota_ceilings = merged
    return lowered
