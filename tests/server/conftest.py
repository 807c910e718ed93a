"""Fixtures for the server extension's tests: a live server per test module."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.server.live import LiveServer


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """A live ``nbcast serve`` (embedded SQLite, no embedded services) with users alice
    (tenant acme), bob (tenant globex) and root (acme, an administrator)."""
    folder: Path = tmp_path_factory.mktemp("server")
    with LiveServer(
        folder, users={"alice": "acme", "bob": "globex", "root": "acme"}, admins=("root",)
    ) as live:
        yield live
