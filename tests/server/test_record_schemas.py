"""The API's Run, RunDetail, Attempt, RunError, Delivery, Rendition, LinkOpen,
UpcomingFire, AuditEntry, SlaMiss, SlaAlert, Service and Health components are derived
from the records the query layer returns: each record's JSON has
exactly the component's properties, validates against it, and the derivation maps
annotations (and field docstrings) as its module says."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import jsonschema
import pytest

from nbcast.definitions.parameters import Parameter
from nbcast.definitions.queries import VersionInfo
from nbcast.delivery.link_opens import OpenRecord
from nbcast.delivery.models import DeliveryReason, DeliveryState, RenditionState
from nbcast.delivery.queries import DeliveryRecord, RenditionRecord
from nbcast.executor.failures import ErrorInfo
from nbcast.executor.records import AttemptRecord, RunRecord
from nbcast.oversight.sla_queries import SlaAlertRecord, SlaMissRecord
from nbcast.records import flattened, internal, named
from nbcast.scheduler.upcoming import UpcomingFire
from nbcast.server_extension.openapi import document
from nbcast.server_extension.record_schemas import record_definition
from nbcast.tenancy.audit import AuditRecord
from nbcast.tenancy.tenants import TenantRecord
from nbcast.views.definitions import DefinitionDetail, DefinitionRecord, LastRun
from nbcast.views.health import Health, ServiceRecord
from nbcast.views.runs import RunDetail

AT = datetime(2026, 11, 2, 7, 0, tzinfo=UTC)
ERROR = ErrorInfo(
    ename="ZeroDivisionError",
    evalue="division by zero",
    cell_index=3,
    line_number=2,
    source_line="x = 1 / 0",
)
ATTEMPT = AttemptRecord(
    attempt=1,
    outcome="FAILED",
    worker="w",
    host="h",
    engine="local",
    started_at=AT,
    duration_s=1.5,
    error=ERROR,
)
OPEN = OpenRecord(
    link_id=5,
    run_id=7,
    delivery_id=None,
    recipient="cfo@example.com",
    filename="sales.pdf",
    opened_at=AT,
    network="203.0.113.0/24",
    user_agent="Mail/1.0",
)
ALERT = SlaAlertRecord(
    state="SENT", channel="email", to="owner@example.com", attempts=1, alerted_at=AT, error=None
)
FIRE = UpcomingFire(
    slot_key="2026-11-01T01:30",
    local=AT,
    fire_at=AT,
    status="scheduled",
    reason=None,
    note="01:30 happens twice",
)
DEFINITION = DefinitionRecord(
    id=9,
    name="sales",
    latest_version=2,
    schedule="30 1 * * * (America/New_York)",
    cron="30 1 * * *",
    every=None,
    timezone="America/New_York",
    source_path="reports/sales.ipynb",
    created_at=AT,
    updated_at=AT,
    paused=False,
    next_fire_at=AT,
    schedule_error=None,
    failures=0,
    last_run=LastRun(state="SUCCEEDED", reason=None, fire_at=AT),
    next_fires=[FIRE],
    block={"schedule": {"cron": "30 1 * * *"}},
)
VERSION = VersionInfo(
    definition="sales",
    version=2,
    sha256="d" * 64,
    author="alice",
    message="top 5",
    created_at=AT,
    schema=(Parameter(name="top_n", type="integer", default=5, help="how many", line=3),),
    block={"name": "sales"},
    notebook_json="{}",
)
SERVICE = ServiceRecord(
    kind="worker",
    name="w1",
    host="h",
    pid=42,
    version="1",
    state="running",
    alive=True,
    started_at=AT,
    beat_at=AT,
    lag_s=0.5,
    iterations=3,
    errors=0,
    last_error=None,
    detail={"sandbox": "on"},
)


def _validator(name: str) -> jsonschema.Draft202012Validator:
    doc = document()
    component = {**doc["components"]["schemas"][name], "components": doc["components"]}
    return jsonschema.Draft202012Validator(component)


@pytest.mark.parametrize(
    ("name", "record"),
    [
        (
            "Run",
            RunRecord(
                id=7,
                definition="sales",
                slot_key="2026-11-02T07:00",
                kind="scheduled",
                state="SUCCEEDED",
                reason=None,
                fire_at=AT,
                version=2,
                parameters={"top_n": 5},
                created_at=AT,
                started_at=AT,
            ),
        ),
        (
            "Attempt",
            ATTEMPT,
        ),
        ("RunError", ErrorInfo(reason="lost", message="the lease expired")),
        (
            "Delivery",
            DeliveryRecord(
                id=3,
                run_id=7,
                report="sales",
                channel="email",
                recipient="cfo@example.com",
                formats=("pdf",),
                state=DeliveryState.SUPPRESSED,
                reason=DeliveryReason.no_results,
                attempts=1,
                possible_duplicate=False,
                outcome_unknown=False,
                not_before=AT,
                sent_at=None,
                receipt=None,
                error=None,
                created_at=AT,
                updated_at=AT,
            ),
        ),
        (
            "Rendition",
            RenditionRecord(
                id=4,
                run_id=7,
                format="pdf",
                variant="",
                state=RenditionState.DONE,
                attempts=1,
                sha256="b" * 64,
                size=1234,
                filename="sales.pdf",
                media_type="application/pdf",
                seconds=0.4,
                error=None,
                rendered_at=AT,
            ),
        ),
        (
            "UpcomingFire",
            UpcomingFire(
                slot_key="2026-11-01T01:30",
                local=AT,
                fire_at=AT,
                status="scheduled",
                reason=None,
                note="01:30 happens twice",
            ),
        ),
        ("Definition", DEFINITION),
        ("DefinitionVersion", VERSION),
        ("DefinitionDetail", DefinitionDetail(version=VERSION, record=DEFINITION)),
        ("LastRun", LastRun(state="FAILED", reason="max_attempts", fire_at=None)),
        (
            "Tenant",
            TenantRecord(
                name="acme",
                created_at=AT,
                quotas={
                    "max_concurrent_runs": 4,
                    "cpus_per_run": 1.0,
                    "memory_mb_per_run": 512,
                    "run_timeout_s": 3600,
                    "max_attempts": 3,
                    "share": 1.0,
                    "max_processes_per_run": 64,
                    "budget_warehouse_bytes_per_day": None,
                    "budget_cpu_s_per_day": 3600.0,
                },
                ceilings={"max_concurrent_runs": 8},
                network="none",
            ),
        ),
        ("LinkOpen", OPEN),
        ("SlaAlert", ALERT),
        (
            "SlaMiss",
            SlaMissRecord(
                id=1,
                definition="sales",
                slot_key="2026-11-02T07:00",
                fire_at=AT,
                deadline=AT,
                detected_at=AT,
                state="FAILED",
                reason="max_attempts",
                run_id=7,
                alert=ALERT,
            ),
        ),
        ("Service", SERVICE),
        (
            "Health",
            Health(
                ok=False,
                checked_at=AT,
                alive={"scheduler": 0, "worker": 1},
                scheduler_lag_s=3.25,
                unsandboxed_workers=[],
                services=[SERVICE],
            ),
        ),
        (
            "RunDetail",
            RunDetail(
                id=7,
                tenant="default",
                definition="sales",
                version=2,
                slot_key="2026-11-02T07:00",
                kind="scheduled",
                fire_at=AT,
                state="FAILED",
                reason="max_attempts",
                created_at=AT,
                started_at=AT,
                finished_at=AT,
                not_before=AT,
                parameters={"top_n": 5},
                attempt=1,
                notebook_sha256="c" * 64,
                error=ERROR,
                context={"slot_key": "2026-11-02T07:00"},
                attempts=[ATTEMPT],
                renditions=[],
                deliveries=[],
                link_opens=[OPEN],
                link_opens_more=False,
            ),
        ),
        (
            "AuditEntry",
            AuditRecord(
                tenant="default",
                seq=1,
                at=AT,
                actor="alice",
                action="definition.published",
                object="definition:sales",
                details={"version": 1},
                prev_hash="0" * 64,
                hash="a" * 64,
            ),
        ),
    ],
)
def test_a_records_json_is_its_component(name: str, record: Any) -> None:
    component = document()["components"]["schemas"][name]
    data = record.to_json()
    assert set(data) == set(component["properties"])
    _validator(name).validate(data)
    first = next(iter(component["required"]))
    with pytest.raises(jsonschema.ValidationError):
        _validator(name).validate({k: v for k, v in data.items() if k != first})


def test_annotations_map_to_schemas() -> None:
    @dataclass(frozen=True, kw_only=True)
    class Sample:
        """A sample record.

        Its second paragraph is not the description."""

        n: int
        """How many."""
        share: float | None
        names: list[str]
        at: datetime
        extra: dict[str, Any] | None = None
        on: bool = False

    component = record_definition(Sample)
    assert component["description"] == "A sample record."
    assert component["required"] == ["n", "share", "names", "at", "extra", "on"]
    assert component["properties"] == {
        "n": {"type": "integer", "description": "How many."},
        "share": {"type": ["number", "null"]},
        "names": {"type": "array", "items": {"type": "string"}},
        "at": {"type": "string", "format": "date-time"},
        "extra": {"type": ["object", "null"]},
        "on": {"type": "boolean"},
    }


@dataclass(frozen=True, kw_only=True)
class Inner:
    """Inner."""

    a: int
    b: str
    c: bool


@dataclass(frozen=True, kw_only=True)
class Outer:
    """Outer."""

    key: int = internal()
    shown_as: str = named("label")
    inner: Inner = flattened(only=("a", "c"))


def test_internal_named_and_flattened_fields_shape_the_component() -> None:
    component = record_definition(Outer)
    assert component["required"] == ["label", "a", "c"]
    assert component["properties"] == {
        "label": {"type": "string"},
        "a": {"type": "integer"},
        "c": {"type": "boolean"},
    }


def test_a_definition_detail_is_its_version_then_the_definitions_state() -> None:
    detail = DefinitionDetail(version=VERSION, record=DEFINITION).to_json()
    assert (
        detail["created_at"] == VERSION.to_json()["created_at"]
    )  # the version's, not the definition's
    assert detail["parameters"] == [
        {"name": "top_n", "type": "integer", "default": 5, "help": "how many", "allowed": None}
    ]
    assert detail["next_fires"] == [FIRE.to_json()]
    assert "source_path" not in detail
    assert "line" not in detail["parameters"][0]
