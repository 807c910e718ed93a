"""Signed links served by a live server: a real report delivered by the real
services, each format opened with no login, tampered, unknown, revoked and expired
tokens refused with 403, 404 and 410, every opening recorded, and a flood of
requests from one address answered 429.

The server runs with ``ServerApp.allow_unauthenticated_access = False``, jupyter-
server's strictest mode: the public endpoints must still answer without a login
(and never redirect to one)."""

from __future__ import annotations

import html
import json
import math
import os
import re
import subprocess
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import httpx
import pytest

from nbcast.access import Caller
from nbcast.artifacts import open_store
from nbcast.clock import SystemClock
from nbcast.config import load_settings
from nbcast.delivery.commands import revoke_link
from nbcast.delivery.link_opens import network_of, opens_of_run
from nbcast.delivery.links import create_link
from nbcast.delivery.models import SignedLink
from nbcast.delivery.signing import Signer, load_signer
from nbcast.errors import UnknownRunError
from nbcast.server_extension.handlers.links import CHUNK_BYTES
from nbcast.server_extension.ratelimit import RateLimiter
from tests.members import grant
from tests.server.deliveries import ALICE, RECIPIENT, Delivered, database, deliver
from tests.server.live import BIN, LiveServer

STRICT = ("--ServerApp.allow_unauthenticated_access=False",)
AGENT = "nbcast-tests/1.0 (links)"
HOSTILE_AGENT = "<script>alert('ua')</script> " + " ".join(["Mozilla/5.0 (X11; Linux)"] * 14)
"""A user agent of 378 characters, markup first: recorded cut to 256, shown cut and
escaped."""


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    folder: Path = tmp_path_factory.mktemp("links")
    with LiveServer(folder, users={"alice": "acme"}, extra=STRICT) as server:
        yield server


@pytest.fixture(scope="module")
def delivered(live: LiveServer) -> Delivered:
    return deliver(live, live.folder)


def _signer(live: LiveServer) -> Signer:
    return load_signer(live.home, live.env)


def _link_id(live: LiveServer, url: str) -> int:
    token = url.rsplit("/", 1)[1]
    return int(_signer(live).verify(token, purpose="link")["l"])


def _open(url: str) -> httpx.Response:
    """A recipient's request: no credentials, no cookies, a browser's user agent."""
    return httpx.get(url, headers={"User-Agent": AGENT}, timeout=30, follow_redirects=False)


def _opens(live: LiveServer, run_id: int) -> int:
    db = database(live)
    try:
        with db.session() as session:
            return len(opens_of_run(session, ALICE, run_id))
    finally:
        db.dispose()


def _by_type(delivered: Delivered) -> dict[str, httpx.Response]:
    answers = [_open(url) for url in delivered.links]
    assert [a.status_code for a in answers] == [200] * len(answers), [a.text for a in answers]
    return {a.headers["content-type"].split(";")[0]: a for a in answers}


def test_each_format_opens_without_a_login_with_safe_headers(
    live: LiveServer, delivered: Delivered
) -> None:
    assert all(url.startswith(f"{live.url}/nbcast/links/") for url in delivered.links)
    answers = _by_type(delivered)
    assert set(answers) == {
        "text/html",
        "text/csv",
        "application/pdf",
        "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
    }
    for answer in answers.values():
        assert answer.headers["x-content-type-options"] == "nosniff"
        assert answer.headers["referrer-policy"] == "no-referrer"
        assert answer.headers["cache-control"] == "private, no-store"
        assert int(answer.headers["content-length"]) == len(answer.content) > 0
    page = answers["text/html"]
    policy = [p.strip() for p in page.headers["content-security-policy"].split(";")]
    assert "sandbox" in policy  # sandboxed, and no allow-scripts: no script runs
    assert not any("allow-scripts" in p for p in policy)
    assert "default-src 'none'" in policy
    assert page.headers["content-disposition"].startswith("inline;")
    assert "APAC" in page.text
    pdf = answers["application/pdf"]
    assert pdf.content.startswith(b"%PDF-")
    assert pdf.headers["content-disposition"].startswith("inline;")
    csv = answers["text/csv"]
    assert csv.headers["content-disposition"].startswith("attachment;")
    assert "APAC" in csv.text
    xlsx = answers["application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"]
    assert xlsx.content.startswith(b"PK")  # a zip: the workbook
    assert xlsx.headers["content-disposition"].startswith("attachment;")
    assert ".xlsx" in xlsx.headers["content-disposition"]


def test_every_opening_is_recorded_with_the_network_not_the_address(
    live: LiveServer, delivered: Delivered
) -> None:
    before = _opens(live, delivered.run_id)
    assert _open(delivered.links[0]).status_code == 200
    assert _open(delivered.links[0]).status_code == 200
    assert _opens(live, delivered.run_id) == before + 2
    db = database(live)
    try:
        with db.session() as session:
            newest = opens_of_run(session, ALICE, delivered.run_id)[0]
    finally:
        db.dispose()
    assert newest.link_id == _link_id(live, delivered.links[0])
    assert newest.user_agent == AGENT
    assert newest.network == "127.0.0.0/24"  # the address itself is not kept
    assert newest.recipient == "cfo@example.com"
    listing = subprocess.run(
        [str(BIN / "nbcast"), "links", "list", "--json"],
        env={**live.env, "NBCAST_TENANT": "acme"},
        capture_output=True,
        text=True,
        check=True,
    )
    opens = {row["id"]: row["opens"] for row in json.loads(listing.stdout)}
    assert opens[newest.link_id] >= 2


