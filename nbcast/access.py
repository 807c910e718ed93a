"""Who asks, and how lists come back: the two things every query and command shares.

nbcast's faces — the CLI, the REST API, the JupyterLab extension through the API —
call one layer of functions: a **query** takes a ``Session`` and a :class:`Caller`
and returns typed records; a **command** (a state change) takes the database, the
clock and a :class:`Caller` and commits one transaction. Each one scopes itself to
``caller.tenant``: a record of another tenant is "not found", never returned, so no
face can reach across tenants by passing another id.

**Who** is a :class:`Caller`: a tenant and an identity. An identity names a person
*and where nbcast learned of them* (:class:`Source`), because the two faces vouch for
people differently. The command line's user (``NBCAST_USER``, else the login name) is
whoever can run ``nbcast`` on the home — self-declared, and able to open the database
anyway; a jupyter-server user was authenticated by the server's identity provider (a
per-user token, a password, JupyterHub). So ``root`` on the command line and a
jupyter-server user who happens to be called ``root`` are two people: a role given to
one is not the other's.

The source is written into the identity itself, which is what the ``users`` and
``operators`` tables store and what audit entries, ``added_by``, ``requested_by`` and
authors record:

- an **OS** identity is the bare name: ``root``, ``ada`` — so every name nbcast stored
  before identities had sources, every ``NBCAST_USER`` and every CLI example keeps
  meaning what it meant on the command line;
- a **jupyter** identity is ``jupyter:`` and the server's user name: ``jupyter:alice``
  (the name at most :data:`MAX_JUPYTER_NAME` characters, so the identity fits the 128
  of the tables' columns). An OS name cannot begin with ``jupyter:``.

Keeping the source inside the one string (rather than in a column beside the name)
means no code that passes ``caller.user`` along can drop it: a lookup, a copy into
another :class:`Caller`, an audit entry all carry the source without knowing of it.
Configuration that can only name jupyter-server users (``NbcastApp.tenant_map``,
``admin_users``, ``TokenIdentityProvider.user_tokens``) keeps using their bare names.

Lists are keyset-paginated (:class:`Page`): a query returns at most ``limit`` items
(:func:`page_limit`: default 50, at most 1,000) and, when more follow, an opaque
``next_after`` cursor to pass back as ``after``. A cursor encodes the sort key of the
last item, so a page deep in a million rows costs what the first one costs.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any, Generic, TypeVar

from nbcast.errors import ConfigError

__all__ = [
    "DEFAULT_PAGE",
    "JUPYTER_PREFIX",
    "MAX_IDENTITY",
    "MAX_JUPYTER_NAME",
    "MAX_PAGE",
    "Caller",
    "Page",
    "Source",
    "decode_cursor",
    "encode_cursor",
    "identity",
    "name_of",
    "page_limit",
    "source_of",
]

T = TypeVar("T")

DEFAULT_PAGE = 50
MAX_PAGE = 1_000


JUPYTER_PREFIX = "jupyter:"
"""What a jupyter-server user's identity begins with (module docstring)."""

MAX_IDENTITY = 128
"""The longest identity: what the ``users``, ``operators`` and audit columns hold."""

MAX_JUPYTER_NAME = MAX_IDENTITY - len(JUPYTER_PREFIX)
"""The longest jupyter-server user name nbcast accepts (120 characters)."""


class Source(StrEnum):
    """Where an identity comes from (module docstring)."""

    os = "os"
    """The command line's user: ``NBCAST_USER``, else the process's login name — and
    the holder of a server's own token, which is its owner's credential. Written as
    the bare name."""
    jupyter = "jupyter"
    """A user jupyter-server's identity provider authenticated. Written
    ``jupyter:<name>``."""


