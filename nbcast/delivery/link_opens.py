"""Opening a signed link, and the record of every opening (``link_opens``).

:func:`open_link` is what the server's public ``/nbcast/links/<token>`` endpoint
calls: it checks the token by the rules of :func:`~nbcast.delivery.links.verify_link`
(the signature with a configured key, then the row: it exists, it has not been
revoked, it has not expired) and, when the link may be opened, records the opening in
the same transaction and says which stored file to serve. A refusal is a
:class:`LinkRefused` whose :attr:`~LinkRefused.kind` tells the server which answer it
deserves — ``forbidden`` (tampered, malformed, or signed by an unknown or retired
key), ``not_found`` (a well-signed token for a link that no longer exists) or ``gone``
(expired, revoked, or its file is no longer stored) — and nothing is recorded then.

**What an opening records, and why not more.** The time, the link (and through it
the run, delivery and recipient), the user agent cut to
:data:`MAX_USER_AGENT_CHARS`, and the client's *network*, not its address: IPv4
addresses are kept to their /24, IPv6 addresses to their /48 (the way web analytics
anonymise addresses). That is enough to tell "opened from the office network" from
"opened from somewhere else", and to see a mail scanner fetch a link, without
keeping a personal address that could place one reader. A hash of the whole address
was considered and rejected: 2³² IPv4 addresses are hashed in seconds, so it would
hide nothing. Behind a reverse proxy the address is the one a trusted proxy forwarded
(``ServerApp.trust_xheaders`` and ``NbcastApp.trusted_proxies``:
:mod:`nbcast.server_extension.forwarded`); a client's own forwarding headers are not
believed, so the network recorded is the one the request really came from.

:func:`opens_of_run` lists a run's openings for the run page;
:func:`nbcast.delivery.queries.open_counts` counts them per link for ``nbcast links
list``. Both are scoped to the caller's tenant.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

import sqlalchemy as sa
from sqlalchemy.orm import Session

from nbcast.access import Caller
from nbcast.artifacts import ArtifactStore
from nbcast.clock import Clock, format_instant
from nbcast.db import Database, UTCDateTime
from nbcast.definitions.recipients import disclosure
from nbcast.delivery.links import PURPOSE
from nbcast.delivery.models import LinkOpen, SignedLink
from nbcast.delivery.queries import require_run
from nbcast.delivery.signing import Signer
from nbcast.errors import LinkError
from nbcast.tenancy import audit
from nbcast.tenancy.roles import readable_tenant

__all__ = [
    "MAX_OPENS_LISTED",
    "MAX_TOKEN_CHARS",
    "MAX_USER_AGENT_CHARS",
    "LinkRefused",
    "OpenRecord",
    "OpenedLink",
    "network_of",
    "open_link",
    "opens_of_run",
    "record_open",
]

MAX_USER_AGENT_CHARS = 256
"""The longest user agent kept (longer ones are cut)."""

MAX_TOKEN_CHARS = 4096
"""The longest token looked at (a real one is about 80 characters)."""

MAX_OPENS_LISTED = 1_000
"""The most openings :func:`opens_of_run` returns (the newest)."""

Refusal = Literal["forbidden", "not_found", "gone"]


class LinkRefused(LinkError):
    """A link that may not be opened, and what kind of refusal it is (module doc)."""

    def __init__(self, kind: Refusal, message: str) -> None:
        super().__init__(message)
        self.kind: Refusal = kind


@dataclass(frozen=True, kw_only=True)
class OpenedLink:
    """A link that was opened: which stored file to serve, and as what."""

    link_id: int
    sha256: str
    filename: str
    media_type: str


@dataclass(frozen=True, kw_only=True)
class OpenRecord:
    """One recorded opening of a link."""

    link_id: int
    run_id: int
    delivery_id: int | None
    recipient: str
    filename: str
    opened_at: datetime
    network: str
    user_agent: str

    def to_json(self) -> dict[str, Any]:
        """The JSON form (instants in ISO 8601 UTC with ``Z``)."""
        return {
            "link": self.link_id,
            "run": self.run_id,
            "delivery": self.delivery_id,
            "recipient": self.recipient,
            "file": self.filename,
            "opened_at": format_instant(self.opened_at),
            "network": self.network,
            "user_agent": self.user_agent,
        }


def network_of(address: str) -> str:
    """The network an address is kept as (module docstring): ``203.0.113.0/24``,
    ``2001:db8:1::/48``; ``unknown`` for anything that is not an IP address (a
    UNIX socket, a proxy that sent nonsense)."""
    try:
        ip = ipaddress.ip_address(address.strip().split("%", 1)[0])
    except ValueError:
        return "unknown"
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    prefix = 24 if ip.version == 4 else 48
    return str(ipaddress.ip_network(f"{ip}/{prefix}", strict=False))


def _user_agent(text: str | None) -> str:
    """The user agent, printable and at most :data:`MAX_USER_AGENT_CHARS` long."""
    cleaned = "".join(c if c.isprintable() else " " for c in (text or ""))
    return cleaned[:MAX_USER_AGENT_CHARS]


def record_open(
    session: Session, link: SignedLink, now: datetime, *, address: str, user_agent: str | None
) -> None:
    """Record that ``link`` was opened now from ``address`` (kept as its network)."""
    session.add(
        LinkOpen(
            tenant_id=link.tenant_id,
            link_id=link.id,
            run_id=link.run_id,
            delivery_id=link.delivery_id,
            opened_at=now,
            network=network_of(address),
            user_agent=_user_agent(user_agent),
        )
    )


def _refuse_token(signer: Signer, token: str) -> tuple[int, str]:
    """The link id and file digest a well-signed token names; LinkRefused
    ``forbidden`` for a malformed, tampered or unknown-key token."""
    if not isinstance(token, str) or len(token) > MAX_TOKEN_CHARS:
        raise LinkRefused("forbidden", "malformed token")
    try:
        payload = signer.verify(token, purpose=PURPOSE)
    except LinkError as exc:
        raise LinkRefused("forbidden", str(exc)) from None
    link_id, digest = payload.get("l"), payload.get("a")
    if not isinstance(link_id, int) or not isinstance(digest, str):
        raise LinkRefused("forbidden", "malformed token")
    return link_id, digest


_LINKS = SignedLink.__table__


def open_link(
    db: Database,
    clock: Clock,
    signer: Signer,
    store: ArtifactStore,
    token: str,
    *,
    address: str,
    user_agent: str | None,
) -> OpenedLink:
    """Open the link ``token`` names: check it, check its file is still stored, and
    record the opening — one transaction; :class:`LinkRefused` (nothing recorded)
    when it may not be opened. No login: the signed token is the authority.

    This is the public endpoint's hot path, so it is written on SQLAlchemy Core (one
    signature check, one SELECT, one INSERT) with the same rules as
    :func:`~nbcast.delivery.links.verify_link`, and on PostgreSQL its commit does not
    wait for the WAL to reach the disk: an opening is evidence of reading, not of
    delivery, and a PostgreSQL crash may lose the last fraction of a second of
    openings, never the database's consistency."""
    link_id, digest = _refuse_token(signer, token)
    now = clock.now()
    network, agent = network_of(address), _user_agent(user_agent)
    if db.engine.dialect.name == "postgresql":
        row, opened = _open_postgres(db, link_id, digest, now, network, agent)
    else:
        row, opened = _open_portable(db, link_id, digest, now, network, agent)
    if row is None or not row.sha256.startswith(digest):
        raise LinkRefused("not_found", "the link does not exist")
    if not opened:
        if row.revoked_at is not None:
            raise LinkRefused("gone", "the link has been revoked")
        raise LinkRefused("gone", "the link has expired")
    if not store.exists(row.sha256):
        _forget_open(db, opened)
        raise LinkRefused("gone", "the report's file is no longer stored")
    return OpenedLink(
        link_id=link_id, sha256=row.sha256, filename=row.filename, media_type=row.media_type
    )


