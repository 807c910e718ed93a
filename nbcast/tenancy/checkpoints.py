"""Signed checkpoints of the audit chain: an anchor the database cannot rewrite alone.

The hash chain (:mod:`nbcast.tenancy.audit`) finds an entry that was edited,
deleted, inserted or moved — unless whoever changed the log also recomputed every hash
after the change and moved the head (``audit_heads``) with it: a consistent rewrite,
or a cut tail with the head rolled back, is a valid chain. A **checkpoint** records a
tenant's head — its ``seq`` and hash — at a moment, signed (Ed25519) with a key the
database does not hold; :func:`check_checkpoint` then finds both: the chain must still
reach that ``seq``, and its entry there must still have that hash.

Decisions:

- **The key** is an Ed25519 private key in PEM: ``NBCAST_AUDIT_KEY`` or
  ``NBCAST_AUDIT_KEY_FILE`` (a ``0600`` file, :mod:`nbcast.credentials`), else
  ``$NBCAST_HOME/audit-key.pem``, made ``0600`` on first use. It lives with the
  services, never in the database: on PostgreSQL the application's role can neither
  read it nor, owning nothing, disable the log's append-only trigger. Several
  oversight replicas must be given the same key. Verifying needs only the public key
  (``nbcast audit public-key`` prints it; ``nbcast audit verify --public-key FILE``),
  so an auditor can verify without being able to sign.
- **Who writes them**: the oversight service (:mod:`nbcast.oversight.jobs`), for each
  tenant whose
  head moved since its last checkpoint and whose last checkpoint is at least
  :data:`CHECKPOINT_EVERY` old (so at least hourly while the log grows, and not at all
  while it does not); and ``nbcast audit checkpoint``, at once. Before signing, the
  entries since the last checkpoint are verified: a broken chain is never signed.
- **Exported outside the home**: each checkpoint can be appended as a JSON line to a
  file (``nbcast audit checkpoint --export FILE``, ``NBCAST_AUDIT_EXPORT`` for the
  oversight service) — a write-once bucket, another machine's disk — where whoever edits the
  database cannot reach; ``nbcast audit verify --checkpoints FILE`` checks the chain
  against the newest checkpoint of the file as well as the database's.
- **What is signed** is the JSON array ``["nbcast-audit-checkpoint", tenant name,
  tenant id, seq, head, made_at]`` (compact, ASCII): a checkpoint moved to another
  tenant or another ``seq`` does not verify.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from nbcast.clock import Clock, format_instant, parse_instant
from nbcast.credentials import credential, read_secret_file
from nbcast.db import Database, insert_ignore
from nbcast.errors import ConfigError
from nbcast.tenancy.audit import Break, verify_tenant
from nbcast.tenancy.models import AuditCheckpoint, AuditEntry, AuditHead, Tenant

__all__ = [
    "CHECKPOINT_EVERY",
    "MAX_EXPORT_BYTES",
    "AuditKey",
    "Checkpoint",
    "append_export",
    "check_anchors",
    "check_checkpoint",
    "latest_checkpoint",
    "load_key",
    "make_checkpoints",
    "read_export",
]

CHECKPOINT_EVERY = timedelta(hours=1)
"""The least time between two scheduled checkpoints of one tenant."""

MAX_EXPORT_BYTES = 256 * 1024 * 1024
"""The most of an exported checkpoints file that is read."""

KEY_FILE_NAME = "audit-key.pem"
_PURPOSE = "nbcast-audit-checkpoint"


class AuditKey:
    """An Ed25519 key pair (or a public key alone, which only verifies)."""

    def __init__(self, private: Any | None, public: Any) -> None:
        self._private = private
        self._public = public
        raw = self.public_pem().encode()
        #: a short name of the public key, stored with each checkpoint
        self.key_id = hashlib.sha256(raw).hexdigest()[:16]

    @classmethod
    def from_pem(cls, text: str) -> AuditKey:
        """A private or public key in PEM (``ConfigError`` if it is neither Ed25519)."""
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric.ed25519 import (
            Ed25519PrivateKey,
            Ed25519PublicKey,
        )

        data = text.encode()
        try:
            if b"PRIVATE KEY" in data:
                private = serialization.load_pem_private_key(data, password=None)
                if not isinstance(private, Ed25519PrivateKey):
                    raise ValueError("not Ed25519")
                return cls(private, private.public_key())
            public = serialization.load_pem_public_key(data)
            if not isinstance(public, Ed25519PublicKey):
                raise ValueError("not Ed25519")
            return cls(None, public)
        except (ValueError, TypeError) as exc:
            raise ConfigError(f"the audit key is not an Ed25519 key in PEM: {exc}") from None

    @classmethod
    def generate(cls) -> AuditKey:
        """A new key pair."""
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

        private = Ed25519PrivateKey.generate()
        return cls(private, private.public_key())

    @property
    def can_sign(self) -> bool:
        """Whether this is a private key."""
        return self._private is not None

    def private_pem(self) -> str:
        """The private key in PKCS#8 PEM."""
        from cryptography.hazmat.primitives import serialization

        assert self._private is not None
        return str(
            self._private.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            ).decode()
        )

    def public_pem(self) -> str:
        """The public key in SubjectPublicKeyInfo PEM (what ``--public-key`` reads)."""
        from cryptography.hazmat.primitives import serialization

        return str(
            self._public.public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            ).decode()
        )

    def sign(self, message: bytes) -> str:
        """The signature of ``message``, hex."""
        if self._private is None:
            raise ConfigError("this audit key is a public key: it cannot sign checkpoints")
        return str(self._private.sign(message).hex())

    def verifies(self, message: bytes, signature: str) -> bool:
        """Whether ``signature`` (hex) is this key's of ``message``."""
        from cryptography.exceptions import InvalidSignature

        try:
            self._public.verify(bytes.fromhex(signature), message)
        except (InvalidSignature, ValueError):
            return False
        return True


