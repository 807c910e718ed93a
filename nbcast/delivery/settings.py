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
``NBCAST_BASE_URL``         where nbcast's server is reached (links, unsubscribe);
                            default ``http://127.0.0.1:8888``
``NBCAST_SIGNING_KEYS``     ``id:secret,…`` current first (see
                            :mod:`nbcast.delivery.signing`)
``NBCAST_LINK_TTL``         how long a signed link lasts (default ``7d``)
==========================  ========================================================

A subscription on a channel that is not configured fails (``no_channel``) rather
than waiting forever; ``nbcast deliver --retry-failed RUN`` sends it once configured.
The ``link`` channel needs no configuration.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from urllib.parse import parse_qs, unquote, urlsplit

from nbcast.definitions.spec import parse_duration
from nbcast.delivery.channels import Channel, channels
from nbcast.errors import ConfigError

__all__ = ["DeliverySettings", "build_channels", "load_delivery_settings"]


@dataclass(frozen=True, kw_only=True)
class DeliverySettings:
    """The delivery plane's configuration (module docstring)."""

    smtp_url: str | None = None
    smtp_from: str = "nbcast@localhost"
    slack_token: str | None = None
    slack_api_url: str = "https://slack.com/api/"
    webhook_secret: str | None = None
    base_url: str = "http://127.0.0.1:8888"
    link_ttl: timedelta = timedelta(days=7)


def load_delivery_settings(environ: Mapping[str, str] | None = None) -> DeliverySettings:
    """Read :class:`DeliverySettings` from the environment."""
    env = os.environ if environ is None else environ
    try:
        ttl = parse_duration(env.get("NBCAST_LINK_TTL", "7d"))
    except ValueError as exc:
        raise ConfigError(f"NBCAST_LINK_TTL: {exc}") from None
    return DeliverySettings(
        smtp_url=env.get("NBCAST_SMTP_URL") or None,
        smtp_from=env.get("NBCAST_SMTP_FROM") or "nbcast@localhost",
        slack_token=env.get("NBCAST_SLACK_TOKEN") or None,
        slack_api_url=env.get("NBCAST_SLACK_API_URL") or "https://slack.com/api/",
        webhook_secret=env.get("NBCAST_WEBHOOK_SECRET") or None,
        base_url=env.get("NBCAST_BASE_URL") or "http://127.0.0.1:8888",
        link_ttl=ttl,
    )


def smtp_options(url: str) -> dict[str, object]:
    """``EmailChannel`` keyword arguments from an ``smtp://`` / ``smtps://`` URL."""
    parts = urlsplit(url)
    if parts.scheme not in ("smtp", "smtps") or not parts.hostname:
        raise ConfigError(f"NBCAST_SMTP_URL must be smtp://host[:port] or smtps://…, not {url!r}")
    query = parse_qs(parts.query)
    security = "ssl" if parts.scheme == "smtps" else query.get("security", ["none"])[0]
    if security not in ("none", "starttls", "ssl"):
        raise ConfigError(f"NBCAST_SMTP_URL: security={security!r} is not none|starttls|ssl")
    options: dict[str, object] = {
        "host": parts.hostname,
        "port": parts.port or (465 if security == "ssl" else 25),
        "security": security,
    }
    if parts.username:
        options["username"] = unquote(parts.username)
        options["password"] = unquote(parts.password or "")
    return options


def build_channels(settings: DeliverySettings) -> dict[str, Channel]:
    """Every configured channel, by name (``link`` always)."""
    built: dict[str, Channel] = {"link": channels.create("link")}
    if settings.smtp_url:
        built["email"] = channels.create(
            "email", sender=settings.smtp_from, **smtp_options(settings.smtp_url)
        )
    if settings.slack_token:
        built["slack"] = channels.create(
            "slack", token=settings.slack_token, base_url=settings.slack_api_url
        )
    if settings.webhook_secret:
        built["webhook"] = channels.create("webhook", secret=settings.webhook_secret)
    return built
