"""One-click unsubscribe (RFC 8058) on a live server, end to end: a real email's
``List-Unsubscribe`` URL, a GET that changes nothing, tampered tokens refused, the
one-click POST honoured with no login and no XSRF cookie, and the next delivery to
that recipient SUPPRESSED ``unsubscribed`` by the real delivery worker."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa

from nbcast.delivery.models import Unsubscription
from tests.server.deliveries import RECIPIENT, Delivered, database, deliver, run_again
from tests.server.live import LiveServer

ONE_CLICK = {"List-Unsubscribe": "One-Click"}


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    folder: Path = tmp_path_factory.mktemp("unsubscribe")
    with LiveServer(folder, users={"alice": "acme"}) as server:
        yield server


@pytest.fixture(scope="module")
def delivered(live: LiveServer) -> Delivered:
    return deliver(live, live.folder, formats=["csv"])


def _opt_outs(live: LiveServer) -> list[tuple[str, str, str, str]]:
    db = database(live)
    try:
        with db.session() as session:
            rows = session.execute(
                sa.select(
                    Unsubscription.scope,
                    Unsubscription.channel,
                    Unsubscription.recipient,
                    Unsubscription.source,
                )
            )
            return [tuple(row) for row in rows]  # type: ignore[misc]
    finally:
        db.dispose()


def test_the_email_points_at_this_server(live: LiveServer, delivered: Delivered) -> None:
    assert delivered.unsubscribe_url.startswith(f"{live.url}/nbcast/unsubscribe/")
    assert delivered.one_click == "List-Unsubscribe=One-Click"


def test_a_get_shows_a_confirmation_and_changes_nothing(
    live: LiveServer, delivered: Delivered
) -> None:
    for _ in range(2):  # a mail scanner, then the person
        page = httpx.get(delivered.unsubscribe_url, timeout=30)
        assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    assert RECIPIENT in page.text
    assert "sales" in page.text
    assert re.search(r'<form method="post">', page.text)
    assert 'name="List-Unsubscribe" value="One-Click"' in page.text
    assert "script-src" not in page.headers["content-security-policy"]
    assert "default-src 'none'" in page.headers["content-security-policy"]
    assert _opt_outs(live) == []


def test_tampered_tokens_and_wrong_bodies_record_nothing(
    live: LiveServer, delivered: Delivered
) -> None:
    base, token = delivered.unsubscribe_url.rsplit("/", 1)
    flipped = "A" if token[-10] != "A" else "Q"  # inside the signature
    tampered = f"{base}/{token[:-10]}{flipped}{token[-9:]}"
    for method in ("GET", "POST"):
        answer = httpx.request(method, tampered, data=ONE_CLICK, timeout=30)
        assert answer.status_code == 403, method
        assert "Traceback" not in answer.text
    link_token = base.replace("/unsubscribe", "/links") + "/" + token  # not a link token
    assert httpx.get(link_token, timeout=30).status_code == 403
    wrong_body = httpx.post(delivered.unsubscribe_url, data={"List-Unsubscribe": "yes"}, timeout=30)
    assert wrong_body.status_code == 400
    assert httpx.post(delivered.unsubscribe_url, timeout=30).status_code == 400
    assert _opt_outs(live) == []


def test_one_click_unsubscribes_and_the_next_delivery_is_suppressed(
    live: LiveServer, delivered: Delivered
) -> None:
    # The way a mail provider posts it: no cookie, no login, no XSRF token.
    answer = httpx.post(delivered.unsubscribe_url, data=ONE_CLICK, timeout=30)
    assert answer.status_code == 200, answer.text
    assert "Unsubscribed" in answer.text
    again = httpx.post(
        delivered.unsubscribe_url,
        content=b'--b\r\nContent-Disposition: form-data; name="List-Unsubscribe"\r\n\r\n'
        b"One-Click\r\n--b--\r\n",
        headers={"Content-Type": "multipart/form-data; boundary=b"},
        timeout=30,
    )
    assert again.status_code == 200  # multipart too, and twice is harmless
    assert _opt_outs(live) == [("sales", "email", RECIPIENT, "one-click")]

    _, rows, mails = run_again(live, "sales")
    states = {r.channel: (r.state, r.reason) for r in rows}
    assert states["email"] == ("SUPPRESSED", "unsubscribed")
    assert states["link"] == ("SENT", None)  # an opt-out of email, not of links
    assert mails == []
