"""Tenancy: the layer under every plane — who exists, who may do what, and the
evidence of what they did.

- :mod:`~nbcast.tenancy.tenants` and :mod:`~nbcast.tenancy.members` — tenants,
  their quotas (within an operator's :mod:`~nbcast.tenancy.ceilings`), members and
  operators; :mod:`~nbcast.tenancy.roles` — the one check of who may do what;
- :mod:`~nbcast.tenancy.budgets` — each tenant's daily use, which the executor adds
  to and holds runs to;
- :mod:`~nbcast.tenancy.audit` — the hash-chained audit log every plane appends to,
  :mod:`~nbcast.tenancy.checkpoints` its signed checkpoints and
  :mod:`~nbcast.tenancy.audit_trail` its reads.

It imports no plane: the planes (definitions, scheduler, executor, delivery) stand
on it, and retention, SLA and cost — which read every plane — are the oversight
layer's (:mod:`nbcast.oversight`), above them. A ``default`` tenant always exists.

:data:`ACCOUNTING` is a switch for the benchmarks only (``benchmarks/claims.py`` and
``deliver.py`` run with it on and off to measure what governance costs on the hot
paths); nbcast itself never turns it off and nothing configures it.
"""

__all__ = ["ACCOUNTING"]

ACCOUNTING = True
"""Audit entries of the hot paths (deliveries, link openings), per-tenant daily usage
and budget checks (benchmarks set it False to measure their cost)."""
