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
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar

from nbcast.delivery.report import ReportInfo

__all__ = ["Attachment", "Channel", "Message", "Receipt"]


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
    """Signed links to the report's files, when the subscription asks for them."""
    options: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Receipt:
    """What the peer answered, recorded in the ledger (JSON-serializable values)."""

    detail: dict[str, Any]


class Channel(ABC):
    """Sends messages to recipients of one kind (module docstring)."""

    name: ClassVar[str]
    verifiable: ClassVar[bool] = False
    """Whether :meth:`check` can tell that an earlier send arrived (Slack can, SMTP
    cannot). A resend through a channel that cannot check is recorded as a possible
    duplicate."""
    max_attempts: int = 5
    """Attempts before the ledger gives up (FAILED)."""
    backoff_base: float = 30.0
    """Seconds before the second attempt; doubled each time, with full jitter."""
    backoff_cap: float = 3600.0
    max_retry_after: float = 900.0
    """The longest delay, in seconds, that a peer's ``Retry-After`` may impose on a
    delivery (15 minutes): a longer one is cut to this, so a peer cannot park a
    delivery for days, or crash the worker with an absurd number. The retry still
    waits at least the channel's own backoff."""

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

    def close(self) -> None:  # noqa: B027 - optional hook, most channels hold nothing
        """Release connections."""

    def __enter__(self) -> Channel:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()
