"""Deprecated home of the test peers: they are public now, in :mod:`nbcast.testing`.

Thin re-exports kept while tests still import ``tests.fakes``; new code imports
:mod:`nbcast.testing.http`, :mod:`nbcast.testing.smtp`, :mod:`nbcast.testing.slack_api`
and :mod:`nbcast.testing.webhook` directly.
"""

from __future__ import annotations

from nbcast.testing.http import HTTPReply, HTTPRequest, LocalHTTPServer

__all__ = ["HTTPReply", "HTTPRequest", "LocalHTTPServer"]
