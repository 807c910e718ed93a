"""Integer query parameters are ASCII digits only
(:func:`nbcast.server_extension.handlers.base.whole_number`, the API's one parser):
Python's ``int()`` also reads other scripts' digits (``int("١٢") == 12``), a sign,
blanks and ``_`` separators, none of which a client means as a number here."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from nbcast.config import load_settings
from tests.members import grant_url
from tests.server.live import LiveServer
from tests.server.test_api_definitions import nbcast

NOT_NUMBERS = ["١٢", "१२", "１２", "²", "+5", "-5", " 5", "5 ", "1_0", "0x10", "", "1" * 20]

ROUTES = [
    ("/nbcast/api/v1/definitions", "limit"),
    ("/nbcast/api/v1/definitions/nightly", "version"),
    ("/nbcast/api/v1/runs", "limit"),
    ("/nbcast/api/v1/deliveries", "run"),
    ("/nbcast/api/v1/schedule/preview?cron=0+7+*+*+*&from=2026-01-01&until=2026-01-02", "limit"),
]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """alice, an author of the existing tenant acme."""
    folder: Path = tmp_path_factory.mktemp("query-integers")
    with LiveServer(folder, users={"alice": "acme"}) as live:
        nbcast(live, "tenants", "create", "acme")
        grant_url(load_settings(dict(live.env)).database_url, "acme", "jupyter:alice")
        yield live


@pytest.mark.parametrize("text", NOT_NUMBERS)
def test_only_ascii_digits_are_a_whole_number(text: str) -> None:
    from nbcast.server_extension.handlers.base import whole_number

    assert whole_number(text) is None


def test_ascii_digits_are() -> None:
    from nbcast.server_extension.handlers.base import whole_number

    assert [whole_number(t) for t in ("0", "7", "12", "0012", "9" * 19)] == [
        0,
        7,
        12,
        12,
        10**19 - 1,
    ]


@pytest.mark.parametrize(
    ("route", "name"), ROUTES, ids=[f"{r.split('?')[0]}?{n}" for r, n in ROUTES]
)
def test_every_integer_query_parameter_refuses_other_digits(
    server: LiveServer, route: str, name: str
) -> None:
    joiner = "&" if "?" in route else "?"
    with server.client("alice") as alice:
        for text in ("١٢", "+5", "1_0"):
            answer = alice.get(f"{route}{joiner}{name}={text}")
            assert answer.status_code == 400, (route, text, answer.text)
            error = answer.json()["error"]
            assert error["field"] == name
            assert "ASCII digits" in error["message"]
        assert alice.get(f"{route}{joiner}{name}=12").status_code != 400