def identity(source: Source, name: str) -> str:
    """The identity of ``name`` from ``source`` (``root``, ``jupyter:alice``);
    :class:`ConfigError` for an OS name that would read as a jupyter identity, or a
    jupyter name longer than :data:`MAX_JUPYTER_NAME`."""
    if source is Source.jupyter:
        if not 1 <= len(name) <= MAX_JUPYTER_NAME:
            raise ConfigError(f"a jupyter-server user name must be 1-{MAX_JUPYTER_NAME} characters")
        return JUPYTER_PREFIX + name
    if name.startswith(JUPYTER_PREFIX):
        raise ConfigError(
            f"{name[:40]!r}: an OS user's name cannot begin with {JUPYTER_PREFIX!r} "
            "(that names a jupyter-server user)"
        )
    return name


def source_of(identity: str) -> Source:
    """The source of ``identity`` (module docstring)."""
    return Source.jupyter if identity.startswith(JUPYTER_PREFIX) else Source.os


def name_of(identity: str) -> str:
    """The name of ``identity`` without its source."""
    return identity[len(JUPYTER_PREFIX) :] if identity.startswith(JUPYTER_PREFIX) else identity


@dataclass(frozen=True, kw_only=True)
class Caller:
    """Who a query or command acts for: a person of one tenant, by identity."""

    tenant: str
    user: str
    """The caller's identity, its source included: ``ada`` for the OS user ada,
    ``jupyter:alice`` for the jupyter-server user alice (module docstring)."""

    @classmethod
    def of(cls, *, tenant: str, name: str, source: Source) -> Caller:
        """The caller ``name`` from ``source`` in ``tenant`` (:func:`identity`'s checks)."""
        return cls(tenant=tenant, user=identity(source, name))

    @property
    def source(self) -> Source:
        """Where the caller's identity comes from."""
        return source_of(self.user)

    @property
    def name(self) -> str:
        """The caller's name without its source."""
        return name_of(self.user)


@dataclass(frozen=True)
class Page(Generic[T]):
    """One page of a list, and the cursor of the next one (None: this is the last)."""

    items: list[T]
    next_after: str | None = None


def page_limit(limit: int | None) -> int:
    """``limit`` checked: default :data:`DEFAULT_PAGE`, 1 to :data:`MAX_PAGE`."""
    if limit is None:
        return DEFAULT_PAGE
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_PAGE:
        raise ConfigError(f"limit must be a whole number from 1 to {MAX_PAGE:,}")
    return limit


def encode_cursor(*values: Any) -> str:
    """An opaque cursor for a sort key (ids, strings, aware datetimes)."""
    plain = [v.isoformat() if isinstance(v, datetime) else v for v in values]
    raw = json.dumps(plain, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str, kinds: Sequence[type]) -> tuple[Any, ...]:
    """The sort key in ``cursor``, each value checked against ``kinds`` (``datetime``
    values come back aware, ``int`` values are ids in ``[0, 2**63)``, ``str`` values
    printable); :class:`ConfigError` for anything else — a forged cursor is bad input,
    never a database error."""
    try:
        if not isinstance(cursor, str) or len(cursor) > 512:
            raise ValueError
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        values = json.loads(raw)
        if not isinstance(values, list) or len(values) != len(kinds):
            raise ValueError
        decoded: list[Any] = []
        for value, kind in zip(values, kinds, strict=True):
            if kind is datetime and isinstance(value, str):
                instant = datetime.fromisoformat(value)
                if instant.tzinfo is None:
                    raise ValueError
                decoded.append(instant)
            elif kind is int and isinstance(value, int) and not isinstance(value, bool):
                if not 0 <= value < 2**63:  # an id: what a BIGINT column holds
                    raise ValueError
                decoded.append(value)
            elif kind is str and isinstance(value, str):
                if len(value) > 512 or not value.isprintable():
                    raise ValueError
                decoded.append(value)
            else:  # None, or a value of another kind: nothing this list handed out
                raise ValueError
    except (ValueError, TypeError, UnicodeDecodeError):
        raise ConfigError("after: not a cursor this list handed out") from None
    return tuple(decoded)
