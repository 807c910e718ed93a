"""What people ask of the runs: listed (one run in full, with its renditions and
deliveries, is a cross-plane read model: :mod:`nbcast.views.runs`).

Queries take a session and the :class:`~nbcast.access.Caller` and return typed
records (:mod:`nbcast.executor.records`); each is scoped to the caller's tenant (a
run of another tenant is "not found", never returned). They read the scheduler's and
the delivery plane's rows where a run's story needs them, and write nothing.

- :func:`list_runs` — the tenant's runs by fire time, keyset-paginated on
  ``(fire_at, id)`` (the index ``ix_runs_tenant_fire``), filtered by definition,
  state, kind and a fire-time window;
- :func:`run_context` — a run's stored context as ``nbcast.context()`` names it.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

import sqlalchemy as sa
from sqlalchemy.orm import Session

from nbcast.access import Caller, Page, decode_cursor, encode_cursor, page_limit
from nbcast.definitions.models import ReportDefinition
from nbcast.errors import ConfigError, UnknownDefinitionError
from nbcast.executor.records import RunRecord
from nbcast.limits import clip
from nbcast.scheduler.models import Run, RunKind, RunState
from nbcast.tenancy.roles import readable_tenant

__all__ = ["list_runs", "run_context"]


def _choice(value: str, allowed: list[str], what: str) -> str:
    for name in allowed:
        if name.lower() == value.lower():
            return name
    raise ConfigError(f"unknown run {what} {clip(value)} (one of " + "|".join(allowed) + ")")


def _aware(value: datetime | None, what: str) -> datetime | None:
    if value is not None and value.utcoffset() is None:
        raise ConfigError(f"{what} needs a UTC offset")
    return value


def list_runs(
    session: Session,
    caller: Caller,
    *,
    definition: str | None = None,
    state: str | None = None,
    kind: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    order: Literal["asc", "desc"] = "asc",
    limit: int | None = None,
    after: str | None = None,
) -> Page[RunRecord]:
    """The caller's runs by fire time (then id), oldest first or with ``order="desc"``
    newest first, a page at a time.

    Filters: ``definition`` (a name; one that does not exist is an error), ``state``
    (a :class:`~nbcast.executor.models.RunState`) and ``kind`` (a
    :class:`~nbcast.executor.models.RunKind`), either case; ``since <= fire_at <
    until`` (aware instants). ``limit`` (:func:`nbcast.access.page_limit`) and
    ``after`` (the previous page's ``next_after``) page through the result.
    """
    tenant = readable_tenant(session, caller)
    size = page_limit(limit)
    if order not in ("asc", "desc"):
        raise ConfigError(f"order must be asc or desc, not {clip(str(order))}")
    query = (
        sa.select(Run, ReportDefinition.name)
        .join(ReportDefinition, ReportDefinition.id == Run.definition_id)
        .where(Run.tenant_id == tenant.id)
    )
    if definition is not None:
        definition_id = session.scalar(
            sa.select(ReportDefinition.id).where(
                ReportDefinition.tenant_id == tenant.id, ReportDefinition.name == definition
            )
        )
        if definition_id is None:
            raise UnknownDefinitionError(
                f"no definition named {clip(definition)} in tenant {caller.tenant!r}"
            )
        query = query.where(Run.definition_id == definition_id)
    if state is not None:
        query = query.where(Run.state == _choice(state, [s.value for s in RunState], "state"))
    if kind is not None:
        query = query.where(Run.kind == _choice(kind, [k.value for k in RunKind], "kind"))
    since, until = _aware(since, "since"), _aware(until, "until")
    if since is not None and until is not None and since >= until:
        raise ConfigError("since must be before until")
    if since is not None:
        query = query.where(Run.fire_at >= since)
    if until is not None:
        query = query.where(Run.fire_at < until)
    if after is not None:
        fire_at, run_id = decode_cursor(after, [datetime, int])
        if fire_at is None or run_id is None:
            raise ConfigError("after: not a cursor this list handed out")
        # A row-value comparison: one range of the (tenant_id, fire_at, id) index, so a
        # page deep in a million runs costs what the first one costs.
        key = sa.tuple_(Run.fire_at, Run.id)
        bound = sa.tuple_(sa.literal(fire_at, Run.fire_at.type), sa.literal(run_id))
        query = query.where(key > bound if order == "asc" else key < bound)
    if order == "asc":
        query = query.order_by(Run.fire_at, Run.id)
    else:
        query = query.order_by(Run.fire_at.desc(), Run.id.desc())
    rows = session.execute(query.limit(size + 1)).all()
    records = [_record(run, name, tenant.name) for run, name in rows[:size]]
    more = len(rows) > size
    cursor = encode_cursor(records[-1].fire_at, records[-1].id) if more and records else None
    return Page(records, cursor)


def run_context(run: Run, tenant: str) -> dict[str, Any] | None:
    """The run's stored context with its tenant, as ``nbcast.context()`` names it (the
    row keeps the tenant in a column; every stored key is kept as it is)."""
    if run.context is None:
        return None
    return {"tenant": tenant, **run.context}


def _record(run: Run, definition: str, tenant: str) -> RunRecord:
    return RunRecord(
        id=run.id,
        definition=definition,
        slot_key=run.slot_key,
        kind=run.kind,
        state=run.state,
        reason=run.reason,
        fire_at=run.fire_at,
        version=run.version,
        parameters=run.parameters,
        created_at=run.created_at,
        attempt=run.attempt,
        artifact_sha256=run.artifact_sha256,
        started_at=run.started_at,
        finished_at=run.finished_at,
        context=run_context(run, tenant),
        rerun_of=run.rerun_of,
        test_to=run.test_to,
    )
