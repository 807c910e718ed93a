"""The ``slack`` channel: ``chat.postMessage``, then the files in the message's thread.

A send posts one message to the recipient (a channel id such as ``C0123ABCD``; a name
such as ``#reports`` can be posted to, but see :meth:`SlackChannel.check`) carrying
``metadata = {"event_type": "nbcast_delivery", "event_payload": {"key": <ledger
key>}}`` and the key again in a context block, then uploads the attachments with
``files_upload_v2`` (``files.getUploadURLExternal``, a POST of the bytes,
``files.completeUploadExternal`` with ``channel_id`` and ``thread_ts``) into that
message's thread. The receipt records ``channel`` and ``ts`` (what Slack needs to
find, edit or delete the message) and the uploaded file ids.

Error mapping:

=====================================================  =================================
What happened                                          Raised
=====================================================  =================================
HTTP 429 still after the client's own wait-and-retry   TransientChannelError(retry_after
(or a ``Retry-After`` longer than ``max_rate_limit_    = the ``Retry-After`` header,
wait``), ``ratelimited``                               bounded; nonsense is ignored)
HTTP 5xx, ``internal_error``, ``fatal_error``,         TransientChannelError
``service_unavailable``, ``request_timeout``;
connection refused, DNS, TLS (nothing was sent)
``channel_not_found``, ``not_in_channel``,             PermanentChannelError
``invalid_auth``, ``is_archived`` and every other
``ok: false`` error
a timeout or disconnect while waiting for the answer   OutcomeUnknownError
to ``chat.postMessage``, or an answer that is not
Slack's (malformed JSON, ``ok`` without ``channel``
and ``ts``)
=====================================================  =================================

Retries: the client gets a :class:`~slack_sdk.http_retry.RateLimitErrorRetryHandler`
(once, by default) because a 429 means Slack did nothing, and a short wait inside
the send is cheaper than a round through the ledger. It gets *no*
connection-error handler (slack_sdk's default one): that handler retries a request
whose answer was lost, which for ``chat.postMessage`` is how a report gets posted
twice — the ledger's :meth:`check` is the safe way back from that.

What is kept: the receipt's ``channel``, ``ts`` and file ids are checked to be short
strings, and any text of Slack's that ends up in a receipt or an error (an error
code, a failed upload's message) is cut to a few hundred characters.

Files: once the message is posted the delivery has happened; a failed upload is
recorded in the receipt (``files_error``) rather than raised, since a retry would
post the message again.

Thread-safety: slack_sdk's ``WebClient`` opens a connection per request and keeps
no per-request state on the client, so one channel may be shared by threads.
"""

from __future__ import annotations

import http.client
import json
import logging
import random
import ssl
import time
from collections.abc import Mapping
from datetime import timedelta
from typing import TYPE_CHECKING, Any, ClassVar, cast
from urllib.error import URLError

from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError, SlackClientError
from slack_sdk.http_retry import RateLimitErrorRetryHandler
from slack_sdk.http_retry.request import HttpRequest
from slack_sdk.http_retry.response import HttpResponse
from slack_sdk.http_retry.state import RetryState
from slack_sdk.web import SlackResponse

from nbcast.delivery.channels._peer import parse_retry_after, peer_text
from nbcast.delivery.channels.base import Channel, Message, Receipt
from nbcast.errors import OutcomeUnknownError, PermanentChannelError, TransientChannelError

if TYPE_CHECKING:
    from nbcast.delivery.settings import DeliverySettings

__all__ = ["EVENT_TYPE", "SlackChannel"]

log = logging.getLogger(__name__)

EVENT_TYPE = "nbcast_delivery"
"""The ``event_type`` of the message metadata nbcast attaches to every post."""

_TRANSIENT_ERRORS = frozenset(
    {"ratelimited", "internal_error", "fatal_error", "service_unavailable", "request_timeout"}
)
_HISTORY_PAGES = 10
"""How many pages of history :meth:`SlackChannel.check` reads at most."""
_MAYBE_POSTED_ERRORS = frozenset({"internal_error", "fatal_error", "request_timeout"})
_HISTORY_SLACK = timedelta(minutes=10)
"""How far before the run's end :meth:`SlackChannel.check` looks (clock skew)."""
_ID_LIMIT = 64
"""The longest ``channel``, ``ts`` or file id kept from an answer."""
_MAX_FILES = 50