def _instant(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def test_the_run_page_and_the_api_show_each_opening(live: LiveServer, delivered: Delivered) -> None:
    url = delivered.links[0]
    for agent in (AGENT, AGENT, HOSTILE_AGENT):  # this test's own openings, whatever ran before
        answer = httpx.get(url, headers={"User-Agent": agent}, timeout=30)
        assert answer.status_code == 200
    with live.client("alice") as alice:
        detail = alice.get(f"/nbcast/api/v1/runs/{delivered.run_id}")
        page = alice.get(f"/nbcast/runs/{delivered.run_id}")
    assert detail.status_code == 200
    body = detail.json()
    opens = body["link_opens"]
    assert len(opens) == _opens(live, delivered.run_id) >= 3  # every one, newest first
    assert body["link_opens_more"] is False
    instants = [_instant(o["opened_at"]) for o in opens]
    assert instants == sorted(instants, reverse=True)
    newest = opens[0]
    assert newest["link"] == _link_id(live, url)
    assert newest["run"] == delivered.run_id
    assert newest["recipient"] == RECIPIENT
    assert newest["network"] == "127.0.0.0/24"
    assert newest["user_agent"] == HOSTILE_AGENT[:256]
    assert {o["user_agent"] for o in opens[1:]} >= {AGENT}

    assert page.status_code == 200
    assert "<script>alert(" not in page.text
    section = page.text.split("<h3>Openings</h3>", 1)[1].split("</table>", 1)[0]
    rows = re.findall(r"<tr><td>(.*?)</tr>", section, re.S)
    assert len(rows) == len(opens)
    first = rows[0]
    shown = re.search(r'datetime="([^"]+)"', first)
    assert shown is not None
    assert _instant(shown.group(1)) == instants[0]  # the time, to the microsecond
    assert "<code>127.0.0.0/24</code>" in first
    cell = re.search(r'<td class="clip user-agent" title="([^"]*)">(.*?)</td>', first, re.S)
    assert cell is not None
    assert html.unescape(cell.group(1)) == HOSTILE_AGENT[:256]  # the whole, as a tooltip
    visible = html.unescape(cell.group(2))
    assert visible == HOSTILE_AGENT[:119] + "…"  # clipped, and escaped as text
    assert "&lt;script&gt;alert(&#39;ua&#39;)&lt;/script&gt;" in cell.group(2)
    assert all(AGENT in row for row in rows[1:] if "nbcast-tests" in row)
    assert f"{RECIPIENT}</td>" in first


def test_another_tenant_sees_no_openings(live: LiveServer, delivered: Delivered) -> None:
    db = database(live)
    try:
        grant(db, "globex", "jupyter:bob")
        with db.session() as session, pytest.raises(UnknownRunError):
            opens_of_run(session, Caller(tenant="globex", user="jupyter:bob"), delivered.run_id)
    finally:
        db.dispose()


def test_tampered_forged_and_foreign_tokens_are_403_and_record_nothing(
    live: LiveServer, delivered: Delivered
) -> None:
    url = delivered.links[0]
    base, token = url.rsplit("/", 1)
    # A character inside the signature (the last one may carry unused bits).
    flipped = token[:-10] + ("A" if token[-10] != "A" else "Q") + token[-9:]
    other_purpose = _signer(live).sign({"l": _link_id(live, url), "a": "0"}, purpose="unsubscribe")
    forged = Signer([("k1", "a-secret-nobody-configured")]).sign({"l": 1, "a": "0"}, purpose="link")
    before = _opens(live, delivered.run_id)
    for bad in (
        flipped,
        "zz." + token.split(".", 1)[1],
        other_purpose,
        forged,
        "garbage",
        "x" * 5000,
    ):
        answer = _open(f"{base}/{bad}")
        assert answer.status_code == 403, (bad[:40], answer.status_code)
        assert answer.headers["content-type"].startswith("text/html")
        assert "Traceback" not in answer.text
        assert "sandbox" in answer.headers["content-security-policy"]
    assert _opens(live, delivered.run_id) == before


def test_a_well_signed_token_for_no_link_is_404(live: LiveServer) -> None:
    token = _signer(live).sign({"l": 987_654_321, "a": "0" * 16}, purpose="link")
    assert _open(f"{live.url}/nbcast/links/{token}").status_code == 404


def test_a_revoked_link_is_410(live: LiveServer, delivered: Delivered) -> None:
    url = next(
        u for u in delivered.links if _open(u).headers["content-type"].startswith("text/csv")
    )
    db = database(live)
    try:
        assert revoke_link(db, SystemClock(), ALICE, _link_id(live, url)) is True
    finally:
        db.dispose()
    before = _opens(live, delivered.run_id)
    answer = _open(url)
    assert answer.status_code == 410
    assert "expired or was withdrawn" in answer.text
    assert _opens(live, delivered.run_id) == before


def test_tokens_stay_out_of_the_access_log(live: LiveServer, delivered: Delivered) -> None:
    long_junk = "k1." + "A" * 3000
    assert _open(f"{live.url}/nbcast/links/{long_junk}").status_code == 403
    for url in delivered.links:
        _open(url)
    log = live.log()
    assert "AAAAAAAAAAAAAAAAAAAAAAAA" not in log
    for url in delivered.links:
        token = url.rsplit("/", 1)[1]
        assert token not in log
    assert "/nbcast/links/k1.AAAAAAAAA… " in log  # the refusal is logged, redacted


def test_an_expired_link_is_410(live: LiveServer, delivered: Delivered) -> None:
    """A link handed out two days ago for one day, by the delivery plane itself."""
    db = database(live)
    try:
        with db.session() as session:
            original = session.get(SignedLink, _link_id(live, delivered.links[0]))
            assert original is not None
            issued = create_link(
                session,
                _signer(live),
                tenant_id=original.tenant_id,
                run_id=original.run_id,
                recipient=original.recipient,
                sha256=original.sha256,
                filename=original.filename,
                media_type=original.media_type,
                now=SystemClock().now() - timedelta(days=2),
                ttl=timedelta(days=1),
                base_url=live.url,
            )
    finally:
        db.dispose()
    assert _open(issued.url).status_code == 410


def test_a_large_file_is_streamed_whole(live: LiveServer, delivered: Delivered) -> None:
    """A file of many chunks arrives byte for byte (it is sent chunk by chunk)."""
    data = os.urandom(3 * CHUNK_BYTES + 12_345)
    store = open_store(load_settings(live.env).artifacts_location)
    sha = store.put(data).sha256
    db = database(live)
    try:
        with db.session() as session:
            original = session.get(SignedLink, _link_id(live, delivered.links[0]))
            assert original is not None
            issued = create_link(
                session,
                _signer(live),
                tenant_id=original.tenant_id,
                run_id=original.run_id,
                recipient=original.recipient,
                sha256=sha,
                filename="big report.pdf",
                media_type="application/pdf",
                now=SystemClock().now(),
                ttl=timedelta(hours=1),
                base_url=live.url,
            )
    finally:
        db.dispose()
    answer = _open(issued.url)
    assert answer.status_code == 200
    assert answer.content == data
    assert answer.headers["content-disposition"] == (
        "inline; filename=\"big report.pdf\"; filename*=UTF-8''big%20report.pdf"
    )


def test_one_address_is_rate_limited_with_retry_after(tmp_path: Path) -> None:
    with LiveServer(tmp_path, extra=("--NbcastApp.link_rate_per_minute=3", *STRICT)) as server:
        link = f"{server.url}/nbcast/links/k1.nothing"
        started = time.monotonic()
        statuses = [_open(link).status_code for _ in range(3)]
        assert statuses == [403, 403, 403]
        limited = _open(link)
        elapsed = time.monotonic() - started
        assert limited.status_code == 429
        # 3 a minute: a token comes back every 20 s, less what has passed since the first.
        assert 20 - math.ceil(elapsed) <= int(limited.headers["retry-after"]) <= 20
        unsubscribe = httpx.post(
            f"{server.url}/nbcast/unsubscribe/k1.nothing",
            data={"List-Unsubscribe": "One-Click"},
            timeout=30,
        )
        assert unsubscribe.status_code == 429  # one bucket for both public endpoints


def test_the_limiter_refills_and_tracks_a_bounded_number_of_addresses() -> None:
    now = [0.0]
    limiter = RateLimiter(60, max_addresses=100, monotonic=lambda: now[0])
    assert [limiter.take("a") for _ in range(60)] == [None] * 60
    assert limiter.take("a") == 1.0  # empty: one token back in a second
    now[0] += 1.0
    assert limiter.take("a") is None
    assert limiter.take("a") == 1.0
    for i in range(1000):
        limiter.take(f"10.0.{i // 250}.{i % 250}")
    assert len(limiter) == 100
    now[0] += 3600
    assert limiter.take("a") is None  # forgotten or refilled: a full bucket again


@pytest.mark.parametrize("where", ["local", "memory://nbcast-links-test"])
def test_every_store_opens_an_artifact_to_read_in_chunks(tmp_path: Path, where: str) -> None:
    store = open_store(tmp_path / "store" if where == "local" else where)
    data = os.urandom(100_000)
    key = store.put(data).sha256
    with store.open(key) as handle:
        assert handle.read(60_000) + handle.read() == data
    with pytest.raises(KeyError):
        store.open("0" * 64)


def test_the_network_kept_for_an_address() -> None:
    assert network_of("203.0.113.77") == "203.0.113.0/24"
    assert network_of("2001:db8:1:2::5") == "2001:db8:1::/48"
    assert network_of("::ffff:198.51.100.9") == "198.51.100.0/24"
    assert network_of("/run/jupyter.sock") == "unknown"
