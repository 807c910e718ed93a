"""The definitions queries as tests call them: one database, a tenant name."""

from __future__ import annotations

from nbcast.access import Caller
from nbcast.db import Database
from nbcast.definitions import queries
from nbcast.definitions.queries import VersionInfo
from nbcast.views import definitions as views
from nbcast.views.definitions import DefinitionRecord


def _caller(tenant: str) -> Caller:
    return Caller(tenant=tenant, user="tester")


def get_version(db: Database, tenant: str, name: str, version: int | None = None) -> VersionInfo:
    with db.session() as session:
        return queries.get_version(session, _caller(tenant), name, version)


def list_versions(db: Database, tenant: str, name: str) -> list[VersionInfo]:
    with db.session() as session:
        return queries.list_versions(session, _caller(tenant), name)


def list_definitions(db: Database, tenant: str) -> list[DefinitionRecord]:
    with db.session() as session:
        return views.list_definitions(session, _caller(tenant)).items
