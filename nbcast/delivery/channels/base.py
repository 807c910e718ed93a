"""The channel boundary: one message to one recipient, and what the peer answered.

The ledger (:mod:`nbcast.delivery.ledger`) owns retries, backoff, staleness and
suppression; a channel only sends, and says how it went:

- it returns a :class:`Receipt` when the peer accepted the message (the SMTP
  server's reply, Slack's ``ts``, the HTTP status): the ledger records it as evidence;
- it raises :class:`~nbcast.errors.TransientChannelError` (retry later, with the
  peer's ``Retry-After`` if it gave one), :class:`~nbcast.errors.PermanentChannelError`
  (do not retry), or :class:`~nbcast.errors.OutcomeUnknownError` (the request went
  out and no answer came back: it may have arrived).

A receipt, and the message of an error, is evidence kept in the ledger and shown by
``nbcast deliveries list``: a channel puts only short, bounded excerpts of what the
peer said there (a status, an id, a few hundred characters of a reply — never a
response body), and a ``retry_after`` it passes on is a finite, non-negative number
of seconds. The ledger cuts that delay to :attr:`Channel.max_retry_after`.

After an unknown outcome — or after a delivery worker died between sending and
recording — the ledger calls :meth:`Channel.check` before sending again. A channel
that can look (Slack: the channel's recent history, matched on the message's
``key``) returns the earlier receipt and nothing is sent twice; one that cannot
(SMTP) returns None, the message is sent again, and the ledger records the delivery
as a *possible duplicate*.

**Capabilities.** What the ledger prepares for a message depends on the channel's
class attributes, never on its name:

==========================  ===========================================================
attribute                   when True, the ledger …
==========================  ===========================================================
``attaches_files``          puts the subscription's rendered files in
                            :attr:`Message.attachments` (email, Slack)
``sends_links``             makes a signed link per rendered file and puts the URLs in
                            :attr:`Message.links` (link, webhook)
``html_body``               renders ``html`` for every such delivery, whatever its
                            ``formats``, and makes it :attr:`Message.html` (email)
``one_click_unsubscribe``   signs an unsubscribe token and puts its URL in
                            :attr:`Message.unsubscribe_url` (email's RFC 8058 headers)
``verifiable``              trusts :meth:`Channel.check` after an unknown outcome; a
                            resend through a channel that cannot check is recorded as a
                            possible duplicate (Slack can, SMTP cannot)
==========================  ===========================================================

**Class methods** the rest of nbcast calls without an instance, so a plug-in channel
is configured, validated and compared like a built-in one:

- :meth:`Channel.from_environment` makes the channel from the environment (None when
  it is not configured); ``nbcast delivery-worker`` builds every registered channel
  this way (:func:`nbcast.delivery.channels.build_channels`).
- :meth:`Channel.check_recipient` (from :class:`~nbcast.plugins.RecipientRules`, the
  part of a channel the definitions plane calls) says why a subscription's ``to`` cannot be a
  recipient, on its syntax alone, when a definition is published.
- :meth:`Channel.check_recipient_here` adds what depends on where nbcast runs (the
  webhook policy).
- :meth:`Channel.normalize_recipient` is how two spellings of one recipient compare
  (email addresses without case): a subscription may not list one twice, and an
  opt-out covers every spelling.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from nbcast.delivery.report import ReportInfo
from nbcast.plugins import RecipientRules

if TYPE_CHECKING:
    from nbcast.delivery.settings import DeliverySettings

__all__ = ["DEFAULT_MAX_ATTEMPTS", "Attachment", "Channel", "Message", "Receipt"]

DEFAULT_MAX_ATTEMPTS = 5
"""Attempts at one delivery before the ledger gives up, unless a channel says otherwise
(also the reaper's limit for a channel whose setting it cannot read)."""


@dataclass(frozen=True, kw_only=True)
class Attachment:
    """A rendered file sent with a message."""

    filename: str
    media_type: str
    content: bytes


@dataclass(frozen=True, kw_only=True)
class Message:
    """One delivery of one report to one recipient over one channel."""

    key: str
    """The ledger key, the same on every attempt: ``nbcast-d<delivery id>-r<run id>``.
    Channels put it where they can find it again (Message-ID, Slack metadata, a
    webhook header) so a resend can be recognised."""
    delivery_id: int
    attempt: int
    recipient: str
    """An email address, a Slack channel id or name, a webhook URL, a link's owner."""
    report: ReportInfo
    subject: str
    html: str
    """The body as HTML: the report itself (email) or a summary."""
    text: str
    """The body as plain text (email alternative, Slack fallback text)."""
    attachments: tuple[Attachment, ...] = ()
    unsubscribe_url: str | None = None
    """One-click unsubscribe URL (RFC 8058) carrying a signed token, for email."""
    links: tuple[str, ...] = ()
    """Signed links to the report's files (channels that send links)."""


@dataclass(frozen=True)
class Receipt:
    """What the peer answered, recorded in the ledger (JSON-serializable values)."""

    detail: dict[str, Any]


class Channel(RecipientRules, ABC):
    """Sends messages to recipients of one kind (module docstring)."""

    name: ClassVar[str]
    """Registry name and the ``channel`` of a subscription."""
    verifiable: ClassVar[bool] = False
    """:meth:`check` can tell that an earlier send arrived (module docstring)."""
    attaches_files: ClassVar[bool] = False
    """Messages carry the rendered files (module docstring)."""
    sends_links: ClassVar[bool] = False
    """Messages carry signed links to the rendered files (module docstring)."""
    html_body: ClassVar[bool] = False
    """Messages carry the HTML rendition as their body (module docstring)."""
    one_click_unsubscribe: ClassVar[bool] = False
    """Messages carry a signed one-click unsubscribe URL (module docstring)."""
    configured_by: ClassVar[str] = "its plug-in's settings"
    """What configures it, for people told that it is not configured (the variables
    :meth:`from_environment` reads: ``NBCAST_SMTP_URL``)."""
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    """Attempts before the ledger gives up (FAILED)."""
    backoff_base: float = 30.0
    """Seconds before the second attempt; doubled each time, with full jitter."""
    backoff_cap: float = 3600.0
    max_retry_after: float = 900.0
    """The longest delay, in seconds, that a peer's ``Retry-After`` may impose on a
    delivery (15 minutes): a longer one is cut to this, so a peer cannot park a
    delivery for days, or crash the worker with an absurd number. The retry still
    waits at least the channel's own backoff."""

    @classmethod
    def from_environment(
        cls, environ: Mapping[str, str], settings: DeliverySettings
    ) -> Channel | None:
        """This channel as configured by ``environ`` (and the delivery plane's parsed
        ``settings``), or None when it is not configured there. A malformed value is
        a :class:`~nbcast.errors.ConfigError` naming the variable. By default a
        channel is never configured: one that needs nothing returns ``cls()``."""
        return None

    @abstractmethod
    def send(self, message: Message) -> Receipt:
        """Send ``message``; raise a :class:`~nbcast.errors.ChannelError` subclass if
        it was not accepted (module docstring)."""

    def check(self, message: Message) -> Receipt | None:
        """Whether an earlier attempt at ``message`` arrived: its receipt if it did,
        None if it did not or this channel cannot tell. A
        :class:`~nbcast.errors.ChannelError` means it cannot look *now* (the ledger
        looks again later rather than risk a second copy)."""
        return None

    def close(self) -> None:
        """Release connections."""

    def __enter__(self) -> Channel:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()