_OPEN_POSTGRES = sa.text(
    """
    WITH link AS (
        SELECT tenant_id, run_id, delivery_id, sha256, filename, media_type,
               revoked_at, expires_at
        FROM signed_links WHERE id = :link_id
    ), opened AS (
        INSERT INTO link_opens (tenant_id, link_id, run_id, delivery_id, opened_at,
                                network, user_agent)
        SELECT tenant_id, :link_id, run_id, delivery_id, :now, :network, :agent
        FROM link
        WHERE revoked_at IS NULL AND expires_at > :now AND starts_with(sha256, :digest)
        RETURNING id, tenant_id
    ), audited AS (
        SELECT nbcast_audit_append(tenant_id, :now, 'link', 'link.opened', :object, :details)
        FROM opened
    )
    SELECT link.*, (SELECT id FROM opened) AS open_id,
           (SELECT count(*) FROM audited) AS audited FROM link
    """
).columns(revoked_at=UTCDateTime(), expires_at=UTCDateTime())


def _open_postgres(
    db: Database, link_id: int, digest: str, now: datetime, network: str, agent: str
) -> tuple[Any, int | None]:
    """Check, record and audit in one statement, one round trip, committed on its own
    without waiting for the WAL flush (:attr:`Database.telemetry_engine`)."""
    with db.telemetry_engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        row = conn.execute(
            _OPEN_POSTGRES,
            {
                "link_id": link_id,
                "now": now,
                "network": network,
                "agent": agent,
                "digest": digest,
                "object": f"link:{link_id}",
                "details": _audit_details(network),
            },
        ).one_or_none()
    return row, (row.open_id if row is not None else None)


