"""``/nbcast/metrics`` on a live server: Prometheus text that prometheus_client
parses, the database's families with bounded labels, the process's own metrics,
the server's authorization unless the operator opened it, and tenant names only
for administrators — the queue of each tenant by state, its runs put in each state
by the execution plane's own queue (claimed, started) rather than by writing rows.
And the server holds no SQL of its own: its metrics are the governance plane's
queries."""

from __future__ import annotations

import ast
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from nbcast.access import Caller
from nbcast.clock import SystemClock
from nbcast.definitions.versions import publish
from nbcast.executor.queue import RunQueue
from nbcast.scheduler.control import run_now
from nbcast.server_extension.metrics import (
    MAX_LABEL_VALUES,
    MAX_TENANTS,
    OTHER,
    _bounded,
    tenant_queue_family,
)
from nbcast.views.metrics import QUEUE_STATES, TenantQueue
from tests.members import grant
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
    "nbcast_run_attempts_in_flight",
    "nbcast_run_duration_seconds",
    "nbcast_deliveries",
    "nbcast_deliveries_pending",
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
    """One run of tenant acme, queued (no worker runs in this server), by alice, an
    author there."""
    folder: Path = tmp_path_factory.mktemp("metrics")
    db = database(server)
    try:
        grant(db, "acme", "jupyter:alice")
        notebook = make_notebook(folder / "kpi.ipynb", nbcast={"name": "kpi"})
        publish(
            db, notebook, caller=Caller(tenant="acme", user="jupyter:alice"), environ=server.env
        )
        return run_now(db, SystemClock(), Caller(tenant="acme", user="jupyter:alice"), "kpi", {})
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
    # No Accept: the text format Prometheus 2.x reads.
    assert answer.headers["content-type"].startswith("text/plain; version=0.0.4")
    families = {f.name: f for f in text_string_to_metric_families(answer.text)}
    assert set(families) >= FAMILIES
    # What only grows is a counter; what goes up and down, a gauge.
    assert (families["nbcast_run_attempts"].type, families["nbcast_deliveries"].type) == (
        "counter",
        "counter",
    )
    assert families["nbcast_run_attempts_in_flight"].type == "gauge"
    assert "# TYPE nbcast_deliveries_total counter" in answer.text
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


@pytest.fixture(scope="module")
def in_the_queue(server: LiveServer, queued: int, tmp_path_factory: pytest.TempPathFactory) -> None:
    """Tenant acme with one run QUEUED, one LEASED and one RUNNING (claimed and
    started by the execution plane's queue, as a worker would, with a lease nobody
    reaps here); tenant globex with one QUEUED, by bob, an author there."""
    folder: Path = tmp_path_factory.mktemp("queue")
    clock = SystemClock()
    alice = Caller(tenant="acme", user="jupyter:alice")
    db = database(server)
    try:
        for _ in range(2):
            run_now(db, clock, alice, "kpi", {})
        queue = RunQueue(db, clock, owner="metrics-test", lease_seconds=3600)
        leases = queue.claim(limit=2)
        assert len(leases) == 2
        queue.start(leases[0])
        grant(db, "globex", "jupyter:bob")
        notebook = make_notebook(folder / "theirs.ipynb", nbcast={"name": "theirs"})
        publish(
            db, notebook, caller=Caller(tenant="globex", user="jupyter:bob"), environ=server.env
        )
        run_now(db, clock, Caller(tenant="globex", user="jupyter:bob"), "theirs", {})
    finally:
        db.dispose()


