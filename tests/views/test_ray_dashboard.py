"""The Ray dashboard found by itself (issue 23, item 8): the Ray engine reads its URL
from ``ray.init()``'s context, the worker records it in its heartbeat, and the
overview's health names the freshest live worker's."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pytest

from nbcast.executor.engines.ray import dashboard_url
from nbcast.views.health import Health, ServiceRecord

T0 = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)


@dataclass
class Context:
    dashboard_url: Any


@pytest.mark.parametrize(
    ("given", "url"),
    [
        ("127.0.0.1:8265", "http://127.0.0.1:8265"),
        ("https://ray.example.com", "https://ray.example.com"),
        ("", None),
        (None, None),
    ],
)
def test_the_engine_reads_the_dashboard_from_rays_context(given: Any, url: str | None) -> None:
    assert dashboard_url(Context(given)) == url
    assert dashboard_url(object()) is None


def service(kind: str, lag: float, alive: bool, detail: dict[str, Any]) -> ServiceRecord:
    return ServiceRecord(
        kind=kind, name=f"{kind}-{lag}", host="h", pid=1, version="1", state="running",
        alive=alive, started_at=T0, beat_at=T0, lag_s=lag, iterations=1, errors=0,
        last_error=None, detail=detail,
    )  # fmt: skip


def test_the_freshest_live_workers_dashboard_is_named() -> None:
    services = [
        service("worker", 50.0, True, {"ray_dashboard": "http://old:8265"}),
        service("worker", 2.0, True, {"ray_dashboard": "http://new:8265"}),
        service("worker", 1.0, False, {"ray_dashboard": "http://dead:8265"}),
        service("scheduler", 0.5, True, {"ray_dashboard": "http://not-a-worker:8265"}),
        service("worker", 0.1, True, {}),
    ]
    health = Health(
        ok=True, checked_at=T0, alive={}, scheduler_lag_s=0.0, unsandboxed_workers=[],
        services=services,
    )  # fmt: skip
    assert health.ray_dashboard() == "http://new:8265"
    assert Health(
        ok=True, checked_at=T0, alive={}, scheduler_lag_s=0.0, unsandboxed_workers=[],
        services=[],
    ).ray_dashboard() is None  # fmt: skip
