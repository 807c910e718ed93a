"""Oversight: what watches every plane from above and keeps the installation honest —
retention (:mod:`~nbcast.oversight.retention`), the SLA monitor and its alerts
(:mod:`~nbcast.oversight.sla`, :mod:`~nbcast.oversight.sla_alerts`), cost
(:mod:`~nbcast.oversight.cost`) and the periodic jobs that run them
(:mod:`~nbcast.oversight.jobs`) in a service of their own
(:mod:`~nbcast.oversight.service`, ``nbcast oversight``).

It reads the planes' rows and writes only its own tables (and, for retention, deletes
what a tenant's policy lets go); no plane imports it.
"""

__all__: list[str] = []