class _BoundedRateLimitRetryHandler(RateLimitErrorRetryHandler):
    """Waits out a 429 inside the send only when Slack asks for a short wait; a long
    one goes back to the ledger (as ``retry_after``) instead of holding a worker."""

    def __init__(self, max_retry_count: int, max_wait: float) -> None:
        super().__init__(max_retry_count=max_retry_count)
        self.max_wait = max_wait

    def _can_retry(
        self,
        *,
        state: RetryState,
        request: HttpRequest,
        response: HttpResponse | None = None,
        error: Exception | None = None,
    ) -> bool:
        if response is None or response.status_code != 429:
            return False
        wait = _retry_after(response.headers)
        return wait is not None and wait <= self.max_wait

    def prepare_for_next_attempt(
        self,
        *,
        state: RetryState,
        request: HttpRequest,
        response: HttpResponse | None = None,
        error: Exception | None = None,
    ) -> None:
        # slack_sdk's own version int()s the header (a "1.5" would raise) and sleeps
        # as long as it says; this one sleeps the bounded wait _can_retry accepted.
        wait = _retry_after(response.headers) if response is not None else None
        state.next_attempt_requested = True
        time.sleep(min(wait if wait is not None else 1.0, self.max_wait) + random.random())
        state.increment_current_attempt()