def load_key(
    home: Path, environ: Mapping[str, str] | None = None, *, create: bool
) -> AuditKey | None:
    """The installation's audit key (module docstring): ``NBCAST_AUDIT_KEY`` (or its
    ``_FILE``), else the home's key file — made (``0600``, never through a link) when
    missing and ``create``, else None."""
    given = credential("NBCAST_AUDIT_KEY", environ)
    if given:
        return AuditKey.from_pem(given)
    path = home / KEY_FILE_NAME
    if os.path.lexists(path):
        return AuditKey.from_pem(read_secret_file(f"the audit key {path}", str(path)))
    if not create:
        return None
    key = AuditKey.generate()
    home.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except FileExistsError:  # another process made it first: use theirs
        return load_key(home, environ, create=False)
    with os.fdopen(fd, "w", encoding="ascii") as handle:
        handle.write(key.private_pem())
    return key


@dataclass(frozen=True, kw_only=True)
class Checkpoint:
    """One signed head (module docstring)."""

    tenant: str
    tenant_id: int
    seq: int
    head: str
    made_at: datetime
    made_by: str
    key_id: str
    signature: str = ""

    def message(self) -> bytes:
        """What is signed."""
        fields = [_PURPOSE, self.tenant, self.tenant_id, self.seq, self.head]
        fields.append(format_instant(self.made_at))
        return json.dumps(fields, separators=(",", ":"), ensure_ascii=True).encode()

    def to_json(self) -> dict[str, Any]:
        """A line of an exported file."""
        return {
            "tenant": self.tenant,
            "tenant_id": self.tenant_id,
            "seq": self.seq,
            "head": self.head,
            "made_at": format_instant(self.made_at),
            "made_by": self.made_by,
            "key_id": self.key_id,
            "signature": self.signature,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Checkpoint:
        """A checkpoint read back (``ValueError``/``KeyError``/``TypeError`` if malformed)."""
        return cls(
            tenant=str(data["tenant"]),
            tenant_id=int(data["tenant_id"]),
            seq=int(data["seq"]),
            head=str(data["head"]),
            made_at=parse_instant(str(data["made_at"])),
            made_by=str(data["made_by"]),
            key_id=str(data["key_id"]),
            signature=str(data["signature"]),
        )


def _checkpoint(row: AuditCheckpoint, tenant: str) -> Checkpoint:
    return Checkpoint(
        tenant=tenant,
        tenant_id=row.tenant_id,
        seq=row.seq,
        head=row.head,
        made_at=row.made_at,
        made_by=row.made_by,
        key_id=row.key_id,
        signature=row.signature,
    )


def latest_checkpoint(session: Session, tenant_id: int, tenant: str) -> Checkpoint | None:
    """The tenant's checkpoint with the highest ``seq`` in the database."""
    row = session.scalar(
        sa.select(AuditCheckpoint)
        .where(AuditCheckpoint.tenant_id == tenant_id)
        .order_by(AuditCheckpoint.seq.desc())
        .limit(1)
    )
    return _checkpoint(row, tenant) if row is not None else None


def _entry_hash(session: Session, tenant_id: int, seq: int) -> str | None:
    found = session.scalar(
        sa.select(AuditEntry.hash).where(AuditEntry.tenant_id == tenant_id, AuditEntry.seq == seq)
    )
    return str(found) if found is not None else None


def check_checkpoint(
    session: Session, checkpoint: Checkpoint, key: AuditKey | None
) -> Break | None:
    """Whether the tenant's chain still holds what ``checkpoint`` signed (module
    docstring); the first thing that does not, as a :class:`Break`."""
    made = format_instant(checkpoint.made_at)
    if key is None:
        return Break(
            tenant=checkpoint.tenant,
            seq=checkpoint.seq,
            problem="it was checkpointed but there is no audit key to check the checkpoint",
        )
    if checkpoint.key_id != key.key_id or not key.verifies(
        checkpoint.message(), checkpoint.signature
    ):
        return Break(
            tenant=checkpoint.tenant,
            seq=checkpoint.seq,
            problem=f"the checkpoint of {made} is not signed by the audit key "
            f"(key {checkpoint.key_id[:16]!r}): forged or altered",
        )
    last = session.scalar(
        sa.select(sa.func.max(AuditEntry.seq)).where(AuditEntry.tenant_id == checkpoint.tenant_id)
    )
    last = int(last or 0)
    if last < checkpoint.seq:
        return Break(
            tenant=checkpoint.tenant,
            seq=last + 1,
            problem=f"missing: the chain ends at entry {last} but entry {checkpoint.seq} was "
            f"signed on {made} (entries were cut from its end)",
        )
    if _entry_hash(session, checkpoint.tenant_id, checkpoint.seq) != checkpoint.head:
        return Break(
            tenant=checkpoint.tenant,
            seq=checkpoint.seq,
            problem=f"it is not the entry signed on {made}: the chain was rewritten",
        )
    return None


def _holds_since(session: Session, tenant_id: int, tenant: str, since: Checkpoint | None) -> bool:
    """Whether the entries after ``since`` (all of them, without one) hold, up to the
    head: a broken chain is never signed."""
    if since is not None and _entry_hash(session, tenant_id, since.seq) != since.head:
        return False
    after = (since.seq, since.head) if since is not None else None
    return verify_tenant(session, tenant_id, tenant, after)[1] is None


def make_checkpoints(
    db: Database,
    clock: Clock,
    key: AuditKey,
    *,
    made_by: str,
    tenant_ids: Iterable[int] | None = None,
    every: timedelta | None = None,
) -> tuple[list[Checkpoint], list[str]]:
    """Checkpoint the tenants (``tenant_ids``, default all) whose head moved since their
    last checkpoint — and, with ``every``, whose last one is at least that old. Return
    the checkpoints made and the tenants whose chain did not hold (not signed)."""
    now = clock.now()
    made: list[Checkpoint] = []
    refused: list[str] = []
    with db.session() as session:
        query = sa.select(Tenant.id, Tenant.name, AuditHead.seq, AuditHead.hash).join(
            AuditHead, AuditHead.tenant_id == Tenant.id
        )
        if tenant_ids is not None:
            query = query.where(Tenant.id.in_(list(tenant_ids)))
        heads = session.execute(query.where(AuditHead.seq > 0)).all()
        for tenant_id, name, seq, head in heads:
            last = latest_checkpoint(session, tenant_id, name)
            if last is not None and last.seq >= seq:
                continue
            if every is not None and last is not None and now - last.made_at < every:
                continue
            if not _holds_since(session, tenant_id, name, last):
                refused.append(name)
                continue
            unsigned = Checkpoint(
                tenant=name,
                tenant_id=tenant_id,
                seq=int(seq),
                head=str(head),
                made_at=now,
                made_by=made_by,
                key_id=key.key_id,
            )
            made.append(dataclasses.replace(unsigned, signature=key.sign(unsigned.message())))
        if made:
            rows = [
                {k: v for k, v in c.to_json().items() if k != "tenant"} | {"made_at": c.made_at}
                for c in made
            ]
            session.execute(insert_ignore(AuditCheckpoint, rows, db.dialect))
    return made, refused


def append_export(path: Path, checkpoints: Iterable[Checkpoint]) -> int:
    """Append ``checkpoints`` to the exported file ``path`` as JSON lines (made ``0600``
    if new; never through a link); return how many."""
    lines = [json.dumps(c.to_json(), ensure_ascii=True) + "\n" for c in checkpoints]
    if not lines:
        return 0
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "a", encoding="ascii") as handle:
        handle.write("".join(lines))
    return len(lines)


