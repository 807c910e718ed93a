"""The render queue: renditions are rendered once, in a child process, under a time limit.

A delivery worker leases PENDING renditions (``lease_owner``, ``lease_expires_at``,
``attempt + 1``; ``SKIP LOCKED`` on PostgreSQL), renders each one, stores the bytes
in the artifact store (content-addressed: an unchanged report is stored once) and
records the sha256 — every write conditional on its lease, like the executor's.

**Isolation.** Each render runs in a child forked from the worker
(:func:`render_isolated`): a renderer that crashes, leaks or hangs cannot take the
worker with it, and one that exceeds ``timeout`` is killed. The child reads the
executed notebook from the artifact store, writes the rendition there and reports
only the hash; it never touches the database (it exits with ``os._exit`` so the
parent's connections are not closed under it). No database transaction is open
while a renderer runs, so a slow renderer holds no lock — on SQLite, where a write
transaction blocks every other writer, that matters.

**Failures.** A failed attempt is retried with backoff up to ``max_attempts``; then the
rendition is FAILED with the error, and the ledger fails the deliveries that need it
(``render_failed``). Nothing here writes the scheduler's or the executor's tables, so
a broken renderer leaves scheduling and execution untouched.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from nbcast.artifacts import ArtifactStore
from nbcast.clock import Clock, parse_instant
from nbcast.db import Database
from nbcast.definitions.models import ReportDefinition
from nbcast.delivery.intake import spec_of
from nbcast.delivery.models import RENDITION_LEASE, Rendition, RenditionState
from nbcast.delivery.renderers import Renderer, renderers
from nbcast.delivery.report import ReportInfo
from nbcast.errors import ConfigError
from nbcast.leasing import extended, free, held, released, skip_locked, taken
from nbcast.retry import backoff
from nbcast.scheduler.models import Run, RunKind
from nbcast.scheduler.runs import dry_run_slot
from nbcast.tenancy.models import Tenant

__all__ = ["RENDER_MAX_ATTEMPTS", "RenderQueue", "render_isolated", "report_infos"]

RENDER_MAX_ATTEMPTS = 3
"""Attempts at one rendition before it is FAILED (a renderer that failed three times on
the same notebook will fail again; the run's deliveries then go out without it)."""

RendererLookup = Callable[[str], Renderer]


def report_infos(
    session: Session, run_ids: list[int], specs: dict[int, Any] | None = None
) -> dict[int, ReportInfo]:
    """What delivery tells renderers and channels about each run (``specs``: a cache
    of parsed versions, shared with the caller)."""
    rows = session.execute(
        sa.select(
            Run.id,
            Run.version_id,
            Run.version,
            Run.slot_key,
            Run.fire_at,
            Run.finished_at,
            Run.kind,
            Run.context,
            Tenant.name.label("tenant"),
            ReportDefinition.name.label("definition"),
        )
        .join(Tenant, Tenant.id == Run.tenant_id)
        .join(ReportDefinition, ReportDefinition.id == Run.definition_id)
        .where(Run.id.in_(run_ids))
    ).all()
    cache: dict[int, Any] = {} if specs is None else specs
    infos = {}
    for r in rows:
        spec = spec_of(session, r.version_id, cache)
        slot_key, fire_at = r.slot_key, r.fire_at
        dry = dry_run_slot(r.kind, r.context)
        if dry is not None:  # a dry run of a slot renders as that slot: the same bytes
            slot_key, fire_at = dry, parse_instant(str(r.context["fire_at"]))
        infos[r.id] = ReportInfo(
            tenant=r.tenant,
            definition=r.definition,
            version=r.version,
            run_id=r.id,
            slot_key=slot_key,
            fire_at=fire_at,
            test=r.kind == RunKind.test.value,
            interval_start=_instant_of(r.context, "interval_start"),
            interval_end=_instant_of(r.context, "interval_end"),
            finished_at=r.finished_at or r.fire_at,
            timezone=spec.schedule.timezone if spec.schedule else "UTC",
            description=spec.description,
        )
    return infos


def _instant_of(context: Any, key: str) -> datetime | None:
    """An instant of a run's stored context, or None (no context, or not readable)."""
    if not isinstance(context, dict) or not isinstance(context.get(key), str):
        return None
    try:
        return parse_instant(context[key])
    except ConfigError:
        return None


@dataclass(frozen=True)
class RenderResult:
    """What a render attempt produced."""

    sha256: str | None
    size: int
    seconds: float
    error: dict[str, Any] | None = None


def _child(
    send: Any,
    lookup: RendererLookup,
    fmt: str,
    notebook_sha: str,
    report: ReportInfo,
    store: ArtifactStore,
) -> None:
    code = 0
    try:
        _die_with_parent()
        import nbformat

        renderer = lookup(fmt)
        notebook = nbformat.reads(store.get(notebook_sha).decode(), as_version=4)
        started = time.perf_counter()
        data = renderer.render(notebook, report)
        ref = store.put(data)
        send.send(
            (
                "ok",
                ref.sha256,
                ref.size,
                time.perf_counter() - started,
                renderer.filename_for(notebook, report),
                renderer.media_type_for(notebook),
            )
        )
    except BaseException as exc:  # everything is reported, nothing escapes the child
        send.send(("error", type(exc).__name__, str(exc)[:2000], traceback.format_exc()[-4000:]))
        code = 1
    finally:
        send.close()
        os._exit(code)  # never run the parent's exit handlers (its DB connections)


def _die_with_parent() -> None:
    """Make the kernel SIGKILL this child when the worker dies (Linux), so a hung
    renderer never outlives a killed worker."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # not Linux: the parent's timeout still kills it
        pass


def render_isolated(
    lookup: RendererLookup,
    fmt: str,
    notebook_sha: str,
    report: ReportInfo,
    store: ArtifactStore,
    *,
    timeout: float,
) -> tuple[RenderResult, str | None, str | None]:
    """Render in a forked child under ``timeout`` seconds (module docstring).

    Returns the result, the file name and the media type (None when it failed).
    """
    context = multiprocessing.get_context("fork")
    receive, send = context.Pipe(duplex=False)
    started = time.perf_counter()
    child = context.Process(
        target=_child, args=(send, lookup, fmt, notebook_sha, report, store), daemon=True
    )
    child.start()
    send.close()
    try:
        if not receive.poll(timeout):
            child.kill()
            error = {"error": "RenderTimeout", "message": f"{fmt} renderer ran over {timeout:g} s"}
            return RenderResult(None, 0, time.perf_counter() - started, error), None, None
        try:
            answer = receive.recv()
        except EOFError:
            answer = ("error", "RendererCrashed", "the renderer process died", "")
    finally:
        child.join(5)
        if child.is_alive():
            child.kill()
            child.join()
        receive.close()
    if answer[0] == "ok":
        _, sha, size, seconds, filename, media_type = answer
        return RenderResult(sha, size, seconds), filename, media_type
    _, ename, message, trace = answer
    error = {"error": ename, "message": message, "traceback": trace}
    return RenderResult(None, 0, time.perf_counter() - started, error), None, None


class RenderQueue:
    """Leases and renders PENDING renditions (module docstring)."""

    def __init__(
        self,
        db: Database,
        clock: Clock,
        store: ArtifactStore,
        *,
        owner: str,
        lookup: RendererLookup | None = None,
        timeout: float = 120.0,
        max_attempts: int = RENDER_MAX_ATTEMPTS,
        backoff_base: float = 10.0,
    ) -> None:
        self.db = db
        self.clock = clock
        self.store = store
        self.owner = owner
        self.lookup: RendererLookup = lookup or (lambda name: renderers.create(name))
        self.timeout = timeout
        self.max_attempts = max_attempts
        self.backoff_base = backoff_base

    def warm_up(self, formats: tuple[str, ...] = ("html", "pdf", "xlsx")) -> None:
        """Render a one-cell notebook once in this process, so that every forked render
        starts with the renderers imported and WeasyPrint's fonts loaded (about a
        second per PDF otherwise). Failures are ignored: the real renders report them."""
        import nbformat

        notebook = nbformat.v4.new_notebook()
        notebook.cells = [nbformat.v4.new_markdown_cell("warm-up")]
        notebook.cells[0]["id"] = "warm-up"
        now = self.clock.now()
        report = ReportInfo(
            tenant="-",
            definition="warm-up",
            version=1,
            run_id=0,
            slot_key=None,
            fire_at=now,
            finished_at=now,
        )
        for fmt in formats:
            try:
                self.lookup(fmt).render(notebook, report)
            except Exception:
                continue

    def _lease(self, limit: int) -> list[tuple[int, int, int, str, str, str | None]]:
        now = self.clock.now()
        with self.db.session() as session:
            query = (
                sa.select(Rendition.id)
                .where(
                    Rendition.state == RenditionState.PENDING.value,
                    free(RENDITION_LEASE, now),
                )
                .order_by(Rendition.id)
                .limit(limit)
            )
            ids = list(session.scalars(skip_locked(self.db.dialect, query)))
            if not ids:
                return []
            spent = sa.and_(Rendition.id.in_(ids), Rendition.attempt >= self.max_attempts)
            session.execute(  # leased often enough, never recorded: its renderer kills us
                sa.update(Rendition)
                .where(spent)
                .values(
                    state=RenditionState.FAILED.value,
                    error={"error": "RenderLost", "message": "no attempt came back"},
                    **released(RENDITION_LEASE),
                )
            )
            ids = list(
                session.scalars(
                    sa.select(Rendition.id).where(
                        Rendition.id.in_(ids), Rendition.state == RenditionState.PENDING.value
                    )
                )
            )
            if not ids:
                return []
            session.execute(
                sa.update(Rendition)
                .where(Rendition.id.in_(ids))
                .values(
                    **taken(RENDITION_LEASE, self.owner, now, timedelta(seconds=self.timeout + 30))
                )
            )
            rows = session.execute(
                sa.select(
                    Rendition.id,
                    Rendition.attempt,
                    Rendition.run_id,
                    Rendition.format,
                    Rendition.variant,
                    Run.artifact_sha256,
                )
                .join(Run, Run.id == Rendition.run_id)
                .where(Rendition.id.in_(ids))
            ).all()
            return [tuple(r) for r in rows]  # type: ignore[misc]

    def render_pending(self, limit: int = 4) -> int:
        """Render up to ``limit`` pending renditions, leasing each one just before it
        is rendered (a lease taken for a whole batch would run out while the others
        render); return how many ended."""
        done = 0
        for _ in range(limit):
            leased = self._lease(1)
            if not leased:
                break
            rendition_id, attempt, run_id, fmt, variant, notebook_sha = leased[0]
            try:
                with self.db.session() as session:
                    report = report_infos(session, [run_id])[run_id]
                if variant == "late":
                    report = report.late(self.clock.now())
                if notebook_sha is None:
                    missing = {"error": "NoNotebook", "message": "the run stored no notebook"}
                    result, filename, media_type = RenderResult(None, 0, 0.0, missing), None, None
                else:
                    result, filename, media_type = render_isolated(
                        self.lookup, fmt, notebook_sha, report, self.store, timeout=self.timeout
                    )
            except Exception as exc:  # a fork that failed, a database blip: this attempt failed
                error = {"error": type(exc).__name__, "message": str(exc)[:2000]}
                result, filename, media_type = RenderResult(None, 0, 0.0, error), None, None
            self._record(rendition_id, attempt, result, filename, media_type)
            done += 1
        return done

    def _record(
        self,
        rendition_id: int,
        attempt: int,
        result: RenderResult,
        filename: str | None,
        media_type: str | None,
    ) -> None:
        now = self.clock.now()
        fenced = sa.and_(
            Rendition.id == rendition_id,
            held(RENDITION_LEASE, self.owner, attempt),
            Rendition.state == RenditionState.PENDING.value,
        )
        if result.sha256 is not None:
            values: dict[str, Any] = {
                "state": RenditionState.DONE.value,
                "sha256": result.sha256,
                "size": result.size,
                "seconds": result.seconds,
                "filename": filename,
                "media_type": media_type,
                "rendered_at": now,
                "error": None,
                **released(RENDITION_LEASE),
            }
        elif attempt >= self.max_attempts:
            values = {
                "state": RenditionState.FAILED.value,
                "error": result.error,
                **released(RENDITION_LEASE),
            }
        else:
            values = {
                "error": result.error,
                **released(RENDITION_LEASE),
                # A PENDING rendition's expiry doubles as its retry time (nbcast.leasing).
                **extended(
                    RENDITION_LEASE, now + backoff(attempt, base=self.backoff_base, cap=600)
                ),
            }
        with self.db.session() as session:
            session.execute(sa.update(Rendition).where(fenced).values(**values))
