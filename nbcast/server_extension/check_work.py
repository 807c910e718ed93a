"""The work of one notebook check, apart from the server: decode the request's body,
validate the notebook as publishing would, and say what publishing would do — with
no database, no server state and no secret, so that it can run in a process of its
own.

:func:`check_body` is that work. The server (:mod:`~nbcast.server_extension.handlers.
api_notebook_check`) runs a light check's in its thread pool and a heavy check's in a
child process (:func:`check_in_child`, ``python -m nbcast.server_extension.check_work``):
decoding and validating megabytes of notebook is seconds of pure Python, which in the
server's own process would hold its interpreter lock and stall every other tenant's
requests; in a child it costs one core and no lock, its memory goes back to the
system when it exits, and a check that runs past :data:`CHECK_TIMEOUT_S` is killed.

The child gets the server's environment without its secrets
(:func:`child_environment`: the variables of
:data:`~nbcast.credentials.SECRET_VARIABLES` and their ``_FILE`` forms, the server's
token, ``PGPASSWORD``) — what the check reads from it is the webhook policy and the
kernelspec folders — on its standard input one line of JSON (``{"now": …}``) then the
raw body, and answers one line of JSON on its standard output: ``{"result": …}`` or
``{"error": [status, code, message, field]}``.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import sys
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import available_timezones

from nbcast.credentials import SECRET_VARIABLES
from nbcast.definitions.notebook import loaded_document, parameters_cell
from nbcast.definitions.parameters import parse_parameters_cell, schema_to_json
from nbcast.definitions.spec import check_name
from nbcast.definitions.versions import check_here, prepare_loaded
from nbcast.definitions.zones import canonical_twin, zone_problem
from nbcast.errors import MetadataError, NbcastError
from nbcast.limits import clip
from nbcast.scheduler.upcoming import upcoming
from nbcast.server_extension.check_limits import MAX_CHECK_CELLS
from nbcast.server_extension.errors import ApiError, status_of
from nbcast.server_extension.json_body import decode_json_body

__all__ = [
    "BOUND_SLOTS",
    "CHECK_FIRES",
    "CHECK_TIMEOUT_S",
    "bound_values",
    "check_body",
    "check_in_child",
    "child_environment",
    "schedule_zone",
]

CHECK_FIRES = 5
BOUND_SLOTS = 3
"""Slots for which the check resolves the bound parameters."""
"""Fire times a check shows."""
CHECK_TIMEOUT_S = 60.0
"""How long a check in a child process may take before it is killed (413)."""
MAX_ANSWER_BYTES = 4 * 1024 * 1024
"""The most a child may answer (its answer is a few kilobytes)."""

_NOT_SECRET_OF_THE_SERVER = ("JUPYTER_TOKEN", "JUPYTER_TOKEN_FILE", "PGPASSWORD", "PGPASSFILE")


def check_body(raw: bytes | bytearray, environ: Mapping[str, str], now: datetime) -> dict[str, Any]:
    """The check of request body ``raw``: ``name``, ``parameters``, ``problem``,
    ``next_fires`` and ``timezone`` as the API answers them, and for the server's own
    look-up of the published definition ``sha256`` (of the version it would make, or
    None) and ``path``. :class:`ApiError` for a body that is not a check request."""
    body = decode_json_body(raw)
    if not isinstance(body, dict):
        raise ApiError(400, "the body must be a JSON object", field="body")
    unknown = sorted(set(body) - {"notebook", "path", "name", "timezone"})
    if unknown:
        raise ApiError(400, f"unknown field {clip(unknown[0])}", field=unknown[0][:100])
    notebook = body.get("notebook")
    if not isinstance(notebook, dict):
        raise ApiError(400, "notebook must be the notebook's JSON object", field="notebook")
    cells = notebook.get("cells")
    if isinstance(cells, list) and len(cells) > MAX_CHECK_CELLS:  # keys written \u…
        raise ApiError(
            413,
            f"the notebook has more than {MAX_CHECK_CELLS:,} cells",
            code="too_large",
            field="notebook",
        )
    path = body.get("path")
    if path is not None and (not isinstance(path, str) or len(path) > 1024):
        raise ApiError(400, "path must be text of at most 1,024 characters", field="path")
    name = body.get("name")
    if name is not None and (not isinstance(name, str) or len(name) > 200):
        raise ApiError(400, "name must be text of at most 200 characters", field="name")
    zone = body.get("timezone")
    if zone is not None and (not isinstance(zone, str) or len(zone) > 64):
        raise ApiError(400, "timezone must be text of at most 64 characters", field="timezone")
    origin = (path or f"{name or 'report'}.ipynb").rsplit("/", 1)[-1]
    result = _check(notebook, origin, name or None, environ, now)
    result["path"] = path
    result["timezone"] = None if zone is None else schedule_zone(zone)
    return result


def _check(
    notebook: dict[str, Any],
    origin: str,
    name: str | None,
    environ: Mapping[str, str],
    now: datetime,
) -> dict[str, Any]:
    """What publishing ``notebook`` as ``name`` would do (module docstring of the API)."""
    result: dict[str, Any] = {
        "name": None,
        "parameters": [],
        "problem": None,
        "next_fires": [],
        "bound": [],
        "sha256": None,
    }
    try:
        loaded = loaded_document(notebook, origin)
    except NbcastError as exc:
        result["problem"] = {"field": "notebook", "message": str(exc)}
        return result
    try:
        cell = parameters_cell(loaded.notebook)
        schema = parse_parameters_cell(cell[1]) if cell else ()
    except NbcastError as exc:
        result["problem"] = {"field": "parameters", "message": str(exc)}
        result["name"] = _name_or_none(name, loaded.block)
        return result
    result["parameters"] = [p.to_json() for p in schema]
    try:
        prepared = prepare_loaded(
            loaded, name, source_path="api:", schema=schema, max_bytes=_limit(environ)
        )
        # What depends on this deployment (a webhook URL its policy forbids), as
        # publishing checks it: a notebook that checks clean publishes clean.
        check_here(prepared, environ)
    except MetadataError as exc:
        result["problem"] = {"field": exc.field, "message": exc.message}
        result["name"] = _name_or_none(name, loaded.block)
    except NbcastError as exc:
        result["problem"] = {"field": "notebook", "message": str(exc)}
        result["name"] = _name_or_none(name, loaded.block)
    else:
        result["name"] = prepared.name
        result["sha256"] = prepared.sha256
        result["parameters"] = [p.to_json() for p in prepared.schema]  # with `allowed`
        schedule = prepared.spec.schedule
        if schedule is not None:
            fires = upcoming(schedule, now, CHECK_FIRES)
            result["next_fires"] = [f.to_json() for f in fires]
            result["bound"] = bound_values(prepared, now, fires)
    return result


def bound_values(prepared: Any, now: datetime, fires: list[Any]) -> list[dict[str, Any]]:
    """What each bound parameter resolves to in the next :data:`BOUND_SLOTS` slots that
    fire — the scheduler's own resolution (module docstring); [] when none is bound."""
    from nbcast.definitions.bindings import is_binding
    from nbcast.scheduler.preview import preview_definition

    bound = [name for name, value in prepared.spec.parameters.items() if is_binding(value)]
    firing = [f for f in fires if f.status != "skipped"][:BOUND_SLOTS]
    if not bound or not firing:
        return []
    block = prepared.notebook["metadata"].get("nbcast") or {}
    rows = preview_definition(
        block,
        schema_to_json(prepared.schema),
        range_from=now,
        range_to=firing[-1].fire_at + timedelta(microseconds=1),
        limit=1000,
    )
    return [
        {
            "slot_key": row["slot_key"],
            "local": row["local"],
            "parameters": {name: row["parameters"].get(name) for name in bound},
        }
        for row in rows
        if row["status"] != "skipped"
    ][:BOUND_SLOTS]


