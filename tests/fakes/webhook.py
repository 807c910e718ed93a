"""Deprecated: use :mod:`nbcast.testing.webhook` (this module re-exports it)."""

from __future__ import annotations

from nbcast.testing.webhook import (
    OK,
    GarbageReceiver,
    WebhookReceiver,
    garbage_receiver,
    webhook_receiver,
)

__all__ = ["OK", "GarbageReceiver", "WebhookReceiver", "garbage_receiver", "webhook_receiver"]
