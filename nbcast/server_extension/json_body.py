"""A request's JSON body as the API reads it: bounded, decoded, storable.

One function for every handler (:meth:`~nbcast.server_extension.handlers.base.
ApiHandler.json_body`) and for the notebook check's child process
(:mod:`nbcast.server_extension.check_work`), which must not import the server.
"""

from __future__ import annotations

import json
from typing import Any

from nbcast.limits import json_problem
from nbcast.server_extension.errors import ApiError

__all__ = ["MAX_JSON_BODY", "decode_json_body"]

MAX_JSON_BODY = 32 * 1024 * 1024
"""The largest JSON body accepted (a published notebook is the largest)."""


def decode_json_body(raw: bytes | bytearray) -> Any:
    """``raw`` decoded, checked for size, depth and text nbcast cannot store
    (:func:`~nbcast.limits.json_problem`); :class:`ApiError` otherwise (413 past
    :data:`MAX_JSON_BODY`, 400 for the rest)."""
    if len(raw) > MAX_JSON_BODY:
        raise ApiError(413, f"the body is larger than {MAX_JSON_BODY:,} bytes", code="too_large")
    if not raw.strip():
        raise ApiError(400, "a JSON body is required", field="body")
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError):
        raise ApiError(400, "the body is not JSON", field="body") from None
    problem = json_problem(body)
    if problem:
        raise ApiError(400, f"the body {problem}", field="body")
    return body
