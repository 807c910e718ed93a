"""How nbcast's services log: one line per event on stderr, as text for people or
as JSON for log shippers (``NBCAST_LOG_FORMAT=json``).

A JSON line holds ``ts`` (UTC, ISO 8601), ``level``, ``logger``, ``message``, the
process's ``pid``, any structured fields the call passed in ``extra`` (the daemon
passes ``service``, ``service_name`` and ``event``) and, for an error, ``exc_type`` and
``exc`` (the traceback, at most :data:`MAX_FIELD` characters). Messages are bounded
too, so one hostile value cannot make a log line of megabytes.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from datetime import UTC, datetime

from nbcast.errors import ConfigError

__all__ = ["FORMATS", "JsonFormatter", "configure_logging"]

FORMATS = ("text", "json")
MAX_FIELD = 8000
"""The most characters of a message or traceback in one line."""
QUIET = ("alembic.runtime.plugins", "weasyprint.progress")
"""Loggers kept to WARNING and above."""
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    """One JSON object per record (module docstring)."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, object] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage()[:MAX_FIELD],
            "pid": record.process,
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                out[key] = (
                    value if isinstance(value, (int, float, bool)) else str(value)[:MAX_FIELD]
                )
        if record.exc_info and record.exc_info[1] is not None:
            out["exc_type"] = type(record.exc_info[1]).__name__
            out["exc"] = self.formatException(record.exc_info)[-MAX_FIELD:]
        return json.dumps(out, ensure_ascii=False)


def configure_logging(environ: Mapping[str, str] | None = None) -> None:
    """Log INFO and above to stderr in ``NBCAST_LOG_FORMAT`` (``text`` by default);
    ConfigError for another value. Like :func:`logging.basicConfig`, it leaves a root
    logger that already has handlers as it is (an embedding application's, a test
    runner's)."""
    env = os.environ if environ is None else environ
    kind = (env.get("NBCAST_LOG_FORMAT") or "text").strip().lower()
    if kind not in FORMATS:
        raise ConfigError(
            f"NBCAST_LOG_FORMAT must be one of {', '.join(FORMATS)}, not {kind[:40]!r}"
        )
    root = logging.getLogger()
    if not root.handlers:  # as logging.basicConfig: a configured root is left alone
        handler = logging.StreamHandler()
        handler.setFormatter(JsonFormatter() if kind == "json" else logging.Formatter(TEXT_FORMAT))
        root.addHandler(handler)
        root.setLevel(logging.INFO)
    # Libraries that narrate their steps at INFO (alembic's plugins on every start,
    # weasyprint's progress per page): noise, not events.
    for chatty in QUIET:
        logging.getLogger(chatty).setLevel(logging.WARNING)
