"""What people ask about a definition's versions (the lists of definitions, with the
scheduler's and the last run's view of each, are a cross-plane read model:
:mod:`nbcast.views.definitions`).

Queries take a ``Session`` and a :class:`~nbcast.access.Caller` and return typed
records, scoped to the caller's tenant: a definition of another tenant is not found
(:class:`~nbcast.errors.UnknownDefinitionError`), never returned. They write nothing.

Subscriptions' URL recipients (webhooks) are masked for everyone but the tenant's
admins, in the ``nbcast`` block and in the stored notebook alike
(:mod:`nbcast.definitions.recipients`): records hold what the caller may see, so a
version's diff, its export and every face show the same.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from nbcast.access import Caller
from nbcast.clock import format_instant
from nbcast.definitions.effective import EffectiveParameter, effective_parameters
from nbcast.definitions.models import DefinitionVersion, ReportDefinition
from nbcast.definitions.parameters import Parameter, schema_from_json
from nbcast.definitions.recipients import Disclosure, disclosure
from nbcast.definitions.spec import ReportSpec, parse_spec
from nbcast.errors import UnknownDefinitionError
from nbcast.limits import clip
from nbcast.records import internal, named
from nbcast.tenancy.models import User
from nbcast.tenancy.roles import readable_tenant

__all__ = [
    "VersionInfo",
    "definition_row",
    "get_version",
    "list_versions",
    "version_row",
]


@dataclass(frozen=True, kw_only=True)
class VersionInfo:
    """One published version, as read back: its ``block`` and ``notebook_json`` as
    the caller may see them (URL recipients masked but for admins)."""

    definition: str
    version: int
    sha256: str
    author: str
    message: str
    created_at: datetime
    schema: tuple[Parameter, ...] = named("parameters")
    """Its parameters, as the ``parameters`` cell declares them."""
    block: dict[str, Any] = named("nbcast")
    """The version's ``nbcast`` metadata block."""
    notebook_json: str = internal()
    effective: tuple[EffectiveParameter, ...] = named("effective_parameters", default=())
    """What its runs get for each parameter — the metadata block's value or binding over
    the cell's default (:mod:`nbcast.definitions.effective`)."""

    def __post_init__(self) -> None:
        if not self.effective and self.schema:
            object.__setattr__(self, "effective", effective_parameters(self.schema, self.block))

    @property
    def notebook(self) -> dict[str, Any]:
        """The stored (normalized) notebook."""
        return dict(json.loads(self.notebook_json))

    @property
    def spec(self) -> ReportSpec:
        """The parsed ``nbcast`` block of this version."""
        return parse_spec(self.block, self.schema)

    def to_json(self, *, with_notebook: bool = False) -> dict[str, Any]:
        """The JSON form (the notebook itself only when asked for)."""
        data: dict[str, Any] = {
            "definition": self.definition,
            "version": self.version,
            "sha256": self.sha256,
            "author": self.author,
            "message": self.message,
            "created_at": format_instant(self.created_at),
            "parameters": [p.to_json() for p in self.schema],
            "nbcast": self.block,
            "effective_parameters": [e.to_json() for e in self.effective],
        }
        if with_notebook:
            data["notebook"] = self.notebook
        return data


def version_row(
    session: Session, definition: ReportDefinition, number: int | None = None
) -> DefinitionVersion | None:
    """Version ``number`` of ``definition`` (default: its latest), or None — also for a
    number no version can have."""
    wanted = definition.latest_version if number is None else number
    if wanted is None or not 1 <= wanted <= 2**31 - 1:
        return None
    return session.scalar(
        sa.select(DefinitionVersion).where(
            DefinitionVersion.definition_id == definition.id,
            DefinitionVersion.version == wanted,
        )
    )


def definition_row(session: Session, caller: Caller, name: str) -> ReportDefinition:
    """The caller's definition called ``name``; UnknownDefinitionError otherwise."""
    tenant = readable_tenant(session, caller)
    definition = session.scalar(
        sa.select(ReportDefinition).where(
            ReportDefinition.tenant_id == tenant.id, ReportDefinition.name == name
        )
    )
    if definition is None:
        raise UnknownDefinitionError(
            f"no definition named {clip(name)} in tenant {caller.tenant!r}"
        )
    return definition


def _info(
    definition: ReportDefinition, version: DefinitionVersion, author: str, shown: Disclosure
) -> VersionInfo:
    return VersionInfo(
        definition=definition.name,
        version=version.version,
        sha256=version.sha256,
        author=author,
        message=version.message,
        created_at=version.created_at,
        schema=schema_from_json(version.parameter_schema),
        block=shown.block(version.spec),
        notebook_json=shown.notebook_json(version.notebook_json, version.spec),
    )


def get_version(
    session: Session, caller: Caller, name: str, version: int | None = None
) -> VersionInfo:
    """Version ``version`` (default: the latest) of the caller's definition ``name``."""
    definition = definition_row(session, caller, name)
    number = definition.latest_version if version is None else version
    row = session.execute(
        sa.select(DefinitionVersion, User.name)
        .join(User, User.id == DefinitionVersion.author_id)
        .where(
            DefinitionVersion.definition_id == definition.id,
            DefinitionVersion.version == number,
        )
    ).first()
    if row is None:
        raise UnknownDefinitionError(
            f"definition {clip(name)} has no version {clip(number)} (latest is "
            f"{definition.latest_version})"
        )
    return _info(definition, row[0], row[1], disclosure(session, caller))


def list_versions(session: Session, caller: Caller, name: str) -> list[VersionInfo]:
    """Every version of the caller's definition ``name``, oldest first."""
    definition = definition_row(session, caller, name)
    rows = session.execute(
        sa.select(DefinitionVersion, User.name)
        .join(User, User.id == DefinitionVersion.author_id)
        .where(DefinitionVersion.definition_id == definition.id)
        .order_by(DefinitionVersion.version)
    ).all()
    shown = disclosure(session, caller)
    return [_info(definition, version, author, shown) for version, author in rows]
