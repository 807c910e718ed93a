"""Deprecated: use :mod:`nbcast.testing.slack_api` (this module re-exports it)."""

from __future__ import annotations

from nbcast.testing.slack_api import TOKEN, FakeSlackAPI, Post, UploadedFile, slack_server

__all__ = ["TOKEN", "FakeSlackAPI", "Post", "UploadedFile", "slack_server"]
