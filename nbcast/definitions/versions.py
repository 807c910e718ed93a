"""Publishing report definitions: a notebook becomes an immutable version.

(Reading definitions and versions back is :mod:`nbcast.definitions.queries`.)

``publish`` turns a notebook file into a new version of the definition it names:

1. the notebook is read and validated (:mod:`nbcast.definitions.notebook`);
2. the parameters cell gives the schema (:mod:`nbcast.definitions.parameters`);
3. the ``nbcast`` block is validated against syntax and schema
   (:mod:`nbcast.definitions.spec`);
4. all of that happens before the database is touched, so bad input writes nothing;
5. in one transaction: the definition row is found or created, and a version row is
   added unless the normalized notebook's sha256 equals the *latest* version's
   (publishing a notebook again unchanged is a no-op that says so; publishing an
   older content again after a newer one makes a new version, because the latest
   version is what runs).

The definition name is ``--name``, else the block's ``name``, else the file's stem.
A name belongs to the file it was first published from: publishing another file
under the same name is refused (:class:`DuplicateDefinitionError`), so two
notebooks cannot silently overwrite each other's report.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from nbcast.access import Caller
from nbcast.db import Database
from nbcast.definitions.effective import hidden_default_changes
from nbcast.definitions.models import DefinitionVersion, ReportDefinition
from nbcast.definitions.notebook import (
    LoadedNotebook,
    canonical_json,
    load_notebook,
    normalize_notebook,
    notebook_sha256,
    parameters_cell,
)
from nbcast.definitions.parameters import (
    Parameter,
    parse_parameters_cell,
    schema_from_json,
    schema_to_json,
    with_allowed,
)
from nbcast.definitions.queries import version_row
from nbcast.definitions.spec import ReportSpec, check_name, parse_spec
from nbcast.errors import (
    DuplicateDefinitionError,
    MetadataError,
    NotebookError,
)
from nbcast.limits import MAX_DESCRIPTION_CHARS, MAX_NOTEBOOK_DEPTH, json_problem, storable_text
from nbcast.tenancy.roles import Role, require
from nbcast.tenancy.tenants import ensure_user

__all__ = [
    "PreparedVersion",
    "PublishResult",
    "check_here",
    "prepare",
    "prepare_loaded",
    "publish",
]


@dataclass(frozen=True, kw_only=True)
class PreparedVersion:
    """Everything a publish stores, computed without touching the database."""

    name: str
    source_path: str
    notebook: dict[str, Any]
    sha256: str
    schema: tuple[Parameter, ...]
    spec: ReportSpec
    block: dict[str, Any]


@dataclass(frozen=True, kw_only=True)
class PublishResult:
    """What :func:`publish` did: ``created`` is False when the content was unchanged."""

    definition: str
    version: int
    sha256: str
    created: bool
    warnings: tuple[str, ...] = ()
    """Things the author should know that did not stop the publish (a kernel that is
    not installed where nbcast runs)."""


def _default_name(path: Path) -> str:
    stem = re.sub(r"[^A-Za-z0-9._-]+", "-", path.stem).strip("-._")
    return stem or "report"


def prepare(
    path: str | Path, name: str | None = None, *, max_bytes: int | None = None
) -> PreparedVersion:
    """Read, validate and normalize the notebook at ``path``; nothing is written.

    ``max_bytes`` bounds the normalized notebook's canonical JSON (default
    ``NBCAST_MAX_NOTEBOOK_BYTES``, see :mod:`nbcast.limits`).
    """
    loaded = load_notebook(path)
    return prepare_loaded(loaded, name, source_path=str(loaded.path.resolve()), max_bytes=max_bytes)


def prepare_loaded(
    loaded: LoadedNotebook,
    name: str | None = None,
    *,
    source_path: str,
    max_bytes: int | None = None,
    schema: tuple[Parameter, ...] | None = None,
) -> PreparedVersion:
    """Validate and normalize a loaded notebook (from a file, or a request's body —
    :func:`nbcast.definitions.notebook.loaded_document`); nothing is written.
    ``source_path`` is what the definition's name is bound to (module docstring).
    ``schema``: the parameters cell's, when the caller has parsed it already."""
    from nbcast.limits import notebook_byte_limit

    limit = notebook_byte_limit() if max_bytes is None else max_bytes
    if schema is None:
        cell = parameters_cell(loaded.notebook)
        schema = parse_parameters_cell(cell[1]) if cell else ()
    block = {} if loaded.block is None else loaded.block
    spec = parse_spec(block, schema)
    schema = with_allowed(schema, block)  # stored with the block's allowed values
    if name is not None:
        check_name(name)
    final_name = check_name(name or spec.name or _default_name(loaded.path))
    normalized = normalize_notebook(loaded.notebook)
    if loaded.block_source != "metadata" and loaded.block is not None:
        # A side file's block is folded into the stored notebook, so a version is
        # self-contained and its export runs anywhere.
        normalized["metadata"]["nbcast"] = loaded.block
    problem = json_problem(normalized, "notebook", max_depth=MAX_NOTEBOOK_DEPTH, max_string=None)
    if problem:
        raise NotebookError(f"{loaded.path.name}: {problem}")
    size = len(canonical_json(normalized).encode("utf-8"))
    if size > limit:
        raise NotebookError(
            f"{loaded.path.name}: {size:,} bytes without outputs is over the limit of "
            f"{limit:,} (NBCAST_MAX_NOTEBOOK_BYTES)"
        )
    return PreparedVersion(
        name=final_name,
        source_path=source_path,
        notebook=normalized,
        sha256=notebook_sha256(normalized),
        schema=schema,
        spec=spec,
        block=block,
    )