def _limit(environ: Mapping[str, str]) -> int:
    from nbcast.limits import notebook_byte_limit

    return notebook_byte_limit(environ)


@functools.lru_cache(maxsize=1024)
def schedule_zone(name: str) -> str | None:
    """``name`` as a schedule may name it: itself when accepted, else the canonical zone
    that keeps its offsets (an alias: ``Asia/Calcutta`` is ``Asia/Kolkata``), else None."""
    if zone_problem(name) is None:
        return name
    if name != "localtime" and name in available_timezones():
        return canonical_twin(name)
    return None


def _name_or_none(name: str | None, block: Any) -> str | None:
    """The name a notebook whose block is refused would publish as, if it is valid."""
    candidate = name or (block.get("name") if isinstance(block, dict) else None)
    if not isinstance(candidate, str):
        return None
    try:
        return check_name(candidate)
    except MetadataError:
        return None


# -- in a child process ------------------------------------------------------------------


def child_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` without the server's secrets (module docstring)."""
    secret = {*SECRET_VARIABLES, *(f"{v}_FILE" for v in SECRET_VARIABLES)}
    secret.update(_NOT_SECRET_OF_THE_SERVER)
    return {k: v for k, v in environ.items() if k not in secret}


async def check_in_child(
    raw: bytes | bytearray, environ: Mapping[str, str], now: datetime
) -> dict[str, Any]:
    """:func:`check_body` in a child process (module docstring); its ApiError raised
    here. A child that runs past :data:`CHECK_TIMEOUT_S` is killed (413); one that
    dies or answers nonsense is a 500 (logged by the handler)."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "nbcast.server_extension.check_work",
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
        env=child_environment(environ),
        limit=MAX_ANSWER_BYTES,
    )
    header = json.dumps({"now": now.isoformat()}).encode() + b"\n"
    try:
        out, _ = await asyncio.wait_for(
            process.communicate(header + bytes(raw)), timeout=CHECK_TIMEOUT_S
        )
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        await process.wait()
        raise ApiError(
            413,
            f"the notebook took longer than {CHECK_TIMEOUT_S:.0f} s to check",
            code="too_large",
            field="notebook",
        ) from None
    except asyncio.CancelledError:
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        raise
    try:
        answer = json.loads(out[:MAX_ANSWER_BYTES])
    except ValueError:
        raise RuntimeError(
            f"the check's child answered nonsense (exit {process.returncode})"
        ) from None
    if "error" in answer:
        status, code, message, field = answer["error"]
        raise ApiError(int(status), str(message), code=str(code), field=field)
    return dict(answer["result"])


def child_main() -> int:
    """The child's side: header and body on standard input, the answer on standard
    output (module docstring)."""
    data = sys.stdin.buffer.read()
    header, _, raw = data.partition(b"\n")
    try:
        now = datetime.fromisoformat(json.loads(header)["now"])
        answer: dict[str, Any] = {"result": check_body(raw, _environ(), now)}
    except (ApiError, NbcastError) as exc:
        answer = {"error": list(status_of(exc))}
    sys.stdout.write(json.dumps(answer, ensure_ascii=False, default=str))
    return 0


def _environ() -> dict[str, str]:
    import os

    return dict(os.environ)


if __name__ == "__main__":
    sys.exit(child_main())
