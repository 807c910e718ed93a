"""Governance plane: tenants, users and (in later work) roles, audit, retention, cost.

Its tables are ``tenants`` and ``users``; a ``default`` tenant always exists.
"""

__all__: list[str] = []
