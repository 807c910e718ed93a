"""Give people roles in a test's database directly (unchecked and unaudited), for
tests whose subject is not the roles themselves: several people acting in one tenant."""

from __future__ import annotations

import sqlalchemy as sa

from nbcast.db import Database
from nbcast.tenancy.models import User
from nbcast.tenancy.tenants import ensure_tenant


def grant(db: Database, tenant: str, user: str, role: str = "author") -> None:
    """Make ``user`` a member of ``tenant`` (created if missing) with ``role``."""
    with db.session() as session:
        owner = ensure_tenant(session, tenant)
        row = session.scalar(sa.select(User).where(User.tenant_id == owner.id, User.name == user))
        if row is None:
            session.add(User(tenant_id=owner.id, name=user, role=role, added_by="test"))
        else:
            row.role = role


def grant_url(url: str, tenant: str, user: str, role: str = "author") -> None:
    """:func:`grant` on the database at ``url``."""
    db = Database.open(url)
    try:
        grant(db, tenant, user, role)
    finally:
        db.dispose()
