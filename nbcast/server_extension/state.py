"""What every handler shares: the database, the clock, the artifact store, the link
signer and the extension's options — built once when the extension loads.

The server reads the same environment variables as the ``nbcast`` command
(:mod:`nbcast.config`, :mod:`nbcast.delivery.settings`), with the extension's
traitlets laid over them (:meth:`nbcast.server_extension.app.NbcastApp.environment`),
so the embedded services it starts and the handlers it serves see one configuration.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any, TypeVar

from nbcast.config import Settings, load_settings, prepare_home
from nbcast.server_extension.forwarded import TrustedProxies

if TYPE_CHECKING:
    from nbcast.artifacts import ArtifactStore
    from nbcast.clock import Clock
    from nbcast.db import Database
    from nbcast.delivery.settings import DeliverySettings
    from nbcast.delivery.signing import Signer

__all__ = ["ServerOptions", "ServerState"]

T = TypeVar("T")


@dataclass(frozen=True, kw_only=True)
class ServerOptions:
    """The extension's own options (its traitlets that are not environment)."""

    tenant_map: Mapping[str, str] = field(default_factory=dict)
    """User name → tenant."""
    default_tenant: str | None = "default"
    """The tenant of a user the map does not name (None: such users are refused)."""
    admin_users: frozenset[str] = frozenset()
    """jupyter-server users made operators (as ``jupyter:NAME``) when the server opens
    its database."""
    metrics_open: bool = False
    """Whether ``/nbcast/metrics`` may be scraped without the token."""
    ray_dashboard_url: str | None = None
    """Linked from the overview page when set."""
    link_rate_per_minute: int = 120
    """Signed-link and unsubscribe requests one address may make a minute."""
    heavy_checks_per_minute: int = 20
    """Large notebook checks one user may start a minute
    (:mod:`nbcast.server_extension.check_limits`)."""
    proxies: TrustedProxies = field(default_factory=TrustedProxies)
    """Whose forwarded addresses the public endpoints believe
    (:mod:`nbcast.server_extension.forwarded`)."""
    threads: int = 8
    """Threads that run the command layer's calls (database work) for handlers."""


@dataclass
class ServerState:
    """The shared state (module docstring); opened lazily, once."""

    environ: dict[str, str]
    options: ServerOptions
    settings: Settings

    @classmethod
    def create(cls, environ: Mapping[str, str], options: ServerOptions) -> ServerState:
        """The state for ``environ``; :class:`~nbcast.errors.ConfigError` for a bad
        setting, found now rather than at the first request."""
        from nbcast.access import Source, identity

        env = dict(environ)
        state = cls(environ=env, options=options, settings=load_settings(env))
        state.delivery  # noqa: B018 - parse the delivery settings now, to fail early
        identity(Source.os, state.settings.user)  # the owner: an OS identity
        for name in options.admin_users:  # jupyter-server users: names nbcast accepts
            identity(Source.jupyter, name)
        return state

    @cached_property
    def db(self) -> Database:
        """The database, opened (and migrated) on first use, the home made private, and
        the operators seeded before any request acts
        (:func:`~nbcast.tenancy.roles.seed_operators`: the server's owner on a fresh
        home, ``admin_users``)."""
        from nbcast.db import Database
        from nbcast.tenancy.roles import seed_operators

        prepare_home(self.settings.home)
        db = Database.open(self.settings.database_url, owner_url=self.settings.database_owner_url)
        with db.session() as session:
            seed_operators(
                session,
                self.settings.user,
                self.options.admin_users,
                self.settings.tenant,
                self.clock.now(),
            )
        return db

    @cached_property
    def clock(self) -> Clock:
        """The clock (``NBCAST_CLOCK``; the real one by default)."""
        from nbcast.clock import clock_from_env

        return clock_from_env(self.environ)

    @cached_property
    def store(self) -> ArtifactStore:
        """The artifact store."""
        from nbcast.artifacts import open_store

        return open_store(self.settings.artifacts_location)

    @cached_property
    def delivery(self) -> DeliverySettings:
        """The delivery plane's settings (public base URL, link lifetime, …)."""
        from nbcast.delivery.settings import load_delivery_settings

        return load_delivery_settings(self.environ)

    @cached_property
    def signer(self) -> Signer:
        """The signer of links and unsubscribe tokens."""
        from nbcast.delivery.signing import load_signer

        prepare_home(self.settings.home)
        return load_signer(self.settings.home, self.environ)

    @cached_property
    def executor(self) -> ThreadPoolExecutor:
        """The threads handlers run database work in (:meth:`run`)."""
        return ThreadPoolExecutor(self.options.threads, thread_name_prefix="nbcast-api")

    async def run(self, function: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``function(*args, **kwargs)`` in :attr:`executor`, awaited."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(
            self.executor, functools.partial(function, *args, **kwargs)
        )

    def close(self) -> None:
        """Stop the threads and close the database's connections."""
        if "executor" in self.__dict__:
            self.executor.shutdown(wait=False, cancel_futures=True)
        if "db" in self.__dict__:
            self.db.dispose()
