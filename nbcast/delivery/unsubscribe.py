"""Unsubscribing: one-click tokens (RFC 8058) and the opt-outs they record.

Every message of a channel with
:attr:`~nbcast.delivery.channels.base.Channel.one_click_unsubscribe` (email) carries
``List-Unsubscribe: <https://…/nbcast/unsubscribe/<token>>`` and
``List-Unsubscribe-Post: List-Unsubscribe=One-Click``; the token is signed
(:class:`~nbcast.delivery.signing.Signer`, purpose ``unsubscribe``) and names the
tenant, the report, the channel and the recipient, so the endpoint needs no login and
nobody can unsubscribe someone else. That endpoint is the server extension's
``/nbcast/unsubscribe/<token>`` (a ``POST`` with ``List-Unsubscribe=One-Click``
records the opt-out; a ``GET`` shows a confirmation page and changes nothing;
``nbcast unsubscribe --token`` records the same by hand). ``nbcast unsubscribe``
records an opt-out from the command line (:mod:`nbcast.delivery.commands`). An
opt-out is a row in ``unsubscriptions`` — for one report (``scope`` = its name) or
all of a tenant's reports (``*``) — and the ledger suppresses later deliveries to
that recipient (SUPPRESSED ``unsubscribed``), leaving the evidence in the ledger.
"""

from __future__ import annotations

from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.orm import Session

from nbcast.db import insert_ignore
from nbcast.delivery.channels import channel_class
from nbcast.delivery.models import Unsubscription
from nbcast.delivery.signing import Signer
from nbcast.errors import ConfigError, LinkError
from nbcast.tenancy.models import Tenant

__all__ = [
    "ALL_REPORTS",
    "is_unsubscribed",
    "normalized",
    "record_unsubscribe",
    "unsubscribe_token",
    "unsubscribe_url",
    "use_token",
]

PURPOSE = "unsubscribe"

ALL_REPORTS = "*"
"""The ``scope`` of an opt-out from every report of the tenant."""


def normalized(channel: str, recipient: str) -> str:
    """How a recipient is compared: as its channel's
    :meth:`~nbcast.delivery.channels.base.Channel.normalize_recipient` says (email
    addresses without case: ``CFO@Example.com`` and ``cfo@example.com`` are one
    person's opt-out); exactly on a channel no registry knows."""
    try:
        kind = channel_class(channel)
    except ConfigError:
        return recipient
    return kind.normalize_recipient(recipient)


def unsubscribe_token(
    signer: Signer, *, tenant_id: int, scope: str, channel: str, recipient: str
) -> str:
    """A token that unsubscribes ``recipient`` from ``scope`` on ``channel``."""
    return signer.sign({"t": tenant_id, "s": scope, "c": channel, "r": recipient}, purpose=PURPOSE)


def unsubscribe_url(base_url: str, token: str) -> str:
    """The one-click URL for ``token`` (the server extension's endpoint)."""
    return f"{base_url.rstrip('/')}/nbcast/unsubscribe/{token}"


def record_unsubscribe(
    session: Session,
    *,
    tenant_id: int,
    scope: str,
    channel: str,
    recipient: str,
    source: str,
    now: datetime,
    actor: str | None = None,
) -> None:
    """Record an opt-out (idempotent: unsubscribing twice records it once), and audit
    it as done by ``actor`` (None: the recipient, with a one-click token)."""
    from nbcast.tenancy import audit

    row = {
        "tenant_id": tenant_id,
        "scope": scope,
        "channel": channel,
        "recipient": normalized(channel, recipient),
        "source": source,
        "created_at": now,
    }
    result = session.execute(insert_ignore(Unsubscription, [row], session.get_bind().dialect.name))
    if getattr(result, "rowcount", 0):
        audit.record(
            session,
            tenant_id,
            actor=actor or f"recipient:{row['recipient']}",
            action=audit.Action.unsubscribed,
            obj=f"subscription:{scope}",
            at=now,
            details={"channel": channel, "recipient": row["recipient"], "source": source},
        )


def use_token(
    session: Session,
    signer: Signer,
    token: str,
    now: datetime,
    *,
    source: str = "one-click",
    tenant_id: int | None = None,
) -> dict[str, object]:
    """Record the opt-out a one-click token carries; return what it named.
    :class:`~nbcast.errors.LinkError` for a forged or malformed token, or — when
    ``tenant_id`` is given (a command acting for a tenant) — a token of another
    tenant; nothing is recorded then."""
    if not isinstance(token, str) or len(token) > 4096:
        raise LinkError("malformed token")
    payload = signer.verify(token, purpose=PURPOSE)
    try:
        fields = {
            "tenant_id": int(payload["t"]),
            "scope": str(payload["s"]),
            "channel": str(payload["c"]),
            "recipient": str(payload["r"]),
        }
    except (KeyError, TypeError, ValueError):
        raise LinkError("malformed token") from None
    if tenant_id is not None and fields["tenant_id"] != tenant_id:
        raise LinkError("the token belongs to another tenant")
    if session.get(Tenant, fields["tenant_id"]) is None:  # e.g. a restored backup
        raise LinkError("the token's tenant no longer exists")
    record_unsubscribe(session, source=source, now=now, **fields)  # type: ignore[arg-type]
    return dict(fields)


def is_unsubscribed(
    session: Session, *, tenant_id: int, scope: str, channel: str, recipient: str
) -> bool:
    """Whether ``recipient`` opted out of ``scope`` (or of everything) on ``channel``."""
    return bool(
        session.scalar(
            sa.select(
                sa.exists().where(
                    Unsubscription.tenant_id == tenant_id,
                    Unsubscription.scope.in_((scope, ALL_REPORTS)),
                    Unsubscription.channel == channel,
                    Unsubscription.recipient == normalized(channel, recipient),
                )
            )
        )
    )
