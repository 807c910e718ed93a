"""Forwarded addresses count only from a configured proxy
(:mod:`nbcast.server_extension.forwarded`), against a live server with
``ServerApp.trust_xheaders`` on and ``NbcastApp.trusted_proxies`` naming 127.0.0.2:

- a client connecting from 127.0.0.1 that spoofs ``X-Forwarded-For`` and
  ``X-Real-Ip`` with a new address on every request still hits the per-address rate
  limit, and every opening is recorded with its real network (127.0.0.0/24);
- the proxy (connections from 127.0.0.2) has its forwarded client address believed.

The link is made directly in the server's database (a queued run of a published
notebook, a stored file, a signed link): no worker is needed to open one.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import httpx
import pytest

from nbcast.artifacts import open_store
from nbcast.clock import SystemClock
from nbcast.config import load_settings
from nbcast.definitions.versions import publish
from nbcast.delivery.link_opens import opens_of_run
from nbcast.delivery.links import create_link
from nbcast.delivery.signing import load_signer
from nbcast.scheduler.control import run_now
from nbcast.tenancy.models import Tenant
from tests.members import grant
from tests.notebooks import make_notebook
from tests.server.deliveries import ALICE, database
from tests.server.live import LiveServer

RATE = 120
"""The default ``NbcastApp.link_rate_per_minute``."""
PROXY = "127.0.0.2"


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    folder: Path = tmp_path_factory.mktemp("forwarded")
    extra = ("--ServerApp.trust_xheaders=True", f"--NbcastApp.trusted_proxies={PROXY}")
    with LiveServer(folder, users={"alice": "acme"}, extra=extra) as server:
        yield server


def _link(live: LiveServer, name: str) -> tuple[int, str]:
    """A run of a fresh definition ``name`` and a signed link to a stored file of it."""
    db = database(live)
    try:
        grant(db, ALICE.tenant, ALICE.user)
        publish(
            db, make_notebook(live.folder / f"{name}.ipynb", nbcast={"name": name}), caller=ALICE
        )
        run_id = run_now(db, SystemClock(), ALICE, name, {})
        sha = open_store(load_settings(live.env).artifacts_location).put(b"report,42\n").sha256
        with db.session() as session:
            tenant = session.query(Tenant).filter_by(name=ALICE.tenant).one()
            issued = create_link(
                session,
                load_signer(live.home, live.env),
                tenant_id=tenant.id,
                run_id=run_id,
                recipient="cfo@example.com",
                sha256=sha,
                filename="report.csv",
                media_type="text/csv",
                now=SystemClock().now(),
                ttl=timedelta(days=1),
                base_url=live.url,
            )
    finally:
        db.dispose()
    return run_id, issued.url


def _networks(live: LiveServer, run_id: int) -> Counter[str]:
    db = database(live)
    try:
        with db.session() as session:
            return Counter(o.network for o in opens_of_run(session, ALICE, run_id))
    finally:
        db.dispose()


def test_spoofed_forwarding_headers_neither_escape_the_limit_nor_fake_the_network(
    live: LiveServer,
) -> None:
    run_id, url = _link(live, "spoofed")
    statuses: Counter[int] = Counter()
    with httpx.Client(timeout=30) as client:
        for i in range(150):
            spoof = f"198.51.{i // 250}.{i % 250 + 1}"
            answer = client.get(
                url,
                headers={
                    "X-Forwarded-For": f"203.0.113.{i % 250 + 1}, {spoof}",
                    "X-Real-Ip": spoof,
                },
            )
            statuses[answer.status_code] += 1
    assert statuses[429] >= 150 - RATE - 10, statuses  # a few tokens refill meanwhile
    assert set(statuses) == {200, 429}, statuses
    assert _networks(live, run_id) == Counter({"127.0.0.0/24": statuses[200]})


def test_the_configured_proxy_forwards_the_clients_address(live: LiveServer) -> None:
    run_id, url = _link(live, "proxied")
    proxy = httpx.HTTPTransport(local_address=PROXY)
    with httpx.Client(transport=proxy, timeout=30) as client:
        # nginx's $proxy_add_x_forwarded_for: what the client sent, then its address.
        forwarded = client.get(url, headers={"X-Forwarded-For": "10.9.9.9, 192.0.2.77"})
        real_ip = client.get(url, headers={"X-Real-Ip": "2001:db8:5::1"})
    assert (forwarded.status_code, real_ip.status_code) == (200, 200)
    assert _networks(live, run_id) == Counter({"192.0.2.0/24": 1, "2001:db8:5::/48": 1})


@pytest.mark.parametrize(
    ("peer", "headers", "expected"),
    [
        pytest.param("127.0.0.1", {"X-Forwarded-For": "192.0.2.1"}, "127.0.0.1", id="not-a-proxy"),
        pytest.param(
            "10.0.0.5", {"X-Forwarded-For": "6.6.6.6, 192.0.2.1"}, "192.0.2.1", id="proxy"
        ),
        pytest.param(
            "10.0.0.5", {"X-Forwarded-For": "192.0.2.1, 10.0.0.9"}, "192.0.2.1", id="two-proxies"
        ),
        pytest.param(
            "10.0.0.5",
            {"X-Forwarded-For": "192.0.2.1", "X-Real-Ip": "6.6.6.6"},
            "192.0.2.1",
            id="forwarded-for-first",
        ),
        pytest.param("10.0.0.5", {"X-Real-Ip": "192.0.2.9"}, "192.0.2.9", id="real-ip"),
        pytest.param("10.0.0.5", {"X-Forwarded-For": "nonsense"}, "10.0.0.5", id="nonsense"),
        pytest.param("10.0.0.5", {}, "10.0.0.5", id="no-header"),
    ],
)
def test_the_client_address_rules(peer: str, headers: dict[str, str], expected: str) -> None:
    from nbcast.server_extension.forwarded import TrustedProxies

    proxies = TrustedProxies.parse(["10.0.0.0/24"], trust_xheaders=True)
    assert proxies.client_address(peer, headers) == expected
    off = TrustedProxies.parse(["10.0.0.0/24"], trust_xheaders=False)
    assert off.client_address(peer, headers) == peer
