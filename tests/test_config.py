"""Settings from the environment."""

from __future__ import annotations

from pathlib import Path

import pytest

from nbcast.config import load_settings
from nbcast.errors import ConfigError


def test_defaults_put_everything_in_the_home_folder(tmp_path: Path) -> None:
    settings = load_settings({"NBCAST_HOME": str(tmp_path)})
    assert settings.home == tmp_path
    assert settings.database_url == f"sqlite:///{tmp_path}/nbcast.db"
    assert settings.is_embedded
    assert settings.tenant == "default"
    assert settings.artifacts_dir == tmp_path / "artifacts"


def test_home_defaults_to_dot_nbcast() -> None:
    assert load_settings({}).home == Path.home() / ".nbcast"


def test_postgres_url_and_tenant_are_read() -> None:
    settings = load_settings(
        {
            "NBCAST_DATABASE_URL": "postgresql+psycopg://u@h/db",
            "NBCAST_TENANT": "acme",
            "NBCAST_USER": "ana",
        }
    )
    assert not settings.is_embedded
    assert (settings.tenant, settings.user) == ("acme", "ana")


def test_unsupported_database_is_refused() -> None:
    with pytest.raises(ConfigError, match="'mysql' is not supported"):
        load_settings({"NBCAST_DATABASE_URL": "mysql://x/y"})