class SlackChannel(Channel):
    """Posts reports to Slack conversations (module docstring)."""

    configured_by = "NBCAST_SLACK_TOKEN"

    name: ClassVar[str] = "slack"
    verifiable: ClassVar[bool] = True  # check() reads the channel's history
    attaches_files: ClassVar[bool] = True

    @classmethod
    def from_environment(
        cls, environ: Mapping[str, str], settings: DeliverySettings
    ) -> SlackChannel | None:
        """Configured by ``NBCAST_SLACK_TOKEN`` (and ``NBCAST_SLACK_API_URL``); None
        without a token."""
        if not settings.slack_token:
            return None
        return cls(settings.slack_token, base_url=settings.slack_api_url)

    max_retry_after = 300.0  # Slack's rate-limit windows are a minute; 5 is plenty

    def __init__(
        self,
        token: str,
        *,
        base_url: str = "https://slack.com/api/",
        timeout: float = 10.0,
        upload_files: bool = True,
        history_limit: int = 100,
        rate_limit_retries: int = 1,
        max_rate_limit_wait: float = 5.0,
    ) -> None:
        self.upload_files = upload_files
        self.history_limit = history_limit
        # urllib takes a float timeout; slack_sdk annotates it as int.
        self.client = WebClient(
            token=token, base_url=base_url, timeout=cast(int, timeout), retry_handlers=[]
        )
        if rate_limit_retries > 0:
            self.client.retry_handlers.append(
                _BoundedRateLimitRetryHandler(rate_limit_retries, max_rate_limit_wait)
            )

    def send(self, message: Message) -> Receipt:
        """Post ``message`` and upload its files (error mapping: module docstring)."""
        try:
            posted = self.client.chat_postMessage(
                channel=message.recipient,
                text=message.text or message.subject,
                blocks=blocks(message),
                metadata={"event_type": EVENT_TYPE, "event_payload": {"key": message.key}},
                unfurl_links=False,
            )
        except (TimeoutError, ConnectionError, ssl.SSLError, http.client.HTTPException) as exc:
            # Raised while reading the answer: the request itself went out.
            raise OutcomeUnknownError(
                f"Slack did not answer chat.postMessage: {peer_text(exc)}"
            ) from exc
        except ValueError as exc:  # an answer that is not JSON after all: was it posted?
            raise OutcomeUnknownError(
                f"Slack's answer to chat.postMessage is not JSON: {peer_text(exc)}"
            ) from exc
        except Exception as exc:
            mapped = _mapped(exc)
            if isinstance(exc, SlackApiError) and _maybe_posted(exc):
                # Slack (or a proxy) failed after taking the request: "some of the
                # operation may have succeeded". Check before posting again.
                raise OutcomeUnknownError(str(mapped)) from exc
            raise mapped from exc
        channel, ts = _short_id(posted.get("channel")), _short_id(posted.get("ts"))
        if channel is None or ts is None:  # "ok" but not where: look before posting again
            raise OutcomeUnknownError("Slack's answer to chat.postMessage has no channel and ts")
        detail: dict[str, Any] = {"channel": channel, "ts": ts}
        if self.upload_files and message.attachments:
            try:
                uploaded = self.client.files_upload_v2(
                    file_uploads=[
                        {"filename": a.filename, "content": a.content, "title": a.filename}
                        for a in message.attachments
                    ],
                    channel=channel,
                    thread_ts=ts,
                )
                files = uploaded.get("files") or []
                detail["files"] = [
                    _short_id(f.get("id") if isinstance(f, dict) else None) or "?"
                    for f in (files if isinstance(files, list) else [])[:_MAX_FILES]
                ]
            except Exception as exc:
                log.warning("delivery %s: posted as %s but files failed: %s", message.key, ts, exc)
                detail["files_error"] = peer_text(exc)
        return Receipt(detail)

    def check(self, message: Message) -> Receipt | None:
        """The receipt of an earlier post of ``message``, found in the conversation's
        recent history (``history_limit`` messages since shortly before the run
        ended) by its metadata key or, failing that, the key in its text or blocks.

        None when it is not there. When the history cannot be read for good
        (``missing_scope``, a recipient given by name, which ``conversations.history``
        does not accept, or more pages than it reads) it raises
        :class:`~nbcast.errors.PermanentChannelError`: the ledger then sends again and
        marks a possible duplicate. A transient failure to look raises
        :class:`~nbcast.errors.TransientChannelError`, so that a resend is not decided
        on a history nobody could read.
        """
        oldest = message.report.finished_at - _HISTORY_SLACK
        found: dict[str, Any] | None = None
        cursor: str | None = None
        for _ in range(_HISTORY_PAGES):  # every message since shortly before the run ended
            try:
                history = self.client.conversations_history(
                    channel=message.recipient,
                    limit=self.history_limit,
                    oldest=f"{oldest.timestamp():.6f}",
                    include_all_metadata=True,
                    cursor=cursor,
                )
            except (TimeoutError, ConnectionError) as exc:
                raise TransientChannelError(
                    f"Slack history could not be read: {peer_text(exc)}"
                ) from exc
            except Exception as exc:
                mapped = _mapped(exc)
                if isinstance(mapped, TransientChannelError):
                    raise mapped from exc
                raise PermanentChannelError(  # the ledger sends, marked a possible duplicate
                    f"Slack history cannot be read: {peer_text(exc)}"
                ) from exc
            messages = history.get("messages") or []
            for item in messages if isinstance(messages, list) else []:
                if not isinstance(item, dict) or _short_id(item.get("ts")) is None:
                    continue
                metadata = item.get("metadata") or {}
                payload = metadata.get("event_payload") if isinstance(metadata, dict) else None
                payload = payload if isinstance(payload, dict) else {}
                if (
                    isinstance(metadata, dict)
                    and metadata.get("event_type") == EVENT_TYPE
                    and payload.get("key") == message.key
                ):
                    return Receipt({"found_by": "metadata", **_posted(item, message)})
                if found is None and message.key in _visible_text(item):
                    found = {"found_by": "text", **_posted(item, message)}
            meta = history.get("response_metadata")
            cursor = meta.get("next_cursor") if isinstance(meta, dict) else None
            cursor = cursor if isinstance(cursor, str) and len(cursor) <= 1024 else None
            if not history.get("has_more") or not cursor:
                return None if found is None else Receipt(found)
        if found is not None:
            return Receipt(found)
        raise PermanentChannelError(f"Slack history beyond {_HISTORY_PAGES} pages: cannot tell")

    def close(self) -> None:
        """Nothing to release: the client holds no connections between requests."""


