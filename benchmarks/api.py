"""The server's two figures, each side by side with its reference. Prints JSON.

1. ``runs_list``: ``GET /nbcast/api/v1/runs?limit=50`` on PostgreSQL holding 1,000,000
   runs across 1,000 definitions and 3 tenants (the caller's tenant has 950,000 of
   them), through a real ``nbcast serve`` over HTTP with keep-alive — p50 and p99
   latency of the first page and of a deep page (the page after the 900,000th row,
   by its cursor) — next to the same query issued directly through SQLAlchemy in
   this process (``nbcast.executor.queries.list_runs`` with the same arguments).
   Targets: p99 ≤ 50 ms and ≤ 3× the direct query; deep pages as fast as the first.
2. ``link_serving``: a signed link to a 200 kB HTML rendition, fetched by 8 concurrent
   clients for a fixed time — requests per second — next to tornado's own
   ``StaticFileHandler`` serving the same file from a tornado process of its own, with
   the same clients. Every link fetch verifies the token, checks revocation and
   expiry, records the open and reads the artifact. Target: ≥ 0.5× the static file.

The clients run in a process of their own (asyncio, httpx, HTTP/1.1 keep-alive). On a
2-core machine the clients and the server share the cores, for both sides alike.

Usage: ``python -m benchmarks.api [--runs N] [--requests N] [--seconds S]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import sqlalchemy as sa

from benchmarks._common import scratch_database
from nbcast.access import Caller, encode_cursor
from nbcast.db import Database
from nbcast.testing.http import free_port

REPO = Path(__file__).resolve().parents[1]
TENANTS = (("acme", 950), ("globex", 25), ("initech", 25))
"""Tenants and their definitions; runs are spread evenly over the definitions."""
CALLER = Caller(tenant="acme", user="jupyter:bench")
"""The server's user bench (a jupyter identity: :mod:`nbcast.access`), acme's author."""


# -- seeding -------------------------------------------------------------------------


def seed(url: str, runs: int) -> None:
    """Tenants, definitions and ``runs`` runs, one a minute per definition, in SQL."""
    db = Database.open(url, upgrade=False)
    definitions = sum(n for _, n in TENANTS)
    with db.engine.begin() as conn:
        for name, _ in TENANTS:
            conn.execute(
                sa.text("INSERT INTO tenants (name, created_at) VALUES (:n, now())"), {"n": name}
            )
        conn.execute(
            sa.text(
                "INSERT INTO users (tenant_id, name, role, created_at) "
                "SELECT id, 'jupyter:bench', 'author', now() FROM tenants WHERE name <> 'default'"
            )
        )
        offset = 0
        for tenant, count in TENANTS:  # ids by name: migrations create a "default" tenant
            index = conn.execute(
                sa.text("SELECT id FROM tenants WHERE name = :n"), {"n": tenant}
            ).scalar_one()
            conn.execute(
                sa.text(
                    "INSERT INTO report_definitions (tenant_id, name, source_path, created_by, "
                    "created_at, latest_version) SELECT CAST(:t AS integer), 'report-' || g, "
                    "'/r.ipynb', (SELECT id FROM users WHERE tenant_id = CAST(:t AS integer)), "
                    "now(), 1 "
                    "FROM generate_series(CAST(:lo AS integer), CAST(:hi AS integer)) g"
                ),
                {"t": index, "lo": offset + 1, "hi": offset + count},
            )
            offset += count
        conn.execute(
            sa.text(
                "INSERT INTO definition_versions (tenant_id, definition_id, version, sha256, "
                "notebook_json, parameter_schema, spec, author_id, message, created_at) "
                "SELECT tenant_id, id, 1, 'x', '{}', '[]', '{}', created_by, '', now() "
                "FROM report_definitions"
            )
        )
        # Run g belongs to definition 1 + g % definitions and fires g minutes after the
        # start: tenant acme's definitions are the first 950, so acme holds 95 %.
        conn.execute(
            sa.text(
                "INSERT INTO runs (tenant_id, definition_id, version_id, version, kind, "
                "slot_key, fire_at, state, reason, parameters, context, serial, not_before, "
                "created_at, attempt) "
                "SELECT d.tenant_id, d.id, v.id, 1, 'scheduled', "
                "to_char(timestamp '2024-01-01' + g * interval '1 minute', "
                "'YYYY-MM-DD\"T\"HH24:MI'), "
                "timestamptz '2024-01-01 00:00:00+00' + g * interval '1 minute', "
                "(ARRAY['SUCCEEDED','SUCCEEDED','SUCCEEDED','FAILED','SKIPPED','MISSED'])"
                '[1 + g % 6], NULL, \'{"region": "EMEA"}\', NULL, true, '
                "timestamptz '2024-01-01 00:00:00+00' + g * interval '1 minute', now(), 1 "
                "FROM generate_series(0, CAST(:n AS integer) - 1) g "
                "JOIN report_definitions d ON d.id = 1 + g % CAST(:defs AS integer) "
                "JOIN definition_versions v ON v.definition_id = d.id"
            ),
            {"n": runs, "defs": definitions},
        )
        conn.execute(sa.text("ANALYZE runs"))
    db.dispose()


def deep_cursor(url: str, position: int) -> str:
    """The cursor of the page after the ``position``-th run of acme (fire order)."""
    db = Database.open(url, upgrade=False)
    try:
        with db.engine.connect() as conn:
            row = conn.execute(
                sa.text(
                    "SELECT fire_at, id FROM runs "
                    "WHERE tenant_id = (SELECT id FROM tenants WHERE name = 'acme') "
                    "ORDER BY fire_at, id OFFSET :k LIMIT 1"
                ),
                {"k": position - 1},
            ).one()
        return encode_cursor(row.fire_at, row.id)
    finally:
        db.dispose()


# -- figure 1: the runs list ------------------------------------------------------------


def _percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return {
        "p50_ms": round(statistics.median(ordered) * 1000, 2),
        "p99_ms": round(p99 * 1000, 2),
        "requests": len(ordered),
    }


def time_api(client: httpx.Client, params: dict[str, str], requests: int) -> dict[str, float]:
    """Latencies of ``GET /nbcast/api/v1/runs`` with ``params``."""
    samples = []
    for _ in range(requests + 20):
        started = time.perf_counter()
        answer = client.get("/nbcast/api/v1/runs", params=params)
        elapsed = time.perf_counter() - started
        if answer.status_code != 200 or len(answer.json()["items"]) != 50:
            raise RuntimeError(f"GET /runs answered {answer.status_code}: {answer.text[:300]}")
        samples.append(elapsed)
    return _percentiles(samples[20:])  # the first 20 warm the connection and the caches


def time_direct(db: Database, after: str | None, requests: int) -> dict[str, float]:
    """Latencies of the same query through SQLAlchemy in this process."""
    from nbcast.executor.queries import list_runs

    samples = []
    for _ in range(requests + 20):
        started = time.perf_counter()
        with db.session() as session:
            page = list_runs(session, CALLER, limit=50, after=after)
            body = json.dumps([r.to_json() for r in page.items])
        elapsed = time.perf_counter() - started
        if not body or len(page.items) != 50:
            raise RuntimeError("the direct query returned a short page")
        samples.append(elapsed)
    return _percentiles(samples[20:])


# -- figure 2: link serving ------------------------------------------------------------


def _load(url: str, seconds: float, clients: int, out: Any) -> None:
    """``clients`` concurrent keep-alive clients fetching ``url`` for ``seconds``."""

    async def client(deadline: float, counts: list[int], http: httpx.AsyncClient) -> None:
        while time.perf_counter() < deadline:
            answer = await http.get(url)
            if answer.status_code != 200:
                raise RuntimeError(f"{url} answered {answer.status_code}")
            counts[0] += 1
            counts[1] += len(answer.content)

    async def run() -> tuple[int, int, float]:
        counts = [0, 0]
        limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
        async with httpx.AsyncClient(limits=limits, timeout=30) as http:
            await http.get(url)  # warm
            started = time.perf_counter()
            deadline = started + seconds
            await asyncio.gather(*(client(deadline, counts, http) for _ in range(clients)))
            return counts[0], counts[1], time.perf_counter() - started

    done, size, elapsed = asyncio.run(run())
    out.put({"requests": done, "bytes": size, "seconds": round(elapsed, 2)})


def load(url: str, seconds: float, clients: int = 8) -> dict[str, Any]:
    """Requests per second of ``url`` under :func:`_load` in a process of its own."""
    queue: Any = multiprocessing.Queue()
    proc = multiprocessing.Process(target=_load, args=(url, seconds, clients, queue))
    proc.start()
    result: dict[str, Any] = queue.get(timeout=seconds + 120)
    proc.join(timeout=30)
    result["requests_per_s"] = round(result["requests"] / result["seconds"], 1)
    return result


STATIC_SERVER = """
import sys, asyncio, tornado.web
async def main():
    app = tornado.web.Application([(r"/static/(.*)", tornado.web.StaticFileHandler,
                                    {"path": sys.argv[1]})])
    app.listen(int(sys.argv[2]), address="127.0.0.1")
    await asyncio.Event().wait()
