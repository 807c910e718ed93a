"""Signed, expiring, revocable links to rendered reports.

A link is a row in ``signed_links`` (what it points to, for whom, until when, whether
revoked) and a token that names the row, signed with :class:`~nbcast.delivery.signing.Signer`
(purpose ``link``). :func:`verify_link` accepts a token only when its signature
verifies with a configured key, the row exists and matches the token, it has not
expired and it has not been revoked — each failure a
:class:`~nbcast.errors.LinkError` saying which. The URL is
``<base URL>/nbcast/links/<token>``: it is served by the server extension's
``/nbcast/links/<token>`` endpoint, which checks it with :func:`verify_link` and
records every opening (:mod:`nbcast.delivery.link_opens`).
Revoking goes through :func:`nbcast.delivery.commands.revoke_link`, which scopes it to
the caller's tenant.

A delivery hands its links out through :func:`delivery_link`: each attempt at one
ledger row (a retry after a receiver's 500, a timeout, a worker that died) gives the
link its first attempt made, token and all, for as long as that link can be opened.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from nbcast.delivery.models import SignedLink
from nbcast.delivery.signing import Signer
from nbcast.errors import LinkError

__all__ = [
    "IssuedLink",
    "create_link",
    "delivery_link",
    "link_url",
    "revoke_link",
    "verify_link",
]

PURPOSE = "link"


@dataclass(frozen=True)
class IssuedLink:
    """A link handed out: its row id, token and URL."""

    id: int
    token: str
    url: str
    expires_at: datetime
    reused: bool = False
    """Made by an earlier attempt of the same delivery and handed out again
    (:func:`delivery_link`)."""


def link_url(base_url: str, token: str) -> str:
    """Where a link's token is served."""
    return f"{base_url.rstrip('/')}/nbcast/links/{token}"


def create_link(
    session: Session,
    signer: Signer,
    *,
    tenant_id: int,
    run_id: int,
    recipient: str,
    sha256: str,
    filename: str,
    media_type: str,
    now: datetime,
    ttl: timedelta,
    base_url: str,
    delivery_id: int | None = None,
) -> IssuedLink:
    """Record a link to the artifact ``sha256`` for ``recipient``, valid for ``ttl``."""
    if ttl <= timedelta(0):
        raise LinkError("a link needs a positive lifetime")
    row = SignedLink(
        tenant_id=tenant_id,
        run_id=run_id,
        delivery_id=delivery_id,
        recipient=recipient,
        sha256=sha256,
        filename=filename,
        media_type=media_type,
        key_id=signer.current,
        created_at=now,
        expires_at=now + ttl,
    )
    session.add(row)
    session.flush()
    from nbcast.tenancy import audit

    audit.record(
        session,
        tenant_id,
        actor="delivery-worker",
        action=audit.Action.link_created,
        obj=f"link:{row.id}",
        at=now,
        details={"run": run_id, "recipient": recipient, "expires_at": row.expires_at.isoformat()},
    )
    token = signer.sign(_claims(row.id, sha256), purpose=PURPOSE)
    return IssuedLink(row.id, token, link_url(base_url, token), row.expires_at)


def _claims(link_id: int, sha256: str) -> dict[str, Any]:
    """What a link's token carries: the row, and the file's digest (a prefix)."""
    return {"l": link_id, "a": sha256[:16]}


def delivery_link(
    session: Session,
    signer: Signer,
    *,
    tenant_id: int,
    run_id: int,
    delivery_id: int,
    recipient: str,
    sha256: str,
    filename: str,
    media_type: str,
    now: datetime,
    ttl: timedelta,
    base_url: str,
) -> IssuedLink:
    """The link delivery ``delivery_id`` (a ledger row) hands out for the file
    ``sha256``: the one an earlier attempt of that row made, if it can still be
    opened, else a new one (:func:`create_link`).

    Idempotent per ledger row, so a retry — after a receiver answered 500, after a
    timeout, after a worker died — sends the token the first attempt sent: a
    receiver that got both holds one link, and a delivery leaves one live link per
    file, not one per attempt. The earlier link is handed out again while it could
    be opened — not revoked, not expired, signed by a key still configured — signed
    again with that same key, which gives the very same token (signing is
    deterministic); it keeps its own expiry, and nothing is audited (nothing is
    made). Otherwise a fresh link is made and audited like any: a link someone
    revoked is never revived, and a retry never sends a link that cannot be opened;
    the revoked or expired one stays as it was. The same file under another digest (a
    late, bannered rendition) is another file, with a link of its own.
    """
    earlier = session.scalars(
        sa.select(SignedLink)
        .where(
            SignedLink.run_id == run_id,
            SignedLink.tenant_id == tenant_id,
            SignedLink.delivery_id == delivery_id,
            SignedLink.sha256 == sha256,
            SignedLink.filename == filename,
            SignedLink.revoked_at.is_(None),
            SignedLink.expires_at > now,
        )
        .order_by(SignedLink.id.desc())
    )
    for row in earlier:
        if signer.has_key(row.key_id):
            token = signer.sign(_claims(row.id, sha256), purpose=PURPOSE, key_id=row.key_id)
            return IssuedLink(row.id, token, link_url(base_url, token), row.expires_at, reused=True)
    return create_link(
        session,
        signer,
        tenant_id=tenant_id,
        run_id=run_id,
        delivery_id=delivery_id,
        recipient=recipient,
        sha256=sha256,
        filename=filename,
        media_type=media_type,
        now=now,
        ttl=ttl,
        base_url=base_url,
    )


def verify_link(session: Session, signer: Signer, token: str, now: datetime) -> SignedLink:
    """The link ``token`` names, if it may be opened now (module docstring)."""
    payload = signer.verify(token, purpose=PURPOSE)
    link_id, digest = payload.get("l"), payload.get("a")
    if not isinstance(link_id, int) or not isinstance(digest, str):
        raise LinkError("malformed token")
    row = session.get(SignedLink, link_id)
    if row is None or not row.sha256.startswith(digest):
        raise LinkError("the link does not exist")
    if row.revoked_at is not None:
        raise LinkError("the link has been revoked")
    if now >= row.expires_at:
        raise LinkError("the link has expired")
    return row


def revoke_link(
    session: Session, link_id: int, now: datetime, *, tenant_id: int | None = None
) -> bool:
    """Revoke a link (of ``tenant_id``'s, when given); False if there is no such link
    or it was already revoked."""
    query = sa.update(SignedLink).where(SignedLink.id == link_id, SignedLink.revoked_at.is_(None))
    if tenant_id is not None:
        query = query.where(SignedLink.tenant_id == tenant_id)
    result = session.execute(query.values(revoked_at=now))
    return bool(getattr(result, "rowcount", 0))
