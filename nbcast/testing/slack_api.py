"""The slice of Slack's Web API that slack_sdk's ``WebClient`` uses, on 127.0.0.1.

Only the standard library: point nbcast's Slack channel (or any slack_sdk client) at
it in a test::

    from nbcast.testing.slack_api import TOKEN, slack_server

    with slack_server(channels={"C0REPORTS": "reports"}) as slack:
        channel = SlackChannel(TOKEN, base_url=slack.base_url, timeout=1.0)
        ...
        slack.posts[0].ts, slack.files[0].content

or run a delivery worker against it with ``NBCAST_SLACK_TOKEN=TOKEN`` and
``NBCAST_SLACK_API_URL=slack.base_url``.

Methods: ``auth.test``, ``chat.postMessage`` (JSON or form body),
``files.getUploadURLExternal``, the upload URL it hands out (a POST of the bytes),
``files.completeUploadExternal`` and ``conversations.history`` (newest first, with
``metadata`` when ``include_all_metadata`` is set, ``oldest``/``limit`` honoured).
Answers are shaped like Slack's: ``{"ok": true, ...}`` or ``{"ok": false, "error":
...}`` with HTTP 200. A channel is known by id or by name (``"reports"``,
``"#reports"``); posts to anything else get ``channel_not_found``. Requests need
``Authorization: Bearer <token>`` (``invalid_auth`` otherwise).

Faults, for the next ``times`` matching calls (``method=None``: any API method):

- :meth:`FakeSlackAPI.rate_limit` — HTTP 429 with ``Retry-After``;
- :meth:`FakeSlackAPI.server_error` — HTTP 500 (or another status);
- :meth:`FakeSlackAPI.fail` — ``ok: false`` with the given error;
- :meth:`FakeSlackAPI.hang` — do the call (the post is stored), then wait
  ``seconds`` before answering: "accepted, then the answer was lost";
- :meth:`FakeSlackAPI.garble` — HTTP 200 with a body that is not Slack's JSON
  (malformed JSON by default), optionally only for calls naming one ``channel``.

The same faults can be given to :func:`slack_server` as ``rate_limit_next=N``,
``server_error_next=N``, ``hang_next=N`` (with ``hang_seconds``). Records are
appended under a lock and read as snapshots.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs

from nbcast.testing.http import HTTPReply, HTTPRequest, LocalHTTPServer

__all__ = ["TOKEN", "FakeSlackAPI", "Post", "UploadedFile", "slack_server"]

TOKEN = "xoxb-nbcast-test"
"""The bot token the fake accepts unless given another (``FakeSlackAPI(token=...)``)."""


@dataclass(frozen=True)
class Post:
    """A message posted with ``chat.postMessage``."""

    channel: str
    """The channel id it landed in."""
    ts: str
    text: str
    blocks: list[dict[str, Any]]
    metadata: dict[str, Any] | None
    thread_ts: str | None = None


@dataclass(frozen=True)
class UploadedFile:
    """A file uploaded through the v2 flow (bytes, then completion)."""

    id: str
    filename: str
    title: str | None
    content: bytes
    channel: str | None = None
    thread_ts: str | None = None
    initial_comment: str | None = None


@dataclass
class _Fault:
    kind: str  # "status" | "error" | "hang" | "garble"
    method: str | None
    remaining: int
    status: int = 200
    error: str = ""
    retry_after: str | None = None
    seconds: float = 0.0
    channel: str | None = None
    body: bytes = b""


@dataclass
class _State:
    lock: threading.Lock = field(default_factory=threading.Lock)
    posts: list[Post] = field(default_factory=list)
    files: dict[str, UploadedFile] = field(default_factory=dict)
    calls: list[str] = field(default_factory=list)
    faults: list[_Fault] = field(default_factory=list)


class FakeSlackAPI:
    """A running fake Slack Web API; see the module docstring and :func:`slack_server`."""

    def __init__(self, *, token: str = TOKEN, channels: dict[str, str] | None = None) -> None:
        self.token = token
        self.channels = dict(channels or {"C0REPORTS": "reports"})
        self._state = _State()
        self._ids = itertools.count(1)
        self._http = LocalHTTPServer(self._handle)
        self.base_url = f"{self._http.root}/api/"

    # -- life cycle ------------------------------------------------------------------

    def start(self) -> FakeSlackAPI:
        """Serve in a daemon thread."""
        self._http.start()
        return self

    def stop(self) -> None:
        """Stop serving; hanging answers are dropped."""
        self._http.stop()

    def __enter__(self) -> FakeSlackAPI:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()

    # -- records -------------------------------------------------------------------

    @property
    def posts(self) -> list[Post]:
        """Messages posted so far, oldest first (a snapshot)."""
        with self._state.lock:
            return list(self._state.posts)

    @property
    def files(self) -> list[UploadedFile]:
        """Files uploaded so far (a snapshot)."""
        with self._state.lock:
            return list(self._state.files.values())

    @property
    def calls(self) -> list[str]:
        """Every API method called, in order (``"upload"`` for an upload URL POST)."""
        with self._state.lock:
            return list(self._state.calls)

    # -- faults --------------------------------------------------------------------

    def rate_limit(
        self, times: int = 1, *, retry_after: int = 1, method: str | None = None
    ) -> None:
        """Answer HTTP 429 with ``Retry-After`` to the next ``times`` calls."""
        self._add(_Fault("status", method, times, status=429, retry_after=str(retry_after)))

    def server_error(self, times: int = 1, *, status: int = 500, method: str | None = None) -> None:
        """Answer HTTP ``status`` (500) to the next ``times`` calls."""
        self._add(_Fault("status", method, times, status=status))

    def fail(self, error: str, times: int = 1, *, method: str | None = None) -> None:
        """Answer ``{"ok": false, "error": error}`` to the next ``times`` calls."""
        self._add(_Fault("error", method, times, error=error))

    def hang(
        self, times: int = 1, *, seconds: float = 3.0, method: str | None = "chat.postMessage"
    ) -> None:
        """Do the next ``times`` calls, then wait ``seconds`` before answering."""
        self._add(_Fault("hang", method, times, seconds=seconds))

    def garble(
        self,
        times: int = 1,
        *,
        method: str | None = None,
        channel: str | None = None,
        body: bytes = b'{"ok": tru',
    ) -> None:
        """Answer the next ``times`` calls (of ``method``, naming ``channel``) with
        HTTP 200 and ``body`` — malformed JSON unless told otherwise."""
        self._add(_Fault("garble", method, times, channel=channel, body=body))

    def _add(self, fault: _Fault) -> None:
        with self._state.lock:
            self._state.faults.append(fault)

    def _take_fault(self, method: str, params: dict[str, Any]) -> _Fault | None:
        channel = self._channel_id(params.get("channel") or params.get("channel_id"))
        with self._state.lock:
            for fault in self._state.faults:
                if (
                    fault.remaining > 0
                    and fault.method in (None, method)
                    and fault.channel in (None, channel)
                ):
                    fault.remaining -= 1
                    return fault
        return None

    # -- the API -------------------------------------------------------------------

    def _handle(self, request: HTTPRequest) -> HTTPReply:
        if request.path.startswith("/upload/"):
            return self._upload(request)
        if not request.path.startswith("/api/"):
            return HTTPReply(404, b"not found")
        method = request.path.removeprefix("/api/")
        with self._state.lock:
            self._state.calls.append(method)
        params = _params(request)
        fault = self._take_fault(method, params)
        if fault is not None and fault.kind == "garble":
            return HTTPReply(200, fault.body, {"Content-Type": "application/json"})
        if fault is not None and fault.kind == "status":
            headers = {"Content-Type": "application/json"}
            if fault.retry_after is not None:
                headers["Retry-After"] = fault.retry_after
            body = {"ok": False, "error": "ratelimited" if fault.status == 429 else "oops"}
            return HTTPReply(fault.status, json.dumps(body).encode(), headers)
        if fault is not None and fault.kind == "error":
            return _answer({"ok": False, "error": fault.error})
        if request.header("authorization") != f"Bearer {self.token}":
            return _answer({"ok": False, "error": "invalid_auth"})
        handler = {
            "auth.test": self._auth_test,
            "chat.postMessage": self._post_message,
            "files.getUploadURLExternal": self._get_upload_url,
            "files.completeUploadExternal": self._complete_upload,
            "conversations.history": self._history,
        }.get(method)
        result = {"ok": False, "error": "unknown_method"} if handler is None else handler(params)
        delay = fault.seconds if fault is not None and fault.kind == "hang" else 0.0
        return _answer(result, delay=delay)

    def _channel_id(self, channel: Any) -> str | None:
        name = str(channel or "").removeprefix("#")
        if name in self.channels:
            return name
        return next((cid for cid, cname in self.channels.items() if cname == name), None)

    def _auth_test(self, params: dict[str, Any]) -> dict[str, Any]:
        return {"ok": True, "user_id": "U0NBCAST", "team_id": "T0NBCAST", "bot_id": "B0NBCAST"}

    def _post_message(self, params: dict[str, Any]) -> dict[str, Any]:
        channel = self._channel_id(params.get("channel"))
        if channel is None:
            return {"ok": False, "error": "channel_not_found"}
        blocks = params.get("blocks") or []
        if isinstance(blocks, str):
            blocks = json.loads(blocks)
        metadata = params.get("metadata")
        if isinstance(metadata, str):
            metadata = json.loads(metadata)
        with self._state.lock:
            # Slack's ts: seconds.microseconds, unique per channel.
            ts = f"{time.time():.0f}.{next(self._ids):06d}"
            post = Post(
                channel=channel,
                ts=ts,
                text=str(params.get("text") or ""),
                blocks=list(blocks),
                metadata=metadata,
                thread_ts=params.get("thread_ts"),
            )
            self._state.posts.append(post)
        message = {"type": "message", "ts": ts, "text": post.text, "bot_id": "B0NBCAST"}
        return {"ok": True, "channel": channel, "ts": ts, "message": message}

    def _get_upload_url(self, params: dict[str, Any]) -> dict[str, Any]:
        file_id = f"F{next(self._ids):08d}"
        with self._state.lock:
            self._state.files[file_id] = UploadedFile(
                id=file_id,
                filename=str(params.get("filename")),
                title=None,
                content=b"",
            )
        return {"ok": True, "file_id": file_id, "upload_url": f"{self._http.root}/upload/{file_id}"}

    def _upload(self, request: HTTPRequest) -> HTTPReply:
        file_id = request.path.removeprefix("/upload/")
        with self._state.lock:
            self._state.calls.append("upload")
            known = self._state.files.get(file_id)
            if known is None:
                return HTTPReply(404, b"no such upload")
            self._state.files[file_id] = UploadedFile(
                id=file_id, filename=known.filename, title=None, content=request.body
            )
        return HTTPReply(200, f"OK - {len(request.body)}".encode(), {"Content-Type": "text/plain"})

    def _complete_upload(self, params: dict[str, Any]) -> dict[str, Any]:
        channel = params.get("channel_id")
        if channel is not None and self._channel_id(channel) is None:
            return {"ok": False, "error": "channel_not_found"}
        described = json.loads(params.get("files") or "[]")
        done = []
        with self._state.lock:
            for item in described:
                known = self._state.files.get(item["id"])
                if known is None:
                    return {"ok": False, "error": "file_not_found"}
                self._state.files[item["id"]] = UploadedFile(
                    id=known.id,
                    filename=known.filename,
                    title=item.get("title"),
                    content=known.content,
                    channel=channel,
                    thread_ts=params.get("thread_ts"),
                    initial_comment=params.get("initial_comment"),
                )
                done.append({"id": known.id, "name": known.filename, "title": item.get("title")})
        return {"ok": True, "files": done}

    def _history(self, params: dict[str, Any]) -> dict[str, Any]:
        channel = self._channel_id(params.get("channel"))
        if channel is None or channel != params.get("channel"):
            return {"ok": False, "error": "channel_not_found"}  # ids only, like Slack
        limit = int(params.get("limit") or 100)
        oldest = float(params.get("oldest") or 0)
        with_metadata = str(params.get("include_all_metadata")) in ("1", "true", "True")
        with self._state.lock:
            posts = [p for p in self._state.posts if p.channel == channel and not p.thread_ts]
        found = [p for p in reversed(posts) if float(p.ts) >= oldest][:limit]
        messages = []
        for post in found:
            item: dict[str, Any] = {
                "type": "message",
                "ts": post.ts,
                "text": post.text,
                "blocks": post.blocks,
                "bot_id": "B0NBCAST",
            }
            if with_metadata and post.metadata is not None:
                item["metadata"] = post.metadata
            messages.append(item)
        return {"ok": True, "messages": messages, "has_more": len(posts) > len(found)}


@contextlib.contextmanager
def slack_server(
    *,
    rate_limit_next: int = 0,
    server_error_next: int = 0,
    hang_next: int = 0,
    hang_seconds: float = 3.0,
    **options: Any,
) -> Iterator[FakeSlackAPI]:
    """A started :class:`FakeSlackAPI`, stopped on exit (module docstring)."""
    with FakeSlackAPI(**options) as server:
        if rate_limit_next:
            server.rate_limit(rate_limit_next)
        if server_error_next:
            server.server_error(server_error_next)
        if hang_next:
            server.hang(hang_next, seconds=hang_seconds)
        yield server


def _params(request: HTTPRequest) -> dict[str, Any]:
    """The call's arguments: JSON body, form body or query string, as slack_sdk sent."""
    params: dict[str, Any] = {k: v[-1] for k, v in request.query.items()}
    content_type = request.header("content-type") or ""
    if content_type.startswith("application/json"):
        params.update(json.loads(request.body or b"{}"))
    elif request.body:
        form = parse_qs(request.body.decode(), keep_blank_values=True)
        params.update({k: v[-1] for k, v in form.items()})
    return params


def _answer(result: dict[str, Any], *, delay: float = 0.0) -> HTTPReply:
    return HTTPReply(
        200, json.dumps(result).encode(), {"Content-Type": "application/json"}, delay=delay
    )
