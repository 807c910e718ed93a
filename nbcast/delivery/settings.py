"""How the delivery plane is configured: channels, signing keys, public URL.

==========================  ========================================================
variable                    meaning
==========================  ========================================================
``NBCAST_SMTP_URL``         ``smtp://[user:password@]host[:port]`` (plain, or
                            ``?security=starttls``) or ``smtps://…`` (TLS from the
                            start). Unset: the ``email`` channel is not configured.
``NBCAST_SMTP_FROM``        the sender address (default ``nbcast@localhost``)
``NBCAST_SLACK_TOKEN``      a bot token; unset: no ``slack`` channel
``NBCAST_SLACK_API_URL``    the Web API base URL (default ``https://slack.com/api/``)
``NBCAST_WEBHOOK_SECRET``   the HMAC key of webhook signatures; unset: no ``webhook``
``NBCAST_WEBHOOK_ALLOW_``   ``1``/``true``/``yes``: webhooks may use ``http://`` too
``HTTP``                    (default: ``https://`` only)
``NBCAST_WEBHOOK_ALLOWED_`` comma-separated host names, IP addresses and CIDR networks
``HOSTS``                   webhooks may reach although they are not public (see
                            :mod:`nbcast.delivery.webhook_policy`)
``NBCAST_BASE_URL``         where nbcast's server is reached (links, unsubscribe);
                            default ``http://127.0.0.1:8888``
``NBCAST_SIGNING_KEYS``     ``id:secret,…`` current first (see
                            :mod:`nbcast.delivery.signing`)
``NBCAST_LINK_TTL``         how long a signed link lasts (default ``7d``; more than
                            0 s, at most 366 days)
==========================  ========================================================

A malformed value is a :class:`~nbcast.errors.ConfigError` naming the variable, on
one line, and never echoes a password (``NBCAST_SMTP_URL``'s is shown as ``***``).

Each registered channel reads its own variables
(:meth:`~nbcast.delivery.channels.base.Channel.from_environment`): the built-ins
read the ones above, a plug-in channel those its documentation names. A subscription
on a channel that is not configured fails (``no_channel``) rather than waiting
forever; ``nbcast deliver --retry-failed RUN`` sends it once configured. The ``link``
channel needs no configuration.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from urllib.parse import parse_qs, unquote, urlsplit

from nbcast.config import mask_url
from nbcast.credentials import credential
from nbcast.delivery.webhook_policy import WebhookPolicy, load_webhook_policy
from nbcast.durations import parse_duration
from nbcast.errors import ConfigError

__all__ = ["MAX_LINK_TTL", "DeliverySettings", "load_delivery_settings"]

MAX_LINK_TTL = timedelta(days=366)
"""The longest a signed link may be configured to last."""


@dataclass(frozen=True, kw_only=True)
class DeliverySettings:
    """The delivery plane's configuration (module docstring)."""

    smtp_url: str | None = None
    smtp_from: str = "nbcast@localhost"
    slack_token: str | None = None
    slack_api_url: str = "https://slack.com/api/"
    webhook_secret: str | None = None
    webhook_policy: WebhookPolicy = field(default_factory=WebhookPolicy)
    """Which URLs webhooks may reach (``NBCAST_WEBHOOK_ALLOW_HTTP``,
    ``NBCAST_WEBHOOK_ALLOWED_HOSTS``)."""
    base_url: str = "http://127.0.0.1:8888"
    link_ttl: timedelta = timedelta(days=7)


def load_delivery_settings(environ: Mapping[str, str] | None = None) -> DeliverySettings:
    """Read :class:`DeliverySettings` from the environment."""
    env = os.environ if environ is None else environ
    raw_ttl = env.get("NBCAST_LINK_TTL") or "7d"
    try:
        ttl = parse_duration(raw_ttl)
    except (ValueError, OverflowError) as exc:
        raise ConfigError(f"NBCAST_LINK_TTL: {str(exc)[:200]}") from None
    if not timedelta(0) < ttl <= MAX_LINK_TTL:
        raise ConfigError(
            f"NBCAST_LINK_TTL must be more than 0s and at most 366d, not {raw_ttl[:40]!r}"
        )
    return DeliverySettings(
        smtp_url=credential("NBCAST_SMTP_URL", env),
        smtp_from=env.get("NBCAST_SMTP_FROM") or "nbcast@localhost",
        slack_token=credential("NBCAST_SLACK_TOKEN", env),
        slack_api_url=env.get("NBCAST_SLACK_API_URL") or "https://slack.com/api/",
        webhook_secret=credential("NBCAST_WEBHOOK_SECRET", env),
        webhook_policy=load_webhook_policy(env),
        base_url=env.get("NBCAST_BASE_URL") or "http://127.0.0.1:8888",
        link_ttl=ttl,
    )


def smtp_options(url: str) -> dict[str, object]:
    """``EmailChannel`` keyword arguments from an ``smtp://`` / ``smtps://`` URL."""
    shown = mask_url(url)
    try:
        parts = urlsplit(url)
        hostname = parts.hostname
    except ValueError as exc:
        raise ConfigError(f"NBCAST_SMTP_URL {shown!r} is malformed: {exc}") from None
    if parts.scheme not in ("smtp", "smtps") or not hostname:
        raise ConfigError(f"NBCAST_SMTP_URL must be smtp://host[:port] or smtps://…, not {shown!r}")
    try:
        port = parts.port
    except ValueError:
        port = 0
    if port == 0:  # out of range, not a number, or 0
        raise ConfigError(f"NBCAST_SMTP_URL {shown!r}: the port must be a number in 1..65535")
    query = parse_qs(parts.query)
    security = "ssl" if parts.scheme == "smtps" else query.get("security", ["none"])[0]
    if security not in ("none", "starttls", "ssl"):
        raise ConfigError(f"NBCAST_SMTP_URL: security={security[:20]!r} is not none|starttls|ssl")
    options: dict[str, object] = {
        "host": hostname,
        "port": port or (465 if security == "ssl" else 25),
        "security": security,
    }
    if parts.username:
        options["username"] = unquote(parts.username)
        options["password"] = unquote(parts.password or "")
    return options
