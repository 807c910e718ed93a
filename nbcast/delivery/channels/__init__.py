"""Channels by name: ``email``, ``slack``, ``link``, ``webhook``; third parties add
theirs through the entry point group ``nbcast.channels`` (see :mod:`nbcast.registry`)."""

from __future__ import annotations

from nbcast.delivery.channels.base import Attachment, Channel, Message, Receipt
from nbcast.registry import Registry

__all__ = ["Attachment", "Channel", "Message", "Receipt", "channels"]

channels: Registry[Channel] = Registry(
    "channel",
    "nbcast.channels",
    {
        "email": "nbcast.delivery.channels.email:EmailChannel",
        "slack": "nbcast.delivery.channels.slack:SlackChannel",
        "link": "nbcast.delivery.channels.link:LinkChannel",
        "webhook": "nbcast.delivery.channels.webhook:WebhookChannel",
    },
)
"""The process-wide channel registry: ``channels.create("email", host=…)``."""
