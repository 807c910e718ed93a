"""The ``link`` channel: a signed, expiring, revocable URL per rendered file.

The ledger makes the links (:mod:`nbcast.delivery.links`) when it prepares the
message — it knows the renditions' hashes and holds the database session — and
passes their URLs in :attr:`~nbcast.delivery.channels.base.Message.links`
(:attr:`~nbcast.delivery.channels.base.Channel.sends_links`). Sending is then making
them available: the receipt records the URLs, and ``nbcast deliveries list`` shows
them. There is nothing to retry and nothing to duplicate. The links are served by the
server extension's ``/nbcast/links/<token>`` endpoint (planned: until it ships, a
link can be made and verified — :func:`~nbcast.delivery.links.verify_link` — but
nothing in nbcast serves it).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, ClassVar

from nbcast.delivery.channels.base import Channel, Message, Receipt
from nbcast.errors import PermanentChannelError

if TYPE_CHECKING:
    from nbcast.delivery.settings import DeliverySettings

__all__ = ["LinkChannel"]


class LinkChannel(Channel):
    """Hands out the message's signed links (module docstring)."""

    configured_by = "nothing"

    name: ClassVar[str] = "link"
    sends_links: ClassVar[bool] = True
    max_attempts = 1

    @classmethod
    def from_environment(
        cls, environ: Mapping[str, str], settings: DeliverySettings
    ) -> LinkChannel:
        """Always configured: it needs nothing."""
        return cls()

    def send(self, message: Message) -> Receipt:
        if not message.links:
            raise PermanentChannelError(f"{message.key}: no rendered file to link to")
        return Receipt({"links": list(message.links)})