def blocks(message: Message) -> list[dict[str, Any]]:
    """The Block Kit blocks of a post: title, summary, links, and a context line that
    carries the ledger key (so :meth:`SlackChannel.check` finds it without metadata)."""
    report = message.report
    out: list[dict[str, Any]] = [
        {"type": "header", "text": {"type": "plain_text", "text": message.subject[:150]}},
    ]
    if report.late_by is not None:
        minutes = int(report.late_by.total_seconds() // 60)
        out.append(_context(f":warning: Delivered {minutes} min after it was due."))
    if message.text:
        out.append(
            {"type": "section", "text": {"type": "mrkdwn", "text": _escape(message.text)[:3000]}}
        )
    if message.links:
        lines = "\n".join(f"<{url}>" for url in message.links)
        out.append({"type": "section", "text": {"type": "mrkdwn", "text": lines[:3000]}})
    out.append(
        _context(
            f"nbcast · {_escape(report.tenant)}/{_escape(report.definition)} "
            f"v{report.version} · run {report.run_id} · `{message.key}`"
        )
    )
    return out


def _context(text: str) -> dict[str, Any]:
    return {"type": "context", "elements": [{"type": "mrkdwn", "text": text}]}


def _escape(text: str) -> str:
    """Slack's mrkdwn escaping: ``&``, ``<`` and ``>`` only."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _visible_text(item: dict[str, Any]) -> str:
    return str(item.get("text") or "") + json.dumps(item.get("blocks") or [])


def _posted(item: dict[str, Any], message: Message) -> dict[str, Any]:
    channel = _short_id(item.get("channel")) or peer_text(message.recipient, _ID_LIMIT)
    return {"channel": channel, "ts": _short_id(item.get("ts"))}


def _short_id(value: object) -> str | None:
    """A channel id, ``ts`` or file id from an answer, if it looks like one."""
    if not isinstance(value, str | int | float) or isinstance(value, bool):
        return None
    text = str(value)
    return text if 0 < len(text) <= _ID_LIMIT and text.isprintable() else None


def _retry_after(headers: dict[str, Any]) -> float | None:
    """Seconds from a ``Retry-After`` header (slack_sdk hands values as str or list),
    bounded; None when absent or nonsense."""
    for name, value in headers.items():
        if name.lower() == "retry-after":
            return parse_retry_after(value)
    return None


def _maybe_posted(exc: SlackApiError) -> bool:
    """Whether a failed ``chat.postMessage`` may still have posted: a 5xx from Slack or
    a proxy, or an error Slack documents as "some of the operation may have
    succeeded". (A 429 or any other error means it was not posted.)"""
    response: SlackResponse = exc.response
    return response.status_code >= 500 or _error_code(response) in _MAYBE_POSTED_ERRORS


def _error_code(response: SlackResponse) -> str | None:
    """The ``error`` of an answer, if it is a string (an answer may be anything)."""
    error = response.get("error") if isinstance(response.data, dict) else None
    return error if isinstance(error, str) else None


def _mapped(exc: Exception) -> TransientChannelError | PermanentChannelError:
    """The channel error for a failure where Slack answered, or nothing was sent."""
    if isinstance(exc, SlackApiError):
        response: SlackResponse = exc.response
        status = response.status_code
        error = _error_code(response)
        if status == 429 or error == "ratelimited":
            return TransientChannelError(
                "Slack rate limit", retry_after=_retry_after(dict(response.headers))
            )
        if status >= 500:
            return TransientChannelError(f"Slack answered HTTP {status}")
        if error in _TRANSIENT_ERRORS:
            return TransientChannelError(f"Slack error: {error}")
        return PermanentChannelError(f"Slack error: {peer_text(error or f'HTTP {status}')}")
    if isinstance(exc, URLError | SlackClientError | OSError):
        return TransientChannelError(f"Slack could not be reached: {peer_text(exc)}")
    return TransientChannelError(f"Slack request failed: {peer_text(repr(exc))}")