def check_here(
    prepared: PreparedVersion, environ: Mapping[str, str] | None = None
) -> tuple[str, ...]:
    """What depends on where nbcast runs rather than on the notebook: every
    subscription's recipient against its channel's deployment rules (a webhook URL the
    policy forbids is a :class:`MetadataError` naming the field) and the kernel (not
    installed here: a warning, returned, since workers may have it)."""
    import os

    from nbcast.definitions.kernelspec_check import missing_kernel
    from nbcast.plugins import recipient_rules

    env = os.environ if environ is None else environ
    for index, sub in enumerate(prepared.spec.subscriptions):
        problem = recipient_rules(sub.channel).check_recipient_here(sub.to, env)
        if problem:
            raise MetadataError(f"subscriptions[{index}].to", problem)
    kernel = missing_kernel(prepared.notebook)
    if kernel is None:
        return ()
    return (
        f"kernel {kernel!r} is not installed here (jupyter kernelspec list); runs on this "
        "machine will fail until it is",
    )


def publish(
    db: Database,
    notebook: str | Path | PreparedVersion,
    *,
    caller: Caller,
    name: str | None = None,
    message: str = "",
    now: datetime | None = None,
    environ: Mapping[str, str] | None = None,
) -> PublishResult:
    """Publish a notebook — a file's path, or one already prepared (a request's body) —
    as a new version (module docstring), after :func:`check_here` (against ``environ``,
    default the process environment).

    ``now`` is the publish instant (default: the real clock); it starts a new
    definition's schedule, so tests and simulations pass their clock's time. The
    caller needs the ``author`` role in their tenant; a new version is audited
    (``definition.published``, and ``schedule.changed`` when its schedule differs
    from the previous version's).
    """
    prepared = notebook if isinstance(notebook, PreparedVersion) else prepare(notebook, name)
    warnings = check_here(prepared, environ)
    now = now or datetime.now(UTC)
    if not storable_text(message) or len(message) > MAX_DESCRIPTION_CHARS:
        raise MetadataError(
            "message",
            f"must be valid text of at most {MAX_DESCRIPTION_CHARS:,} characters, no NUL",
        )
    with db.session() as session:
        owner = require(session, caller, Role.author, "publishing a report", now).tenant
        user = ensure_user(session, owner, caller.user)
        definition = session.scalar(
            sa.select(ReportDefinition)
            .where(ReportDefinition.tenant_id == owner.id, ReportDefinition.name == prepared.name)
            .with_for_update()
        )
        if definition is None:
            definition = ReportDefinition(
                tenant_id=owner.id,
                name=prepared.name,
                source_path=prepared.source_path,
                created_by=user.id,
                latest_version=0,
                created_at=now,
            )
            session.add(definition)
            session.flush()
        elif definition.source_path != prepared.source_path:
            raise DuplicateDefinitionError(
                f"definition {prepared.name!r} was published from {definition.source_path}; "
                f"choose another --name for {prepared.source_path}",
                name=prepared.name,
                bound_to=definition.source_path,
                given=prepared.source_path,
            )
        latest = _latest(session, definition)
        if latest is not None:  # a changed default the block hides: say so (effective.py)
            previous = schema_from_json(latest.parameter_schema or [])
            warnings = (
                *warnings,
                *hidden_default_changes(previous, prepared.schema, prepared.block),
            )
        if latest is not None and latest.sha256 == prepared.sha256:
            return PublishResult(
                definition=prepared.name,
                version=latest.version,
                sha256=latest.sha256,
                created=False,
                warnings=warnings,
            )
        number = definition.latest_version + 1
        session.add(
            DefinitionVersion(
                tenant_id=owner.id,
                definition_id=definition.id,
                version=number,
                sha256=prepared.sha256,
                notebook_json=canonical_json(prepared.notebook),
                parameter_schema=schema_to_json(prepared.schema),
                spec=prepared.block,
                author_id=user.id,
                message=message,
                created_at=now,
            )
        )
        definition.latest_version = number
        _audit_publish(session, caller, owner.id, prepared, latest, number, message, now)
        return PublishResult(
            definition=prepared.name,
            version=number,
            sha256=prepared.sha256,
            created=True,
            warnings=warnings,
        )


def _audit_publish(
    session: Session,
    caller: Caller,
    tenant_id: int,
    prepared: PreparedVersion,
    previous: DefinitionVersion | None,
    number: int,
    message: str,
    now: datetime,
) -> None:
    from nbcast.tenancy import audit

    obj = f"definition:{prepared.name}"
    audit.record(
        session,
        tenant_id,
        actor=caller.user,
        action=audit.Action.definition_published,
        obj=obj,
        at=now,
        details={"version": number, "sha256": prepared.sha256, "message": message[:500]},
    )
    before = (previous.spec or {}).get("schedule") if previous is not None else None
    after = prepared.block.get("schedule")
    if previous is not None and before != after:
        audit.record(
            session,
            tenant_id,
            actor=caller.user,
            action=audit.Action.schedule_changed,
            obj=obj,
            at=now,
            details={"version": number, "from": before, "to": after},
        )


def _latest(session: Session, definition: ReportDefinition) -> DefinitionVersion | None:
    return version_row(session, definition)
