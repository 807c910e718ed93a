"""``/nbcast/api/v1/schedule/preview``: what a schedule would do, touching no definition.

The face of :func:`nbcast.scheduler.preview.preview`, the function ``nbcast schedule
preview`` calls, with the CLI's inputs as query parameters (a GET: it changes
nothing) and its ``--json`` rows as the answer:

=================  =====================  ===========================================
query parameter    CLI option             meaning
=================  =====================  ===========================================
``cron``           ``--cron``             five-field cron (or ``every``, not both)
``every``          ``--every``            an interval such as ``15m``
``start``          ``--start``            anchor instant of an ``every`` schedule
``tz``             ``--tz``               IANA zone (default UTC)
``from``           ``--from``             range start, incl. (instant or date)
``until``          ``--to``               range end, excl. (instant or date)
``dst_gap``        ``--dst-gap``          auto | shift | skip
``dst_fold``       ``--dst-fold``         auto | first | last | both
``limit``          —                      the most slots (1 to 10,000; default 1,000)
=================  =====================  ===========================================

Each row also has ``note``: what DST does to that slot ("02:30 does not exist on
2026-03-08 (clocks go forward): runs at 03:00 EDT"), or null on an ordinary day — the
JupyterLab dialog shows it next to the fire time. A bare date is the start of that
day in ``tz``. A published definition's preview (``--definition``) is
``GET /nbcast/api/v1/definitions/{name}/preview``. Every problem (a bad cron, an
unknown zone, more slots than ``limit``) is a 400 naming it.

It reads no tenant's data, but it is the installation's computing time: it is for
operators and people with a role in an existing tenant
(:func:`~nbcast.tenancy.roles.require_role_or_operator`), checked before any input
is parsed; an authenticated user without one gets 403.
"""

from __future__ import annotations

import json
from datetime import date, datetime
from typing import Any

from jupyter_server.auth.decorator import authorized

from nbcast.clock import parse_instant
from nbcast.errors import ConfigError, ScheduleError
from nbcast.scheduler.preview import preview
from nbcast.server_extension.errors import ApiError
from nbcast.server_extension.handlers.api_definition_actions import (
    DAY_OR_INSTANT,
    DEFAULT_PREVIEW,
    MAX_PREVIEW,
    PREVIEW_LIMIT,
    range_query,
)
from nbcast.server_extension.handlers.api_definitions import UPCOMING
from nbcast.server_extension.handlers.base import ApiHandler
from nbcast.server_extension.routes import API, Operation, Param, route

__all__ = ["SchedulePreviewHandler", "preview_field"]

_GAPS = ("auto", "shift", "skip")
_FOLDS = ("auto", "first", "last", "both")


MAX_BINDINGS_CHARS = 8_000
"""The longest ``bindings`` a preview takes (JSON text)."""


@route(
    f"{API}/schedule/preview",
    Operation(
        "get",
        "The slots a cron or interval schedule would fire in [from, until), with DST "
        "policies (the rows of `nbcast schedule preview --json`)",
        tag="schedule",
        params=(
            Param("cron", schema={"type": "string", "maxLength": 200}, description="Cron"),
            Param("every", schema={"type": "string", "maxLength": 64}, description="Interval"),
            Param(
                "start",
                schema={"type": "string", "format": "date-time", "maxLength": 64},
                description="Anchor instant of an every schedule (default: the Unix epoch)",
            ),
            Param(
                "tz",
                schema={"type": "string", "maxLength": 64, "default": "UTC"},
                description="IANA time zone",
            ),
            Param("from", schema=DAY_OR_INSTANT, required=True, description="Range start (incl.)"),
            Param("until", schema=DAY_OR_INSTANT, required=True, description="Range end (excl.)"),
            Param("dst_gap", schema={"type": "string", "enum": list(_GAPS), "default": "auto"}),
            Param("dst_fold", schema={"type": "string", "enum": list(_FOLDS), "default": "auto"}),
            PREVIEW_LIMIT,
            Param(
                "bindings",
                schema={"type": "string", "maxLength": MAX_BINDINGS_CHARS},
                description="A JSON object of parameter name → slot binding: each row then "
                "has `parameters`, what each resolves to for a run of that slot",
            ),
        ),
        response={"type": "array", "items": UPCOMING},
        errors=(400, 403),
    ),
)
class SchedulePreviewHandler(ApiHandler):
    """The schedule preview (module docstring)."""

    @authorized
    async def get(self) -> None:
        """The previewed slots."""
        await self.installation_caller("previewing a schedule")
        cron = self.query("cron")
        every = self.query("every", max_length=64)
        tz = self.query("tz", max_length=64) or "UTC"
        start_text = self.query("start", max_length=64)
        start = None
        if start_text is not None:
            try:
                start = parse_instant(start_text)
            except ConfigError as exc:
                raise ApiError(400, f"start: {exc}", field="start") from None
        gap = self.query("dst_gap", max_length=16) or "auto"
        fold = self.query("dst_fold", max_length=16) or "auto"
        if gap not in _GAPS:
            raise ApiError(400, f"dst_gap must be one of {'|'.join(_GAPS)}", field="dst_gap")
        if fold not in _FOLDS:
            raise ApiError(400, f"dst_fold must be one of {'|'.join(_FOLDS)}", field="dst_fold")
        if (cron is None) == (every is None):
            raise ApiError(400, "give exactly one of cron and every", field="cron")
        range_from, range_to = range_query(self)
        limit = self.query_int("limit", low=1, high=MAX_PREVIEW) or DEFAULT_PREVIEW
        bindings = _bindings(self.query("bindings", max_length=MAX_BINDINGS_CHARS))
        try:
            rows = await self.call(
                _preview, cron, every, start, tz, gap, fold, range_from, range_to, limit, bindings
            )
        except ScheduleError as exc:
            raise ApiError(400, str(exc), field=preview_field(str(exc), cron)) from None
        self.write_json(rows)


def _bindings(text: str | None) -> dict[str, Any] | None:
    """The ``bindings`` query parameter: a JSON object, or None when absent."""
    if text is None:
        return None
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        raise ApiError(400, "bindings must be a JSON object", field="bindings") from None
    if not isinstance(value, dict):
        raise ApiError(400, "bindings must be a JSON object", field="bindings")
    return value


_FIELD_PREFIXES = (
    ("bindings:", "bindings"),
    ("timezone:", "tz"),
    ("every:", "every"),
    ("dst gap:", "dst_gap"),
    ("dst fold:", "dst_fold"),
    ("from (", "from"),
    ("more than", "until"),
    ("start", "start"),
)


def preview_field(message: str, cron: str | None) -> str | None:
    """The query parameter a preview's refusal is about (the dialog shows it there):
    by the message's start, else the cron (its own parse errors), else none."""
    for prefix, name in _FIELD_PREFIXES:
        if message.startswith(prefix):
            return name
    return "cron" if cron is not None else None


def _preview(
    cron: str | None,
    every: str | None,
    start: datetime | None,
    tz: str,
    gap: str,
    fold: str,
    range_from: date | datetime,
    range_to: date | datetime,
    limit: int,
    bindings: dict[str, Any] | None = None,
) -> list[Any]:
    return preview(
        bindings=bindings,
        cron=cron,
        every=every,
        start=start,
        tz=tz,
        dst_gap=gap,
        dst_fold=fold,
        range_from=range_from,
        range_to=range_to,
        limit=limit,
        notes=True,
    )
