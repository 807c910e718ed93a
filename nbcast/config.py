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
                            (or ``NBCAST_DATABASE_URL_FILE``: a ``0600`` file
                            holding it, :mod:`nbcast.credentials`)
``NBCAST_TENANT``           the tenant commands act for (default ``default``)
``NBCAST_USER``             the author recorded on publish (default: login name)
``NBCAST_ARTIFACTS``        the artifact store: a folder or an fsspec URL
                            (default ``$NBCAST_HOME/artifacts``)
==========================  =====================================================

The home folder holds live signing keys, executed reports and the embedded
database, so it is private: :func:`prepare_home` creates it ``0700`` and tightens an
existing one that others can read (with a warning), and the ``nbcast`` command runs
with umask ``077``, so every file it (or a kernel it starts) creates there is ``0600``.
"""

from __future__ import annotations

import getpass
import logging
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

from nbcast.credentials import credential
from nbcast.errors import ConfigError, StorageError
from nbcast.limits import clip, storable_text

__all__ = ["DEFAULT_TENANT", "Settings", "load_settings", "mask_url", "prepare_home"]

DEFAULT_TENANT = "default"
TENANT_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}", re.ASCII)
_USER_NAME = re.compile(r"[^\x00-\x1f\x7f]{1,128}")
log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class Settings:
    """Where nbcast keeps its state and who is acting."""

    home: Path
    database_url: str
    tenant: str = DEFAULT_TENANT
    user: str = "nbcast"
    artifacts: str | None = None
    database_owner_url: str | None = None
    """``NBCAST_DATABASE_OWNER_URL``: the role that migrates (:mod:`nbcast.db_roles`);
    None: the database URL's role migrates."""
    """``NBCAST_ARTIFACTS``: the artifact store's folder or URL (None: the default)."""

    @property
    def is_embedded(self) -> bool:
        """True when the database is the embedded SQLite file."""
        return self.database_url.startswith("sqlite")

    @property
    def database_file(self) -> str | None:
        """The embedded database's file (None for a server database)."""
        if not self.database_url.startswith("sqlite:///"):
            return None
        return self.database_url[len("sqlite:///") :].split("?", 1)[0] or None

    @property
    def artifacts_dir(self) -> Path:
        """The default local artifact store's root (``$NBCAST_HOME/artifacts``)."""
        return self.home / "artifacts"

    @property
    def artifacts_location(self) -> str:
        """Where the artifact store is (:func:`nbcast.artifacts.open_store` opens it)."""
        return self.artifacts or str(self.artifacts_dir)


def _login_name() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no passwd entry in some containers
        return "nbcast"


def mask_url(url: str) -> str:
    """``url`` with any password hidden, for messages: the ``user:password@`` part and
    query parameters that carry a secret (``password=``, ``token=``, ``secret=``, …)
    become ``***`` — without parsing it, so it works on URLs that do not parse."""
    masked = re.sub(r"(//[^/@:]*):[^/@]*@", r"\1:***@", url)
    masked = re.sub(
        r"([?&;](?:[a-z_]*pass(?:word)?|[a-z_]*secret|[a-z_]*token|sslpassword|api_?key)=)[^&;#]*",
        r"\1***",
        masked,
        flags=re.IGNORECASE,
    )
    return clip(masked, 200)[1:-1]


def check_database_url(url: str) -> str:
    """``url`` if nbcast can use it as its database URL, else :class:`ConfigError`."""
    import sqlalchemy as sa

    if not url.startswith(("sqlite", "postgresql")):
        raise ConfigError(
            f"NBCAST_DATABASE_URL: {clip(url.split(':', 1)[0])} is not supported "
            "(sqlite:///… or postgresql+psycopg://…)"
        )
    try:
        parsed = sa.engine.make_url(url)
        port = parsed.port
    except Exception:  # make_url raises ValueError, ArgumentError, …
        raise ConfigError(f"NBCAST_DATABASE_URL: {mask_url(url)} is not a valid URL") from None
    if port is not None and not 1 <= port <= 65535:
        raise ConfigError(f"NBCAST_DATABASE_URL: port {port} is not between 1 and 65535")
    if "\x00" in url:
        raise ConfigError("NBCAST_DATABASE_URL: contains a NUL character")
    return url


