"""The ``teams`` channel: a JSON card POSTed to the recipient's incoming-webhook URL.

Configured when ``NBCAST_TEAMS_TOKEN`` is set (sent as ``Authorization: Bearer …``);
``NBCAST_TEAMS_TIMEOUT`` (seconds, default 10) bounds each request. A subscription's
``to`` is the URL, ``http://`` or ``https://`` with a host.

The card carries the subject, the summary, the signed links to the report's files
(``sends_links``) and, for each attached file (``attaches_files``), its name, type
and size — and a Markdown file's text as the card's body, so the ``md`` renderer's
output is what the reader sees. The ledger key goes in ``X-Nbcast-Delivery`` (an
idempotency key: a webhook cannot be asked afterwards whether it got one).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar
from urllib.parse import urlsplit

import httpx

from nbcast.delivery.channels.base import Channel, Message, Receipt
from nbcast.errors import (
    ConfigError,
    OutcomeUnknownError,
    PermanentChannelError,
    TransientChannelError,
)

if TYPE_CHECKING:
    from nbcast.delivery.settings import DeliverySettings

__all__ = ["TeamsChannel", "card"]

MAX_BODY_CHARS = 20_000
"""The most characters of a Markdown file put in a card's body."""


def card(message: Message) -> dict[str, Any]:
    """The JSON card posted for ``message`` (module docstring)."""
    body = ""
    for attachment in message.attachments:
        if attachment.media_type.startswith("text/markdown"):
            body = attachment.content.decode("utf-8", "replace")[:MAX_BODY_CHARS]
    return {
        "type": "nbcast.card",
        "key": message.key,
        "title": message.subject,
        "summary": message.text,
        "body": body,
        "links": list(message.links),
        "files": [
            {"name": a.filename, "media_type": a.media_type, "size": len(a.content)}
            for a in message.attachments
        ],
    }


class TeamsChannel(Channel):
    """Posts report cards to incoming-webhook URLs (module docstring)."""

    name: ClassVar[str] = "teams"
    attaches_files: ClassVar[bool] = True
    sends_links: ClassVar[bool] = True
    max_attempts = 3

    def __init__(self, token: str, *, timeout: float = 10.0) -> None:
        self.token = token
        self.client = httpx.Client(timeout=timeout, follow_redirects=False, trust_env=False)

    @classmethod
    def from_environment(
        cls, environ: Mapping[str, str], settings: DeliverySettings
    ) -> TeamsChannel | None:
        """Configured by ``NBCAST_TEAMS_TOKEN`` (and ``NBCAST_TEAMS_TIMEOUT``)."""
        token = environ.get("NBCAST_TEAMS_TOKEN")
        if not token:
            return None
        raw = environ.get("NBCAST_TEAMS_TIMEOUT") or "10"
        try:
            timeout = float(raw)
        except ValueError:
            timeout = math.nan
        if not math.isfinite(timeout) or not 0 < timeout <= 300:
            raise ConfigError(f"NBCAST_TEAMS_TIMEOUT must be 0 < seconds <= 300, not {raw[:40]!r}")
        return cls(token, timeout=timeout)

    @classmethod
    def check_recipient(cls, to: str) -> str | None:
        """An ``http(s)://`` URL with a host."""
        try:
            parts = urlsplit(to)
        except ValueError:
            return f"{to[:80]!r} is not a URL"
        if parts.scheme not in ("http", "https") or not parts.hostname:
            return f"{to[:80]!r} is not an http(s):// URL with a host"
        return None

    def send(self, message: Message) -> Receipt:
        """POST the card; 2xx is accepted, 429 and 5xx are worth retrying."""
        headers = {
            "Authorization": f"Bearer {self.token}",
            "X-Nbcast-Delivery": message.key,
        }
        try:
            response = self.client.post(message.recipient, json=card(message), headers=headers)
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
            raise TransientChannelError(f"teams unreachable: {type(exc).__name__}") from exc
        except httpx.HTTPError as exc:
            raise OutcomeUnknownError(f"teams did not answer: {type(exc).__name__}") from exc
        status = response.status_code
        if 200 <= status < 300:
            return Receipt({"status": status})
        if status == 429 or status >= 500:
            raise TransientChannelError(f"teams answered HTTP {status}")
        raise PermanentChannelError(f"teams answered HTTP {status}")

    def close(self) -> None:
        """Close the connection pool."""
        self.client.close()
