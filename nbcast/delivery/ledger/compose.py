"""Message composition: what one claimed row sends, built from its renditions.

What goes in a :class:`~nbcast.delivery.channels.base.Message` follows the channel's
capabilities (:mod:`nbcast.delivery.channels.base`), never its name: the rendered
files as attachments (``attaches_files``), a signed link per file (``sends_links``,
recorded in ``signed_links``), the HTML rendition as the body (``html_body``), a
signed one-click unsubscribe URL (``one_click_unsubscribe``). A late delivery's
subject and summary say it is late, as its bannered renditions do. A test run's
(:mod:`nbcast.scheduler.trial`) says ``[TEST]`` in its subject and a banner above the
body, and offers no unsubscribe: the rendered files are untouched.

Links are per ledger row (:func:`~nbcast.delivery.links.delivery_link`): a retry of a
row carries the links, tokens and all, that its first attempt carried, unless one
was revoked or expired meanwhile (then a fresh one replaces it).
"""

from __future__ import annotations

import html as html_escaping
import re
import threading
from datetime import datetime, timedelta

from sqlalchemy.orm import Session

from nbcast.artifacts import ArtifactStore
from nbcast.delivery.channels.base import Attachment, Channel, Message
from nbcast.delivery.ledger.rows import ClaimedDelivery
from nbcast.delivery.links import delivery_link
from nbcast.delivery.models import Rendition
from nbcast.delivery.report import ReportInfo
from nbcast.delivery.signing import Signer
from nbcast.delivery.unsubscribe import unsubscribe_token, unsubscribe_url

__all__ = ["BLOB_CACHE_SIZE", "TEST_BANNER", "Composer", "message_key", "with_banner"]

BLOB_CACHE_SIZE = 16
"""Rendered files kept in memory: a run's files go to every recipient of a batch."""

HTML = "html"
"""The format whose rendition is the body of an ``html_body`` channel's message."""


TEST_BANNER = "TEST: a test run of this report; its subscribers were not sent it."
"""The line above a test run's message (:mod:`nbcast.scheduler.trial`)."""

_BODY = re.compile(r"<body\b[^>]*>", re.IGNORECASE)


def with_banner(html: str, text: str) -> str:
    """``html`` with a banner saying ``text`` at the top of its body (the rendered
    report itself is not touched: a test run's files are the report's own)."""
    banner = (
        '<div role="alert" style="background:#fff3cd;border:2px solid #b58100;'
        'color:#3d2c00;font:bold 16px sans-serif;padding:10px 14px;margin:0 0 12px">'
        f"{html_escaping.escape(text)}</div>"
    )
    found = _BODY.search(html)
    if found is None:
        return banner + html
    return html[: found.end()] + banner + html[found.end() :]


def message_key(row: ClaimedDelivery) -> str:
    """The ledger key, the same on every attempt: ``nbcast-d<delivery>-r<run>``."""
    return f"nbcast-d{row.id}-r{row.run_id}"


class Composer:
    """Builds messages for claimed rows (module docstring)."""

    def __init__(
        self, store: ArtifactStore, signer: Signer, *, base_url: str, link_ttl: timedelta
    ) -> None:
        self.store = store
        self.signer = signer
        self.base_url = base_url
        self.link_ttl = link_ttl
        self._blobs: dict[str, bytes] = {}
        self._lock = threading.Lock()

    @staticmethod
    def wanted_formats(row: ClaimedDelivery, channel: Channel) -> set[str]:
        """The renditions a row's message is made of: its formats, plus the HTML body
        of a channel that has one."""
        return set(row.formats) | ({HTML} if channel.html_body else set())

    def blob(self, sha256: str) -> bytes:
        """An artifact's bytes; the last :data:`BLOB_CACHE_SIZE` are kept."""
        with self._lock:
            data = self._blobs.get(sha256)
        if data is None:
            data = self.store.get(sha256)
            with self._lock:
                if len(self._blobs) >= BLOB_CACHE_SIZE:
                    self._blobs.pop(next(iter(self._blobs)))
                self._blobs[sha256] = data
        return data

    def message(
        self,
        session: Session,
        row: ClaimedDelivery,
        channel: Channel,
        report: ReportInfo,
        renditions: dict[str, Rendition],
        now: datetime,
    ) -> Message:
        """The message ``row`` sends through ``channel``: ``renditions`` by format are
        the rendered files (the late ones for a late report)."""
        attachments: list[Attachment] = []
        html_body = ""
        for fmt in sorted(renditions):
            rendition = renditions[fmt]
            assert rendition.sha256 is not None
            if fmt == HTML and channel.html_body:
                html_body = self.blob(rendition.sha256).decode()
            if fmt in row.formats and channel.attaches_files:
                attachments.append(
                    Attachment(
                        filename=rendition.filename or f"{report.stem}.{fmt}",
                        media_type=rendition.media_type or "application/octet-stream",
                        content=self.blob(rendition.sha256),
                    )
                )
        links: list[str] = []
        if channel.sends_links:
            for fmt in sorted(row.formats):
                rendition = renditions[fmt]
                assert rendition.sha256 is not None
                links.append(
                    delivery_link(
                        session,
                        self.signer,
                        tenant_id=row.tenant_id,
                        run_id=row.run_id,
                        delivery_id=row.id,
                        recipient=row.recipient,
                        sha256=rendition.sha256,
                        filename=rendition.filename or f"{report.stem}.{fmt}",
                        media_type=rendition.media_type or "application/octet-stream",
                        now=now,
                        ttl=self.link_ttl,
                        base_url=self.base_url,
                    ).url
                )
        unsubscribe = None
        # A test run's address subscribes to nothing: it has no unsubscribe.
        if channel.one_click_unsubscribe and not report.test:
            token = unsubscribe_token(
                self.signer,
                tenant_id=row.tenant_id,
                scope=report.definition,
                channel=row.channel,
                recipient=row.recipient,
            )
            unsubscribe = unsubscribe_url(self.base_url, token)
        late = " (late)" if report.late_by else ""
        summary = f"{report.title}{late}: version {report.version}, run {report.run_id}"
        subject = f"{report.title}{late}"
        html = html_body or f"<p>{html_escaping.escape(summary)}</p>"
        if report.test:
            subject = f"[TEST] {subject}"
            summary = f"{TEST_BANNER} {summary}"
            html = with_banner(html, TEST_BANNER)
        return Message(
            key=message_key(row),
            delivery_id=row.id,
            attempt=row.attempt,
            recipient=row.recipient,
            report=report,
            subject=subject,
            html=html,
            text=summary,
            attachments=tuple(attachments),
            unsubscribe_url=unsubscribe,
            links=tuple(links),
        )