def check_tenant_name(name: str) -> str:
    """``name`` if it is a valid tenant name, else :class:`ConfigError`."""
    if not TENANT_NAME.fullmatch(name):
        raise ConfigError(f"tenant name {clip(name)} must match {TENANT_NAME.pattern}")
    return name


def load_settings(environ: dict[str, str] | None = None) -> Settings:
    """Read :class:`Settings` from the environment (see the module docstring)."""
    env = os.environ if environ is None else environ
    home = Path(env.get("NBCAST_HOME") or Path.home() / ".nbcast").expanduser()
    if "\x00" in str(home):
        raise ConfigError("NBCAST_HOME: contains a NUL character")
    url = (credential("NBCAST_DATABASE_URL", env) or "").strip()
    if not url:
        url = f"sqlite:///{(home / 'nbcast.db').as_posix()}"
    check_database_url(url)
    tenant = check_tenant_name(env.get("NBCAST_TENANT") or DEFAULT_TENANT)
    user = env.get("NBCAST_USER") or _login_name()
    if not _USER_NAME.fullmatch(user) or not storable_text(user):
        raise ConfigError(f"NBCAST_USER: {clip(user)} must be 1-128 printable characters")
    artifacts = env.get("NBCAST_ARTIFACTS", "").strip() or None
    if artifacts is not None and "\x00" in artifacts:
        raise ConfigError("NBCAST_ARTIFACTS: contains a NUL character")
    owner = (credential("NBCAST_DATABASE_OWNER_URL", env) or "").strip() or None
    if owner is not None:
        check_database_url(owner)
    return Settings(
        home=home,
        database_url=url,
        tenant=tenant,
        user=user,
        artifacts=artifacts,
        database_owner_url=owner,
    )


def prepare_home(home: Path) -> Path:
    """Create ``home`` private (``0700``), or make an existing one private.

    An existing home that group or others may read is tightened to ``0700``, and the
    embedded database files in it to ``0600``, with a warning: they hold live
    signing keys and link tokens. A folder that is not this user's, or that is
    shared on purpose (world-writable or sticky, like ``/tmp``), is refused rather
    than changed — tightening it would break it for everyone else. Raises
    :class:`StorageError` if ``home`` cannot be created or is refused.
    """
    try:
        home.mkdir(mode=0o700, parents=True, exist_ok=True)
        info = home.stat()
    except OSError as exc:
        raise StorageError(f"cannot create the nbcast home {home}: {exc.strerror}") from None
    mode = stat.S_IMODE(info.st_mode)
    if info.st_uid != os.getuid():
        raise StorageError(
            f"the nbcast home {home} belongs to another user; choose a folder of your own "
            "(NBCAST_HOME)"
        )
    if mode & (stat.S_ISVTX | stat.S_IWOTH):
        raise StorageError(
            f"the nbcast home {home} is a shared folder (mode {mode:o}); choose a folder "
            "of nbcast's own (NBCAST_HOME)"
        )
    if mode & 0o077:
        try:
            home.chmod(0o700)
        except OSError as exc:
            log.warning("nbcast home %s is mode %o and cannot be made private: %s", home, mode, exc)
            return home
        log.warning("nbcast home %s was mode %o; made it private (0700)", home, mode)
    for name in ("nbcast.db", "nbcast.db-wal", "nbcast.db-shm", "signing-keys.json"):
        path = home / name
        try:
            if path.exists() and stat.S_IMODE(path.stat().st_mode) & 0o077:
                path.chmod(0o600)
        except OSError:
            continue
    return home
