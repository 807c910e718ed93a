"""Settings the planes are built from, read from the environment.

The planes take plain constructor arguments; only the edges (CLI, server
extension) read the environment, through :func:`load_settings`.

==========================  =====================================================
variable                    meaning
==========================  =====================================================
``NBCAST_HOME``             nbcast's folder (default ``~/.nbcast``): the embedded
                            SQLite database, artifacts, logs, locks
``NBCAST_DATABASE_URL``     a SQLAlchemy URL; default ``sqlite:///$NBCAST_HOME/
                            nbcast.db``. Production: ``postgresql+psycopg://…``
``NBCAST_TENANT``           the tenant commands act for (default ``default``)
``NBCAST_USER``             the author recorded on publish (default: login name)
==========================  =====================================================
"""

from __future__ import annotations

import getpass
import os
from dataclasses import dataclass
from pathlib import Path

from nbcast.errors import ConfigError

__all__ = ["DEFAULT_TENANT", "Settings", "load_settings"]

DEFAULT_TENANT = "default"


@dataclass(frozen=True, kw_only=True)
class Settings:
    """Where nbcast keeps its state and who is acting."""

    home: Path
    database_url: str
    tenant: str = DEFAULT_TENANT
    user: str = "nbcast"

    @property
    def is_embedded(self) -> bool:
        """True when the database is the embedded SQLite file."""
        return self.database_url.startswith("sqlite")

    @property
    def artifacts_dir(self) -> Path:
        """The local artifact store's root."""
        return self.home / "artifacts"


def _login_name() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no passwd entry in some containers
        return "nbcast"


def load_settings(environ: dict[str, str] | None = None) -> Settings:
    """Read :class:`Settings` from the environment (see the module docstring)."""
    env = os.environ if environ is None else environ
    home = Path(env.get("NBCAST_HOME") or Path.home() / ".nbcast").expanduser()
    url = env.get("NBCAST_DATABASE_URL", "").strip()
    if not url:
        url = f"sqlite:///{(home / 'nbcast.db').as_posix()}"
    elif not url.startswith(("sqlite", "postgresql")):
        raise ConfigError(
            f"NBCAST_DATABASE_URL: {url.split(':', 1)[0]!r} is not supported "
            "(sqlite:///… or postgresql+psycopg://…)"
        )
    return Settings(
        home=home,
        database_url=url,
        tenant=env.get("NBCAST_TENANT") or DEFAULT_TENANT,
        user=env.get("NBCAST_USER") or _login_name(),
    )
