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

**Accounting** on the hot paths — the audit entries of deliveries, each tenant's daily
usage and the budget checks of a claim — is a setting of the objects that do it
(``RunQueue(accounting=…)``, ``Ledger(accounting=…)``), on unless told otherwise:
nbcast's services never turn it off; the benchmarks do, to measure what it costs.
"""

__all__: list[str] = []