def _open_portable(
    db: Database, link_id: int, digest: str, now: datetime, network: str, agent: str
) -> tuple[Any, int | None]:
    """Check, then record, in one transaction (SQLite has no INSERT in a WITH)."""
    links = SignedLink.__table__
    with db.engine.begin() as conn:
        row = conn.execute(
            sa.select(
                links.c.tenant_id,
                links.c.run_id,
                links.c.delivery_id,
                links.c.sha256,
                links.c.filename,
                links.c.media_type,
                links.c.revoked_at,
                links.c.expires_at,
            ).where(links.c.id == link_id)
        ).one_or_none()
        if (
            row is None
            or row.revoked_at is not None
            or now >= row.expires_at
            or not row.sha256.startswith(digest)
        ):
            return row, None
        inserted = conn.execute(
            sa.insert(LinkOpen)
            .values(
                tenant_id=row.tenant_id,
                link_id=link_id,
                run_id=row.run_id,
                delivery_id=row.delivery_id,
                opened_at=now,
                network=network,
                user_agent=agent,
            )
            .returning(LinkOpen.id)
        ).scalar_one()
        audit.append(
            conn,
            [
                audit.entry(
                    row.tenant_id,
                    actor="link",
                    action=audit.Action.link_opened,
                    obj=f"link:{link_id}",
                    at=now,
                    details={"network": _ascii(network)},
                )
            ],
        )
    return row, int(inserted)


def _ascii(text: str) -> str:
    return text.encode("ascii", "replace").decode("ascii")


def _audit_details(network: str) -> str:
    """The opening's audit details as the canonical text the audit log hashes (ASCII:
    the database hashes it on PostgreSQL; the user agent stays in ``link_opens``)."""
    return audit.details_text({"network": _ascii(network)})


def _forget_open(db: Database, open_id: int) -> None:
    """Remove an opening recorded for a file that turned out to be gone."""
    with db.engine.begin() as conn:
        conn.execute(sa.delete(LinkOpen).where(LinkOpen.id == open_id))


def opens_of_run(
    session: Session, caller: Caller, run_id: int, *, limit: int = MAX_OPENS_LISTED
) -> list[OpenRecord]:
    """The openings of one of the caller's runs' links, newest first (at most
    ``limit``, itself at most :data:`MAX_OPENS_LISTED`); a run of another tenant is
    not found (:class:`~nbcast.errors.UnknownRunError`)."""
    tenant = readable_tenant(session, caller)
    require_run(session, tenant, run_id)
    count = max(1, min(limit, MAX_OPENS_LISTED))
    shown = disclosure(session, caller)  # a webhook URL is masked but for admins
    rows = session.execute(
        sa.select(LinkOpen, SignedLink.recipient, SignedLink.filename)
        .join(SignedLink, SignedLink.id == LinkOpen.link_id)
        .where(LinkOpen.tenant_id == tenant.id, LinkOpen.run_id == run_id)
        .order_by(LinkOpen.id.desc())
        .limit(count)
    )
    return [
        OpenRecord(
            link_id=row.link_id,
            run_id=row.run_id,
            delivery_id=row.delivery_id,
            recipient=shown.recipient(recipient),
            filename=filename,
            opened_at=row.opened_at,
            network=row.network,
            user_agent=row.user_agent,
        )
        for row, recipient, filename in rows
    ]
