"""``/nbcast/api/v1/tenants``: tenants and their quotas.

Each handler calls the command layer (:mod:`nbcast.tenancy.tenants`), which
checks who asks: every tenant is listed for operators only; one tenant is shown to
an operator or a member of it (anyone else: 404); quotas are changed by an admin of
that tenant or an operator — with the validation ``nbcast tenants set-quota`` gets:
known fields only, each above 0 and within
:data:`~nbcast.tenancy.tenants.QUOTA_BOUNDS`, finite, whole where it must be.
Operators are named by the operators table (``nbcast users grant NAME operator``;
the server's owner on a fresh home, and ``NbcastApp.admin_users``, which the server
grants when it starts).
"""

from __future__ import annotations

from typing import Any

from jupyter_server.auth.decorator import authorized

from nbcast.config import TENANT_NAME
from nbcast.errors import ConfigError
from nbcast.server_extension.errors import ApiError
from nbcast.server_extension.handlers.base import ApiHandler
from nbcast.server_extension.openapi import schema
from nbcast.server_extension.record_schemas import record_definition
from nbcast.server_extension.routes import API, Operation, Param, route
from nbcast.tenancy.tenants import (
    NULLABLE_QUOTAS,
    QUOTA_BOUNDS,
    QUOTA_FIELDS,
    QUOTA_MINIMUMS,
    TenantRecord,
    change_quota,
    list_tenants,
    set_ceilings,
    tenant_record,
)

__all__ = [
    "TenantCeilingsHandler",
    "TenantHandler",
    "TenantQuotaHandler",
    "TenantsHandler",
]


def _quota_schema(field: str, nullable: bool) -> dict[str, Any]:
    kind = "integer" if QUOTA_FIELDS[field] is int else "number"
    out: dict[str, Any] = {
        "type": [kind, "null"] if nullable else kind,
        "maximum": QUOTA_BOUNDS[field],
    }
    if field in QUOTA_MINIMUMS:
        out["minimum"] = QUOTA_MINIMUMS[field]
    else:
        out["exclusiveMinimum"] = 0
    return out


_NULLABLE_QUOTAS = NULLABLE_QUOTAS
"""Quotas that may be null: no limit."""


def _tenant_definition() -> dict[str, Any]:
    """``Tenant``: the record's fields, its ``quotas`` laid out as keys of their own
    (as ``to_json`` does), each described by the quota table
    (:data:`~nbcast.tenancy.tenants.QUOTA_FIELDS`, its bounds and nullability)."""
    quotas = {f: _quota_schema(f, f in _NULLABLE_QUOTAS) for f in QUOTA_FIELDS}
    definition = record_definition(
        TenantRecord,
        description="A tenant and its quotas (the keys of `nbcast tenants list --json`).",
        overrides={
            "network": {"type": "string", "enum": ["host", "none"]},
            "ceilings": {"type": "object", "properties": quotas},
        },
    )
    properties = dict(definition["properties"])
    del properties["quotas"]
    required = [k for k in definition["required"] if k != "quotas"]
    return {**definition, "required": [*required, *quotas], "properties": {**properties, **quotas}}


TENANT = schema("Tenant", _tenant_definition())
TENANT_LIST = schema(
    "TenantList",
    {
        "type": "object",
        "required": ["items"],
        "properties": {"items": {"type": "array", "items": TENANT}},
    },
)
QUOTA_CHANGE = schema(
    "QuotaChange",
    {
        "type": "object",
        "description": "The quotas to change (at least one); a budget null removes the budget.",
        "minProperties": 1,
        "additionalProperties": False,
        "properties": {f: _quota_schema(f, f in _NULLABLE_QUOTAS) for f in QUOTA_FIELDS},
    },
)
TENANT_PARAM = Param(
    "tenant",
    "path",
    {"type": "string", "pattern": f"^{TENANT_NAME.pattern}$"},
    description="The tenant's name",
)


