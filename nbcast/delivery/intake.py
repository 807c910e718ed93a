"""Outbox intake: succeeded runs become renditions and ledger rows.

The executor inserts one ``delivery_outbox`` row in the transaction that ends a run
successfully. Intake reads unconsumed rows (``FOR UPDATE SKIP LOCKED`` on
PostgreSQL, so several delivery workers share them), and for each run, from the
pinned version's ``nbcast`` block:

- one rendition per format in ``outputs`` (``renditions``, unique per run and format);
- one ledger row per subscription *of the run's audience* (``deliveries``, unique per
  run, channel and recipient), PENDING: a recipient-scoped run
  (:mod:`nbcast.definitions.audiences`) goes only to the subscriptions whose
  parameters and row filter made it (``Subscription.audience == Run.audience``), the
  base run only to the unscoped ones. A **test run** (:mod:`nbcast.scheduler.trial`)
  goes to no subscriber: one email row per address it was asked for
  (``runs.test_to``), with the formats its audience's subscriptions take (every
  output, when the audience has no subscription), unconditionally.

Both inserts are ``ON CONFLICT DO NOTHING`` and the outbox row is marked consumed in
the same transaction, so replaying an outbox row — a crash before the commit, a row
consumed twice by mistake — adds nothing.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from nbcast.db import insert_ignore
from nbcast.definitions.compiled import compile_version
from nbcast.definitions.models import DefinitionVersion
from nbcast.definitions.spec import OutputFormat, ReportSpec, Subscription
from nbcast.delivery.models import Delivery, DeliveryState, Rendition, RenditionState
from nbcast.executor.models import OutboxRow
from nbcast.leasing import skip_locked
from nbcast.scheduler.models import Run, RunKind

__all__ = ["consume_outbox", "spec_of"]

log = logging.getLogger(__name__)


def spec_of(
    session: Session, version_id: int, cache: dict[int, ReportSpec] | None = None
) -> ReportSpec:
    """The parsed ``nbcast`` block of a definition version."""
    if cache is not None and version_id in cache:
        return cache[version_id]
    row = session.execute(
        sa.select(
            DefinitionVersion.spec, DefinitionVersion.parameter_schema, DefinitionVersion.sha256
        ).where(DefinitionVersion.id == version_id)
    ).one()
    spec = compile_version(row.spec, row.parameter_schema, sha256=row.sha256).spec
    if cache is not None:
        cache[version_id] = spec
    return spec


def consume_outbox(session: Session, now: datetime, *, limit: int = 200) -> int:
    """Turn up to ``limit`` unconsumed outbox rows into renditions and ledger rows;
    return how many were consumed."""
    query = (
        sa.select(OutboxRow.id, OutboxRow.run_id)
        .where(OutboxRow.consumed_at.is_(None))
        .order_by(OutboxRow.id)
        .limit(limit)
    )
    dialect = session.get_bind().dialect.name
    rows = session.execute(skip_locked(dialect, query)).all()
    if not rows:
        return 0
    runs = session.execute(
        sa.select(
            Run.id,
            Run.tenant_id,
            Run.definition_id,
            Run.version_id,
            Run.fire_at,
            Run.audience,
            Run.kind,
            Run.test_to,
        ).where(Run.id.in_([r.run_id for r in rows]))
    ).all()
    cache: dict[int, ReportSpec] = {}
    audiences: dict[int, list[str]] = {}  # per version: each subscription's audience
    renditions: list[dict[str, Any]] = []
    deliveries: list[dict[str, Any]] = []
    held: set[int] = set()
    for run in runs:
        try:
            spec = spec_of(session, run.version_id, cache)
        except Exception:  # one unreadable version must not hold up the others
            log.exception("run %d: its version's nbcast block cannot be read", run.id)
            held.add(run.id)  # its outbox row stays unconsumed, for a person to look at
            continue
        for fmt in spec.outputs:
            renditions.append(
                {
                    "tenant_id": run.tenant_id,
                    "run_id": run.id,
                    "format": str(fmt),
                    "variant": "",
                    "state": RenditionState.PENDING.value,
                    "attempt": 0,
                    "created_at": now,
                }
            )
        keys = audiences.get(run.version_id)
        if keys is None:
            keys = audiences[run.version_id] = [sub.audience for sub in spec.subscriptions]
        mine = [
            sub
            for sub, audience in zip(spec.subscriptions, keys, strict=True)
            if audience == (run.audience or "")  # another audience's recipient: not this run's
        ]
        if run.kind == RunKind.test.value:
            mine = _test_subscriptions(spec, mine, run.test_to or [])
        for sub in mine:
            deliveries.append(
                {
                    "tenant_id": run.tenant_id,
                    "run_id": run.id,
                    "definition_id": run.definition_id,
                    "channel": sub.channel,
                    "recipient": sub.to,
                    "formats": [str(f) for f in sub.formats],
                    "only_if": sub.only_if,
                    "fire_at": run.fire_at,
                    "state": DeliveryState.PENDING.value,
                    "attempt": 0,
                    "retry_base": 0,
                    "not_before": now,
                    "outcome_unknown": False,
                    "possible_duplicate": False,
                    "created_at": now,
                    "updated_at": now,
                }
            )
    if renditions:
        session.execute(insert_ignore(Rendition, renditions, dialect))
    if deliveries:
        session.execute(insert_ignore(Delivery, deliveries, dialect))
    consumed = [r.id for r in rows if r.run_id not in held]
    session.execute(sa.update(OutboxRow).where(OutboxRow.id.in_(consumed)).values(consumed_at=now))
    return len(consumed)


def _test_subscriptions(
    spec: ReportSpec, audience: list[Subscription], addresses: list[str]
) -> list[Subscription]:
    """A test run's recipients: each address by email, with the formats the run's
    audience takes (module docstring), and no condition."""
    formats: list[OutputFormat] = []
    for sub in audience:
        formats += [f for f in sub.formats if f not in formats]
    if not audience:  # nobody's formats to follow: every output
        formats = list(spec.outputs)
    return [
        Subscription(channel="email", to=str(address), formats=tuple(formats))
        for address in addresses
    ]
