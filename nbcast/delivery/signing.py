"""Signed tokens for links and one-click unsubscribes: HMAC with key rotation.

A token is ``<key id>.<itsdangerous URL-safe signed payload>``. The key id says which
key signed it, so keys rotate without breaking tokens already handed out: new tokens
are signed with the *current* key (the first one configured), and every configured
key still verifies. Removing a key retires every token it signed. Signatures are
HMAC-SHA256 (itsdangerous) and compared in constant time; each use has its own salt
(``link``, ``unsubscribe``) so a token made for one purpose is refused for another.

Keys come from ``NBCAST_SIGNING_KEYS`` (``id:secret,id:secret``, current first; each
id once, each secret at least 16 characters). When it is unset, an embedded
installation generates one key on first use and keeps it in
``$NBCAST_HOME/signing-keys.json`` (mode 0600, a JSON list of ``[id, secret]``
pairs). A malformed variable or key file is a one-line
:class:`~nbcast.errors.ConfigError` that names it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import secrets
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from itsdangerous import BadSignature, URLSafeSerializer

from nbcast.credentials import credential
from nbcast.errors import ConfigError, LinkError

__all__ = ["Signer", "load_signer"]

_KEY_ID = re.compile(r"[A-Za-z0-9_-]{1,32}")


class Signer:
    """Signs and verifies payloads with rotating keys (module docstring)."""

    def __init__(self, keys: Sequence[tuple[str, str]]) -> None:
        if not keys:
            raise ConfigError("signing needs at least one key")
        seen: set[str] = set()
        for key_id, secret in keys:
            if not _KEY_ID.fullmatch(key_id):
                raise ConfigError(f"signing key id {key_id[:40]!r} must match {_KEY_ID.pattern}")
            if key_id in seen:  # which one would sign, which one verify?
                raise ConfigError(f"signing key id {key_id!r} is given twice")
            seen.add(key_id)
            if len(secret) < 16:
                raise ConfigError(f"signing key {key_id!r} is shorter than 16 characters")
        self.current = keys[0][0]
        self._keys = dict(keys)

    def sign(self, payload: Mapping[str, Any], *, purpose: str, key_id: str | None = None) -> str:
        """A token carrying ``payload`` (JSON-serializable), for ``purpose`` only,
        signed with the current key, or with ``key_id`` (a configured key: a
        :class:`~nbcast.errors.ConfigError` otherwise). Signing is deterministic: the
        same payload, purpose and key give the same token, which is how a link is
        handed out again (:func:`nbcast.delivery.links.delivery_link`)."""
        chosen = self.current if key_id is None else key_id
        if chosen not in self._keys:
            raise ConfigError(f"signing key {chosen[:40]!r} is not configured")
        serializer = _serializer(self._keys[chosen], purpose)
        return f"{chosen}.{serializer.dumps(dict(payload))}"

    def has_key(self, key_id: str) -> bool:
        """Whether ``key_id`` is configured (so tokens it signed still verify)."""
        return key_id in self._keys

    def verify(self, token: str, *, purpose: str) -> dict[str, Any]:
        """The payload of ``token``; :class:`~nbcast.errors.LinkError` if it is
        malformed, signed for another purpose, or signed by no configured key."""
        key_id, dot, signed = token.partition(".")
        if not dot or not signed:
            raise LinkError("malformed token")
        secret = self._keys.get(key_id)
        if secret is None:
            raise LinkError("the token was signed with an unknown or retired key")
        try:
            payload = _serializer(secret, purpose).loads(signed)
        except BadSignature:
            raise LinkError("the token's signature does not verify") from None
        if not isinstance(payload, dict):
            raise LinkError("malformed token")
        return payload


def _serializer(secret: str, purpose: str) -> URLSafeSerializer:
    """HMAC-SHA256 (itsdangerous' default would be SHA-1), salted per purpose."""
    return URLSafeSerializer(
        secret, salt=f"nbcast-{purpose}", signer_kwargs={"digest_method": hashlib.sha256}
    )


def parse_keys(text: str) -> list[tuple[str, str]]:
    """``id:secret,id:secret`` → pairs, current first; a key id given twice is a
    :class:`~nbcast.errors.ConfigError`."""
    keys = []
    seen: set[str] = set()
    for item in filter(None, (part.strip() for part in text.split(","))):
        key_id, colon, secret = item.partition(":")
        if not colon:
            raise ConfigError("NBCAST_SIGNING_KEYS is 'id:secret,id:secret' (current first)")
        if key_id in seen:
            raise ConfigError(f"NBCAST_SIGNING_KEYS: key id {key_id[:40]!r} is given twice")
        seen.add(key_id)
        keys.append((key_id, secret))
    return keys


def load_signer(home: Path, environ: Mapping[str, str] | None = None) -> Signer:
    """The signer from ``NBCAST_SIGNING_KEYS``, or the embedded key file (module doc)."""
    env = os.environ if environ is None else environ
    given = credential("NBCAST_SIGNING_KEYS", env)
    if given:
        keys = parse_keys(given)
        try:
            return Signer(keys)
        except ConfigError as exc:
            raise ConfigError(f"NBCAST_SIGNING_KEYS: {exc}") from None
    path = home / "signing-keys.json"
    if not path.exists():
        home.mkdir(parents=True, exist_ok=True)
        fresh = [["k1", secrets.token_urlsafe(32)]]
        # Written whole to a private temporary file (mkstemp makes it 0600), then linked
        # into place: a reader never sees a half-written file, and of two processes
        # racing, one key wins.
        fd, temporary = tempfile.mkstemp(dir=home, prefix=".signing-keys-")
        try:
            with os.fdopen(fd, "w") as handle:
                json.dump(fresh, handle)
            with contextlib.suppress(FileExistsError):  # another process was first
                os.link(temporary, path)
        finally:
            os.unlink(temporary)
    return _file_signer(path)


def _file_signer(path: Path) -> Signer:
    """The signer of the key file; a ConfigError naming the file if it is not one."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else "not JSON"
        raise ConfigError(f"{path}: {reason} (fix it, or delete it to make a new key)") from None
    if not isinstance(data, list) or not all(
        isinstance(pair, list) and len(pair) == 2 and all(isinstance(v, str) for v in pair)
        for pair in data
    ):
        raise ConfigError(f"{path}: not a JSON list of [id, secret] pairs")
    try:
        return Signer([(key_id, secret) for key_id, secret in data])
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None