class _TenantBase(ApiHandler):
    def tenant_name(self, raw: str) -> str:
        if not TENANT_NAME.fullmatch(raw):
            raise ApiError(404, f"no tenant {raw[:64]!r}", code="not_found", field="tenant")
        return raw

    async def quota_body(self, empty: str) -> dict[str, Any]:
        """The JSON body: at least one known quota (values are the command's to check)."""
        body = await self.json_object()
        if not body:
            raise ApiError(400, empty, field="body")
        for field in body:
            if field not in QUOTA_FIELDS:
                raise ApiError(
                    400,
                    f"unknown quota {field[:64]!r} (known: {', '.join(QUOTA_FIELDS)})",
                    field=field[:64],
                )
        return body

    def apply(self, command: Any, name: str, values: dict[str, Any]) -> dict[str, Any]:
        """Run ``command`` (a quota change of tenant ``name``): 404 before any write, a
        refusal of a value as 400 naming its field."""
        self.one(name)
        try:
            record: TenantRecord = command(
                self.state.db, self.state.clock, self.caller, name, **values
            )
            return record.to_json()
        except ConfigError as exc:
            field = next((f for f in values if str(exc).startswith(f)), None)
            raise ApiError(400, str(exc), field=field) from None

    def one(self, name: str) -> dict[str, Any]:
        with self.state.db.session() as session:
            return tenant_record(session, self.caller, name, self.state.clock.now()).to_json()


@route(
    f"{API}/tenants",
    Operation(
        "get",
        "Every tenant with its quotas (operator only)",
        tag="tenants",
        response=TENANT_LIST,
        admin=True,
        errors=(403,),
    ),
)
class TenantsHandler(_TenantBase):
    """The tenants (:func:`~nbcast.tenancy.tenants.list_tenants`)."""

    @authorized
    async def get(self) -> None:
        """Every tenant."""
        self.write_json({"items": await self.call(self._all)})

    def _all(self) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        after = None
        with self.state.db.session() as session:  # every page: the operator asked for all
            while True:
                page = list_tenants(
                    session, self.caller, self.state.clock.now(), limit=1000, after=after
                )
                items += [t.to_json() for t in page.items]
                if page.next_after is None:
                    return items
                after = page.next_after


@route(
    f"{API}/tenants/{{tenant}}",
    Operation(
        "get",
        "One tenant with its quotas (operator only)",
        tag="tenants",
        params=(TENANT_PARAM,),
        response=TENANT,
        admin=True,
        errors=(403, 404),
    ),
)
class TenantHandler(_TenantBase):
    """One tenant."""

    @authorized
    async def get(self, tenant: str) -> None:
        """The tenant; 404 when there is none of that name."""
        self.write_json(await self.call(self.one, self.tenant_name(tenant)))


@route(
    f"{API}/tenants/{{tenant}}/quota",
    Operation(
        "patch",
        "Change quotas of a tenant (operator only; the checks of `nbcast tenants set-quota`)",
        tag="tenants",
        params=(TENANT_PARAM,),
        body=QUOTA_CHANGE,
        response=TENANT,
        admin=True,
        errors=(400, 403, 404),
    ),
)
class TenantQuotaHandler(_TenantBase):
    """The quota change (:func:`~nbcast.tenancy.tenants.set_quota`)."""

    @authorized
    async def patch(self, tenant: str) -> None:
        """Change the quotas named in the body; answer the tenant as it now is."""
        name = self.tenant_name(tenant)
        body = await self.quota_body("name at least one quota to change")
        for field, value in body.items():
            if value is None and field not in _NULLABLE_QUOTAS:
                raise ApiError(400, f"{field} needs a value", field=field)
        self.write_json(await self.call(self.apply, change_quota, name, body))


@route(
    f"{API}/tenants/{{tenant}}/ceilings",
    Operation(
        "put",
        "Set a tenant's quota ceilings: what its admins may set its quotas up to "
        "(operators only; a quota above its new ceiling comes down to it)",
        tag="tenants",
        params=(TENANT_PARAM,),
        body=QUOTA_CHANGE,
        response=TENANT,
        admin=True,
        errors=(400, 403, 404),
    ),
)
class TenantCeilingsHandler(_TenantBase):
    """The ceilings change (:func:`~nbcast.tenancy.tenants.set_ceilings`)."""

    @authorized
    async def put(self, tenant: str) -> None:
        """Set the ceilings named in the body; answer the tenant as it now is."""
        name = self.tenant_name(tenant)
        body = await self.quota_body("name at least one ceiling to set")
        self.write_json(await self.call(self.apply, set_ceilings, name, body))
