"""Property-based test of the whole API with schemathesis: for every operation of the
OpenAPI document, requests generated from its schema (as alice, tenant acme, against a
live server with real runs, :mod:`tests.server.seed`) never get a 5xx, and every
answer — success or error — is what the document says it is.

The operations are taken from the document the server builds
(:func:`nbcast.server_extension.openapi.document`) at collection time, so one test per
operation appears and a route added later is tested without editing this file; the
live server's own document is checked to be the same one. Examples are few and
derandomized, so the file runs in well under a minute and fails the same way twice.
Downloads (the executed notebook, renditions) have no JSON schema to conform to:
they are checked for server errors only.

Alice is no administrator, so the operator routes (tenants and quotas) only refuse
her; they are fuzzed again as root, an administrator, with the tenant in the path
mostly one that exists (acme or globex), so that their success paths — a tenant
shown, quotas changed — are what the document says too. That test runs last: it
changes the tenants' quotas.
"""

from __future__ import annotations

from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error, response_schema_conformance

from nbcast.server_extension.openapi import document
from nbcast.server_extension.routes import registered
from tests.server.live import LiveServer, user_token
from tests.server.seed import Seeded, seed

DOCUMENT = document()
SCHEMA = schemathesis.openapi.from_dict(DOCUMENT)

MAX_EXAMPLES = 12
"""Generated requests per operation (positive and negative together)."""

OPERATOR_PATHS = sorted({r.path for r in registered() for op in r.operations if op.admin})
"""The paths of the operator-only operations (``Operation.admin``)."""
OPERATOR_SCHEMA = SCHEMA.include(path=OPERATOR_PATHS)
TENANTS = ("acme", "globex")
"""Tenants the seeded server has."""

DOWNLOADS = {
    "/nbcast/api/v1/runs/{run_id}/notebook",
    "/nbcast/api/v1/runs/{run_id}/renditions/{rendition_id}",
}


@pytest.fixture(scope="module")
def seeded(server: LiveServer, tmp_path_factory: pytest.TempPathFactory) -> Seeded:
    return seed(server, tmp_path_factory.mktemp("notebooks"))


def test_the_server_serves_this_document(server: LiveServer) -> None:
    with server.client("alice") as client:
        served = client.get("/nbcast/api/v1/openapi.json").json()
    assert served["paths"] == DOCUMENT["paths"]
    assert served["components"] == DOCUMENT["components"]


@SCHEMA.parametrize()
@settings(
    max_examples=MAX_EXAMPLES,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
)
def test_no_server_error_and_every_answer_conforms(
    case: Any, server: LiveServer, seeded: Seeded
) -> None:
    response = case.call(
        base_url=server.url, headers={"Authorization": f"token {user_token('alice')}"}
    )
    checks: list[Any] = [not_a_server_error]
    if case.operation.path not in DOWNLOADS:
        checks.append(response_schema_conformance)
    case.validate_response(response, checks=checks)


def test_the_operator_routes_are_the_tenants() -> None:
    assert OPERATOR_PATHS == [
        "/nbcast/api/v1/tenants",
        "/nbcast/api/v1/tenants/{tenant}",
        "/nbcast/api/v1/tenants/{tenant}/ceilings",
        "/nbcast/api/v1/tenants/{tenant}/quota",
    ]


@OPERATOR_SCHEMA.parametrize()
@settings(
    max_examples=MAX_EXAMPLES,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
)
def test_the_operator_routes_as_an_administrator(
    case: Any, server: LiveServer, seeded: Seeded
) -> None:
    tenant = (case.path_parameters or {}).get("tenant")
    if isinstance(tenant, str):
        # Two cases in three name a real tenant (the success paths); the third keeps
        # what was generated (mostly no such tenant: 404).
        choice = len(tenant) % 3
        if choice < len(TENANTS):
            case.path_parameters["tenant"] = TENANTS[choice]
    response = case.call(
        base_url=server.url, headers={"Authorization": f"token {user_token('root')}"}
    )
    case.validate_response(response, checks=[not_a_server_error, response_schema_conformance])