asyncio.run(main())
"""


def static_reference(folder: Path, name: str, seconds: float) -> dict[str, Any]:
    """tornado's StaticFileHandler serving ``folder/name`` under the same load."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-c", STATIC_SERVER, str(folder), str(port)])
    url = f"http://127.0.0.1:{port}/static/{name}"
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if httpx.get(url, timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.1)
        return load(url, seconds)
    finally:
        proc.terminate()
        proc.wait(timeout=15)


def html_report(size: int = 200_000) -> bytes:
    """A ~``size``-byte HTML report: a heading and a long table."""
    rows = []
    n = 0
    while sum(len(r) for r in rows) < size - 400:
        rows.append(f"<tr><td>{n}</td><td>EMEA</td><td>{n * 37 % 10_000}.00</td></tr>\n")
        n += 1
    body = "".join(rows)
    return (
        "<!DOCTYPE html><html><head><meta charset='utf-8'><title>report</title></head>"
        f"<body><h1>Daily sales</h1><table>{body}</table></body></html>"
    ).encode()


def make_link(url: str, home: Path, content: bytes, base_url: str) -> str:
    """Store ``content`` and a signed link to it for acme's first run; its URL."""
    from nbcast.artifacts import open_store
    from nbcast.config import prepare_home
    from nbcast.delivery.links import create_link
    from nbcast.delivery.signing import load_signer

    prepare_home(home)
    sha = open_store(str(home / "artifacts")).put(content).sha256
    signer = load_signer(home, {})
    db = Database.open(url, upgrade=False)
    try:
        with db.session() as session:
            tenant_id = session.execute(
                sa.text("SELECT tenant_id FROM runs WHERE id = 1")
            ).scalar_one()
            issued = create_link(
                session,
                signer,
                tenant_id=tenant_id,
                run_id=1,
                recipient="cfo@example.com",
                sha256=sha,
                filename="report.html",
                media_type="text/html",
                now=datetime.now(UTC),
                ttl=timedelta(days=1),
                base_url=base_url,
            )
            return issued.url
    finally:
        db.dispose()


