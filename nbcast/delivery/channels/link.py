"""The ``link`` channel: a signed, expiring, revocable URL per rendered file.

The ledger makes the links (:mod:`nbcast.delivery.links`) when it prepares the
message — it knows the renditions' hashes and holds the database session — and
passes their URLs in :attr:`~nbcast.delivery.channels.base.Message.links`. Sending
is then making them available: the receipt records the URLs, and ``nbcast
deliveries list`` shows them. There is nothing to retry and nothing to duplicate.
"""

from __future__ import annotations

from typing import ClassVar

from nbcast.delivery.channels.base import Channel, Message, Receipt
from nbcast.errors import PermanentChannelError

__all__ = ["LinkChannel"]


class LinkChannel(Channel):
    """Hands out the message's signed links (module docstring)."""

    name: ClassVar[str] = "link"
    max_attempts = 1

    def send(self, message: Message) -> Receipt:
        if not message.links:
            raise PermanentChannelError(f"{message.key}: no rendered file to link to")
        return Receipt({"links": list(message.links)})