@pytest.mark.parametrize("who", ["root", None], ids=["administrator", "server-token"])
def test_administrators_and_the_server_token_see_the_queue_per_tenant_and_state(
    server: LiveServer, in_the_queue: None, who: str | None
) -> None:
    with server.client(who) as client:
        answer = client.get("/nbcast/metrics")
    assert answer.status_code == 200
    depth = {
        labels: value
        for (name, labels), value in _samples(answer.text).items()
        if name == "nbcast_tenant_queue_depth"
    }
    assert depth == {
        (("state", "QUEUED"), ("tenant", "acme")): 1.0,
        (("state", "LEASED"), ("tenant", "acme")): 1.0,
        (("state", "RUNNING"), ("tenant", "acme")): 1.0,
        (("state", "QUEUED"), ("tenant", "globex")): 1.0,
        (("state", "LEASED"), ("tenant", "globex")): 0.0,
        (("state", "RUNNING"), ("tenant", "globex")): 0.0,
    }
    samples = _samples(answer.text)
    assert samples[("nbcast_queue_depth", ())] == 2.0  # QUEUED only, every tenant
    assert samples[("nbcast_runs", (("state", "LEASED"),))] == 1.0
    assert samples[("nbcast_runs", (("state", "RUNNING"),))] == 1.0
    assert samples[("nbcast_run_attempts_in_flight", ())] == 2.0


def test_a_tenants_user_sees_no_tenant_in_the_queue(server: LiveServer, in_the_queue: None) -> None:
    with server.client("alice") as client:
        answer = client.get("/nbcast/metrics")
    assert answer.status_code == 200
    assert "nbcast_tenant_queue_depth" not in answer.text
    assert "globex" not in answer.text


def test_the_per_tenant_queue_names_the_deepest_tenants_only() -> None:
    queues = [
        TenantQueue(tenant=f"t{i:03d}", counts={"QUEUED": i, "LEASED": 1, "RUNNING": 0})
        for i in range(MAX_TENANTS + 10)
    ]
    family = tenant_queue_family(queues)
    by_labels = {(s.labels["tenant"], s.labels["state"]): s.value for s in family.samples}
    tenants = {tenant for tenant, _ in by_labels}
    assert len(tenants) == MAX_TENANTS + 1
    assert OTHER in tenants
    assert "t059" in tenants  # the deepest are kept by name
    assert "t000" not in tenants
    assert len(by_labels) == len(tenants) * len(QUEUE_STATES)  # every state, zeros too
    assert by_labels[("t059", "RUNNING")] == 0.0
    assert by_labels[(OTHER, "LEASED")] == 10.0  # the ten shallowest, summed
    assert by_labels[(OTHER, "QUEUED")] == sum(range(10))
    total = sum(q.total for q in queues)
    assert sum(by_labels.values()) == total  # nothing lost


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


SERVER = Path(__file__).resolve().parents[2] / "nbcast" / "server_extension"


def test_the_server_holds_no_sql_of_its_own() -> None:
    """Its modules may name a Session in a type hint, nothing more of SQLAlchemy."""
    files = sorted(SERVER.rglob("*.py"))
    assert len(files) > 20
    found = []
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names if a.name.split(".")[0] == "sqlalchemy"]
                found += [f"{path.name}:{node.lineno} import {n}" for n in names]
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("sqlalchemy"):
                imported = {a.name for a in node.names}
                if node.module != "sqlalchemy.orm" or imported != {"Session"}:
                    found.append(f"{path.name}:{node.lineno} from {node.module} import {imported}")
    assert found == []


@pytest.mark.parametrize(
    ("accept", "content_type"),
    [
        ("text/plain;version=0.0.4;q=1,*/*;q=0.1", "text/plain; version=0.0.4"),
        (
            "application/openmetrics-text;version=1.0.0,application/openmetrics-text;"
            "version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1",
            "application/openmetrics-text; version=1.0.0",
        ),
        ("*/*", "text/plain; version=0.0.4"),
    ],
)
def test_the_format_follows_the_scrapers_accept_header(
    server: LiveServer, queued: int, accept: str, content_type: str
) -> None:
    with server.client("alice") as client:
        answer = client.get("/nbcast/metrics", headers={"Accept": accept})
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith(content_type)
    assert answer.headers["vary"] == "Accept"
    if "openmetrics" in content_type:
        assert answer.text.rstrip().endswith("# EOF")
        assert "# TYPE nbcast_run_attempts counter" in answer.text
