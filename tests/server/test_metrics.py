"""``/nbcast/metrics`` on a live server: Prometheus text that prometheus_client
parses, the database's families with bounded labels, the process's own metrics,
the server's authorization unless the operator opened it, and tenant names only
for administrators."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from nbcast.access import Caller
from nbcast.clock import SystemClock
from nbcast.definitions.versions import publish
from nbcast.governance.tenants import ensure_tenant
from nbcast.scheduler.control import run_now
from nbcast.server_extension.metrics import MAX_LABEL_VALUES, OTHER, _bounded
from tests.notebooks import make_notebook
from tests.server.deliveries import database
from tests.server.live import LiveServer

FAMILIES = {
    "nbcast_up",
    "nbcast_runs",
    "nbcast_slots_materialized",
    "nbcast_queue_depth",
    "nbcast_queue_oldest_age_seconds",
    "nbcast_scheduler_lag_seconds",
    "nbcast_services_alive",
    "nbcast_service_heartbeat_lag_seconds",
    "nbcast_run_attempts",
    "nbcast_run_duration_seconds",
    "nbcast_deliveries",
    "nbcast_render_duration_seconds",
    "nbcast_link_opens",
}


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


@pytest.fixture(scope="module")
def queued(server: LiveServer, tmp_path_factory: pytest.TempPathFactory) -> int:
    """One run of tenant acme, queued (no worker runs in this server)."""
    folder: Path = tmp_path_factory.mktemp("metrics")
    db = database(server)
    try:
        with db.session() as session:
            ensure_tenant(session, "acme")
        notebook = make_notebook(folder / "kpi.ipynb", nbcast={"name": "kpi"})
        publish(db, notebook, tenant="acme", author="alice", environ=server.env)
        return run_now(db, SystemClock(), Caller(tenant="acme", user="alice"), "kpi", {})
    finally:
        db.dispose()


def test_scraping_needs_the_token(server: LiveServer) -> None:
    answer = httpx.get(f"{server.url}/nbcast/metrics", timeout=30)
    assert answer.status_code == 403
    assert set(answer.json()) == {"error"}
    assert "nbcast_runs" not in answer.text


def test_the_families_parse_and_count_the_database(server: LiveServer, queued: int) -> None:
    with server.client("alice") as client:
        answer = client.get("/nbcast/metrics")
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("text/plain")
    families = {f.name: f for f in text_string_to_metric_families(answer.text)}
    assert set(families) >= FAMILIES
    assert "process_cpu_seconds" in families or "python_info" in families
    samples = _samples(answer.text)
    assert samples[("nbcast_up", ())] == 1.0
    assert samples[("nbcast_queue_depth", ())] >= 1.0
    assert samples[("nbcast_runs", (("state", "QUEUED"),))] >= 1.0
    assert samples[("nbcast_link_opens_total", ())] == 0.0
    assert samples[("nbcast_services_alive", (("kind", "worker"),))] == 0.0
    assert ("nbcast_run_duration_seconds_bucket", (("le", "+Inf"),)) in samples
    assert "nbcast_tenant_queue_depth" not in families  # alice is no administrator
    for family in families.values():  # no label names a run, a definition or a host
        for sample in family.samples:
            assert set(sample.labels) <= {"state", "reason", "kind", "outcome", "channel", "le"} | (
                {"implementation", "major", "minor", "patchlevel", "version", "generation"}
            ), sample


@pytest.mark.parametrize("who", ["root", None], ids=["administrator", "server-token"])
def test_administrators_and_the_server_token_see_the_queue_per_tenant(
    server: LiveServer, queued: int, who: str | None
) -> None:
    with server.client(who) as client:
        answer = client.get("/nbcast/metrics")
    assert answer.status_code == 200
    assert _samples(answer.text)[("nbcast_tenant_queue_depth", (("tenant", "acme"),))] >= 1.0


def test_an_open_endpoint_needs_no_token(tmp_path: Path) -> None:
    with LiveServer(tmp_path, extra=("--NbcastApp.metrics_open=True",)) as live:
        answer = httpx.get(f"{live.url}/nbcast/metrics", timeout=30)
    assert answer.status_code == 200
    assert "nbcast_up 1.0" in answer.text


def test_label_values_are_capped() -> None:
    rows = [((f"channel-{i}", "SENT"), float(i + 1)) for i in range(MAX_LABEL_VALUES + 20)]
    bounded = dict(_bounded(rows))
    channels = {labels[0] for labels in bounded}
    assert len(channels) == MAX_LABEL_VALUES + 1
    assert OTHER in channels
    assert sum(bounded.values()) == sum(value for _, value in rows)  # nothing lost
    assert ("channel-69", "SENT") in bounded  # the largest are kept by name
