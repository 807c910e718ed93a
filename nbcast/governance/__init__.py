"""Governance plane: tenants, members and roles, the audit log, retention, cost and
budgets, SLA monitoring.

- :mod:`~nbcast.governance.tenants` and :mod:`~nbcast.governance.members` — tenants,
  their quotas, members and operators; :mod:`~nbcast.governance.roles` — the one
  check of who may do what;
- :mod:`~nbcast.governance.audit` — the hash-chained audit log;
- :mod:`~nbcast.governance.retention` — what is kept, and for how long;
- :mod:`~nbcast.governance.budgets` and :mod:`~nbcast.governance.cost` — what runs
  use, daily budgets, cost reports;
- :mod:`~nbcast.governance.sla` — delivery promises and their misses;
- :mod:`~nbcast.governance.jobs` — the periodic work the scheduler service runs.

A ``default`` tenant always exists.

:data:`ACCOUNTING` is a switch for the benchmarks only (``benchmarks/claims.py`` and
``deliver.py`` run with it on and off to measure what governance costs on the hot
paths); nbcast itself never turns it off and nothing configures it.
"""

__all__ = ["ACCOUNTING"]

ACCOUNTING = True
"""Audit entries of the hot paths (deliveries, link openings), per-tenant daily usage
and budget checks (benchmarks set it False to measure their cost)."""
