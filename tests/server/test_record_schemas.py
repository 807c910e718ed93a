"""The API's Run, Attempt, RunError, Delivery, Rendition, UpcomingFire and AuditEntry
components are derived from the records the query layer returns: each record's JSON has
exactly the component's properties, validates against it, and the derivation maps
annotations (and field docstrings) as its module says."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import jsonschema
import pytest

from nbcast.delivery.models import DeliveryReason, DeliveryState, RenditionState
from nbcast.delivery.queries import DeliveryRecord, RenditionRecord
from nbcast.executor.failures import ErrorInfo
from nbcast.executor.records import AttemptRecord, RunRecord
from nbcast.scheduler.upcoming import UpcomingFire
from nbcast.server_extension.openapi import document
from nbcast.server_extension.record_schemas import record_definition
from nbcast.tenancy.audit import AuditRecord

AT = datetime(2026, 11, 2, 7, 0, tzinfo=UTC)


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
            AttemptRecord(
                attempt=1,
                outcome="FAILED",
                worker="w",
                host="h",
                engine="local",
                started_at=AT,
                duration_s=1.5,
                error=ErrorInfo(
                    ename="ZeroDivisionError",
                    evalue="division by zero",
                    cell_index=3,
                    line_number=2,
                    source_line="x = 1 / 0",
                ),
            ),
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
