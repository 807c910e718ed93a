"""Deprecated: use :mod:`nbcast.testing.smtp` (this module re-exports it)."""

from __future__ import annotations

from nbcast.testing.smtp import FakeSMTPServer, ReceivedMail, RefusedMail, free_port, smtp_server

__all__ = ["FakeSMTPServer", "ReceivedMail", "RefusedMail", "free_port", "smtp_server"]