# -- main ------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=1_000_000)
    parser.add_argument("--requests", type=int, default=500, help="timed requests per case")
    parser.add_argument("--seconds", type=float, default=10.0, help="load time per side")
    args = parser.parse_args()
    sys.path.insert(0, str(REPO))
    from tests.server.live import LiveServer

    results: dict[str, Any] = {"benchmark": "api", "runs": args.runs}
    with scratch_database() as url, tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        seed(url, args.runs)
        results["seed_seconds"] = round(time.perf_counter() - started, 1)
        deep = deep_cursor(url, min(900_000, int(args.runs * 0.95) - 100))
        folder = Path(tmp)
        server = LiveServer(
            folder,
            users={"bench": "acme"},
            env={"NBCAST_DATABASE_URL": url},
            extra=("--NbcastApp.link_rate_per_minute=100000",),
        )
        with server:
            with server.client("bench") as client:
                first_api = time_api(client, {"limit": "50"}, args.requests)
                deep_api = time_api(client, {"limit": "50", "after": deep}, args.requests)
            db = Database.open(url, upgrade=False)
            try:
                first_direct = time_direct(db, None, args.requests)
                deep_direct = time_direct(db, deep, args.requests)
            finally:
                db.dispose()
            results["runs_list"] = {
                "first_page": {"api": first_api, "direct_sqlalchemy": first_direct},
                "deep_page_after_900000": {"api": deep_api, "direct_sqlalchemy": deep_direct},
                "p99_api_over_direct": {
                    "first_page": round(first_api["p99_ms"] / first_direct["p99_ms"], 2),
                    "deep_page": round(deep_api["p99_ms"] / deep_direct["p99_ms"], 2),
                },
                "deep_over_first_p50": round(deep_api["p50_ms"] / first_api["p50_ms"], 2),
                "targets": {"p99_ms": 50, "api_over_direct": 3.0},
            }
            content = html_report()
            link = make_link(url, server.home, content, server.url)
            served = load(link, args.seconds)
        static_folder = folder / "static"
        static_folder.mkdir()
        (static_folder / "report.html").write_bytes(content)
        reference = static_reference(static_folder, "report.html", args.seconds)
        results["link_serving"] = {
            "file_bytes": len(content),
            "clients": 8,
            "signed_link": served,
            "tornado_static_file": reference,
            "link_over_static": round(served["requests_per_s"] / reference["requests_per_s"], 3),
            "target": 0.5,
        }
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    main()