def read_export(path: Path) -> dict[int, Checkpoint]:
    """The newest checkpoint (highest ``seq``) of each tenant id in an exported file;
    ``ConfigError`` for a file that cannot be read or holds a malformed line."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        raise ConfigError(f"cannot read the checkpoints {path}: {exc.strerror}") from None
    with os.fdopen(fd, "rb") as handle:
        data = handle.read(MAX_EXPORT_BYTES + 1)
    if len(data) > MAX_EXPORT_BYTES:
        raise ConfigError(f"the checkpoints {path} are larger than {MAX_EXPORT_BYTES:,} bytes")
    newest: dict[int, Checkpoint] = {}
    for number, line in enumerate(data.splitlines(), 1):
        if not line.strip():
            continue
        try:
            found = Checkpoint.from_json(json.loads(line))
        except (ValueError, KeyError, TypeError, AttributeError):
            raise ConfigError(
                f"the checkpoints {path}: line {number} is not a checkpoint"
            ) from None
        current = newest.get(found.tenant_id)
        if current is None or found.seq > current.seq:
            newest[found.tenant_id] = found
    return newest


def check_anchors(
    session: Session,
    tenants: Mapping[int, str],
    key: AuditKey | None,
    exported: Mapping[int, Checkpoint],
) -> Break | None:
    """Each tenant's chain (name order) against its newest checkpoint in the database
    and its newest in ``exported``; the first break (a tenant never checkpointed has
    nothing to be checked against)."""
    for tenant_id, name in sorted(tenants.items(), key=lambda item: item[1]):
        stored = latest_checkpoint(session, tenant_id, name)
        outside = exported.get(tenant_id)
        for checkpoint in (stored, outside):
            if checkpoint is None:
                continue
            if checkpoint.tenant != name:
                return Break(
                    tenant=name,
                    seq=checkpoint.seq,
                    problem=f"its checkpoint is of tenant {checkpoint.tenant[:64]!r}: the "
                    "tenants were altered",
                )
            broken = check_checkpoint(session, checkpoint, key)
            if broken is not None:
                return broken
    return None
