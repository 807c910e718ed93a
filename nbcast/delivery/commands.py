"""The delivery plane's state changes people ask for, one function and one transaction
each: retry a run's failed deliveries, unsubscribe a recipient (by name, or with a
one-click token), revoke a signed link.

Every command takes the database, the clock and the :class:`~nbcast.access.Caller`
and enforces the caller's tenant itself: a run or a link of another tenant is "not
found" and nothing is written. The CLI (``nbcast deliver``, ``nbcast unsubscribe``,
``nbcast links revoke``) and the server call these, and nothing else, to change
these rows — so a check added here (roles, audit) holds for every face.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from nbcast.access import Caller
from nbcast.clock import Clock
from nbcast.db import Database
from nbcast.definitions.models import ReportDefinition
from nbcast.delivery.channels import channels
from nbcast.delivery.ledger.rows import retry_failed
from nbcast.delivery.links import revoke_link as revoke_signed_link
from nbcast.delivery.queries import MAX_ID, require_run
from nbcast.delivery.signing import Signer
from nbcast.delivery.unsubscribe import normalized, record_unsubscribe, use_token
from nbcast.errors import ConfigError, UnknownDefinitionError
from nbcast.limits import clip
from nbcast.tenancy import audit
from nbcast.tenancy.roles import Role, require

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from nbcast.tenancy.models import Tenant

__all__ = [
    "MAX_RECIPIENT_CHARS",
    "MAX_SCOPE_CHARS",
    "Unsubscribed",
    "retry_failed_deliveries",
    "revoke_link",
    "unsubscribe_recipient",
    "unsubscribe_with_token",
]

MAX_RECIPIENT_CHARS = 512
"""The longest recipient an opt-out names (as a subscription's ``to``)."""

MAX_SCOPE_CHARS = 128
"""The longest report name an opt-out names (as a definition's name)."""

_MAX_SOURCE_CHARS = 32


@dataclass(frozen=True, kw_only=True)
class Unsubscribed:
    """An opt-out that was recorded (or already was: recording is idempotent)."""

    tenant: str
    scope: str
    """The report's name, or ``*`` for every report of the tenant."""
    channel: str
    recipient: str
    """As compared (the channel's normal form: email addresses in lower case)."""
    source: str
    """``cli``, ``one-click``, ``link``, … : where the opt-out came from."""

    def to_json(self) -> dict[str, Any]:
        """The JSON form."""
        return {
            "tenant": self.tenant,
            "scope": self.scope,
            "channel": self.channel,
            "recipient": self.recipient,
            "source": self.source,
        }


def retry_failed_deliveries(db: Database, clock: Clock, caller: Caller, run_id: int) -> int:
    """Put the FAILED deliveries of one of the caller's runs back to PENDING with
    fresh attempts, and render its FAILED renditions again; SENT ones are never
    touched. Returns how many deliveries. A run of another tenant is not found
    (:class:`~nbcast.errors.DeliveryError`)."""
    now = clock.now()
    with db.session() as session:
        tenant = require(session, caller, Role.author, "retrying deliveries", now).tenant
        require_run(session, tenant, run_id)
        retried = retry_failed(session, run_id, now, tenant_id=tenant.id)
        audit.record(
            session,
            tenant.id,
            actor=caller.user,
            action=audit.Action.deliveries_retried,
            obj=f"run:{run_id}",
            at=now,
            details={"deliveries": retried},
        )
        return retried


def unsubscribe_recipient(
    db: Database,
    clock: Clock,
    caller: Caller,
    *,
    report: str,
    channel: str,
    recipient: str,
    source: str = "cli",
) -> Unsubscribed:
    """Stop delivering ``report`` (a definition's name, or ``*`` for all) of the
    caller's tenant to ``recipient`` on ``channel`` (any channel the registry knows);
    later deliveries are SUPPRESSED ``unsubscribed``. Idempotent.

    A ``report`` that names no definition of the caller's tenant is refused
    (:class:`~nbcast.errors.UnknownDefinitionError`) and nothing is written: an
    opt-out for a misspelt name would be recorded, shown as done, and suppress
    nothing."""
    _check_text("--report", report, MAX_SCOPE_CHARS)
    _check_text("--to", recipient, MAX_RECIPIENT_CHARS)
    _check_text("source", source, _MAX_SOURCE_CHARS)
    if not recipient.strip():
        raise ConfigError("--to: give the recipient to stop sending to")
    known = channels.names()
    if channel not in known:
        raise ConfigError(f"--channel: {clip(channel)} is not one of {'|'.join(known)}")
    now = clock.now()
    with db.session() as session:
        tenant = require(session, caller, Role.author, "unsubscribing a recipient", now).tenant
        if report != "*":
            _require_definition(session, tenant, report)
        record_unsubscribe(
            session,
            tenant_id=tenant.id,
            scope=report,
            channel=channel,
            recipient=recipient,
            source=source,
            now=now,
            actor=caller.user,
        )
        return Unsubscribed(
            tenant=tenant.name,
            scope=report,
            channel=channel,
            recipient=normalized(channel, recipient),
            source=source,
        )


def unsubscribe_with_token(
    db: Database,
    clock: Clock,
    caller: Caller | None,
    token: str,
    *,
    source: str,
    signer: Signer,
) -> Unsubscribed:
    """Record the opt-out a one-click token carries (signed by ``signer``).

    With ``caller`` None — the public one-click endpoint, where nobody is logged in —
    it acts in the token's own tenant; with a caller, only within the caller's tenant
    (a token of another tenant is refused and nothing is recorded). A forged,
    malformed or foreign token is a :class:`~nbcast.errors.LinkError`."""
    _check_text("source", source, _MAX_SOURCE_CHARS)
    with db.session() as session:
        tenant = (
            None
            if caller is None
            else require(session, caller, Role.author, "unsubscribing a recipient").tenant
        )
        named = use_token(
            session,
            signer,
            token,
            clock.now(),
            source=source,
            tenant_id=None if tenant is None else tenant.id,
        )
        tenant_name = tenant.name if tenant is not None else _tenant_name(session, named)
        return Unsubscribed(
            tenant=tenant_name,
            scope=str(named["scope"]),
            channel=str(named["channel"]),
            recipient=normalized(str(named["channel"]), str(named["recipient"])),
            source=source,
        )


def revoke_link(db: Database, clock: Clock, caller: Caller, link_id: int) -> bool:
    """Revoke a signed link of the caller's tenant: it stops opening at once. False
    when there is no such link in the tenant (one of another tenant is not found) or
    it was already revoked."""
    if not isinstance(link_id, int) or not 0 < link_id <= MAX_ID:
        return False
    now = clock.now()
    with db.session() as session:
        tenant = require(session, caller, Role.author, "revoking a link", now).tenant
        revoked = revoke_signed_link(session, link_id, now, tenant_id=tenant.id)
        if revoked:
            audit.record(
                session,
                tenant.id,
                actor=caller.user,
                action=audit.Action.link_revoked,
                obj=f"link:{link_id}",
                at=now,
            )
        return revoked


def _check_text(what: str, value: str, limit: int) -> None:
    if not isinstance(value, str) or len(value) > limit or "\x00" in value:
        raise ConfigError(f"{what} is at most {limit} characters, without NUL")


def _require_definition(session: Session, tenant: Tenant, name: str) -> None:
    known = session.scalar(
        sa.select(ReportDefinition.id).where(
            ReportDefinition.tenant_id == tenant.id, ReportDefinition.name == name
        )
    )
    if known is None:
        raise UnknownDefinitionError(
            f"--report: no definition named {clip(name)} in tenant {tenant.name!r}"
        )


def _tenant_name(session: Any, named: dict[str, object]) -> str:
    from nbcast.tenancy.models import Tenant

    tenant = session.get(Tenant, named["tenant_id"])
    return "" if tenant is None else str(tenant.name)
