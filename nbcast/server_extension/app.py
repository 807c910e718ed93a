"""The jupyter-server extension application: configuration, state, handlers.

Configuration is traitlets, as for any jupyter-server extension
(``jupyter_server_config.py``, ``--NbcastApp.option=value`` on the command line):

===========================  ============================  ==========================
trait                        environment it sets           meaning
===========================  ============================  ==========================
``home``                     ``NBCAST_HOME``               nbcast's folder
``database_url``             ``NBCAST_DATABASE_URL``       SQLite (default) or PostgreSQL
``artifacts``                ``NBCAST_ARTIFACTS``          artifact store folder or URL
``ray_address``              ``NBCAST_RAY_ADDRESS``        the embedded worker's Ray
``ray_dashboard_url``        —                             linked from the status page
``smtp_url``, ``smtp_from``  ``NBCAST_SMTP_URL``, ``…FROM``  the email channel
``slack_token``              ``NBCAST_SLACK_TOKEN``        the Slack channel
``signing_keys``             ``NBCAST_SIGNING_KEYS``       link and unsubscribe keys
``public_base_url``          ``NBCAST_BASE_URL``           the base of links sent out
``embedded_services``        —                             run the services as children
``tenant_map``               —                             user name → tenant
``default_tenant``           —                             tenant of unmapped users
``admin_users``              —                             who may use operator routes
``metrics_open``             —                             metrics without the token
``trusted_proxies``          —                             proxies whose forwarded
                                                           addresses count
===========================  ============================  ==========================

A trait left unset keeps the environment's value, so ``nbcast serve`` and ``jupyter
lab`` started in a shell configured for the ``nbcast`` command see the same home and
database. The embedded services and the handlers share this one environment
(:meth:`NbcastApp.environment`).
"""

from __future__ import annotations

import os
from pathlib import Path

from jupyter_server.extension.application import ExtensionApp
from traitlets import Bool, Dict, Int, List, Unicode

from nbcast.credentials import protect_process
from nbcast.server_extension.authentication import AuthenticatingServerApp
from nbcast.server_extension.forwarded import TrustedProxies
from nbcast.server_extension.handlers.base import STATE_KEY
from nbcast.server_extension.routes import registered, tornado_handlers
from nbcast.server_extension.services import SERVICES_KEY, ServiceSupervisor
from nbcast.server_extension.state import ServerOptions, ServerState

__all__ = ["NbcastApp", "ServeApp"]

HERE = Path(__file__).resolve().parent

# trait name → the environment variable it sets for the handlers and the services
_ENVIRONMENT = {
    "home": "NBCAST_HOME",
    "database_url": "NBCAST_DATABASE_URL",
    "artifacts": "NBCAST_ARTIFACTS",
    "ray_address": "NBCAST_RAY_ADDRESS",
    "smtp_url": "NBCAST_SMTP_URL",
    "smtp_from": "NBCAST_SMTP_FROM",
    "slack_token": "NBCAST_SLACK_TOKEN",
    "signing_keys": "NBCAST_SIGNING_KEYS",
    "public_base_url": "NBCAST_BASE_URL",
}


def _setting(help_text: str) -> Unicode:  # type: ignore[type-arg]
    return Unicode(None, allow_none=True, help=help_text).tag(config=True)


class NbcastApp(ExtensionApp):
    """nbcast's server extension (module docstring)."""

    name = "nbcast"
    description = "Scheduled, versioned reports from Jupyter notebooks."
    extension_url = "/nbcast/"
    load_other_extensions = True
    template_paths = List([str(HERE / "templates")]).tag(config=False)
    static_paths = List([str(HERE / "static")]).tag(config=False)

    home = _setting("nbcast's folder (NBCAST_HOME; default ~/.nbcast).")
    database_url = _setting("The database URL (NBCAST_DATABASE_URL).")
    artifacts = _setting("The artifact store: a folder or an fsspec URL (NBCAST_ARTIFACTS).")
    ray_address = _setting("The Ray cluster the embedded worker joins (NBCAST_RAY_ADDRESS).")
    ray_dashboard_url = _setting("The Ray dashboard's URL, linked from the status page.")
    smtp_url = _setting("smtp:// or smtps:// URL of the mail relay (NBCAST_SMTP_URL).")
    smtp_from = _setting("The From address of report emails (NBCAST_SMTP_FROM).")
    slack_token = _setting("The Slack bot token (NBCAST_SLACK_TOKEN).")
    signing_keys = _setting("Link signing keys 'id:secret,…', current first.")
    public_base_url = _setting(
        "The public base URL of this server, for the links sent out (NBCAST_BASE_URL)."
    )
    embedded_services = Bool(
        None,
        allow_none=True,
        help="Run the scheduler, a worker and a delivery worker as supervised child "
        "processes. Default: on with the embedded SQLite database, off otherwise.",
    ).tag(config=True)
    tenant_map = Dict(
        key_trait=Unicode(),
        value_trait=Unicode(),
        default_value={},
        help="User name → tenant.",
    ).tag(config=True)
    default_tenant = Unicode(
        "default",
        allow_none=True,
        help="The tenant of users tenant_map does not name (None: refuse them).",
    ).tag(config=True)
    admin_users = List(
        Unicode(),
        default_value=[],
        help="Users made operators (tenants, every quota) when the server opens its database.",
    ).tag(config=True)
    metrics_open = Bool(False, help="Serve /nbcast/metrics without authentication.").tag(
        config=True
    )
    link_rate_per_minute = Int(
        120, help="Signed-link and unsubscribe requests one address may make a minute."
    ).tag(config=True)
    heavy_checks_per_minute = Int(
        20, help="Large notebook checks (over 1 MiB) one user may start a minute (1 to 1,000)."
    ).tag(config=True)
    trusted_proxies = List(
        Unicode(),
        default_value=[],
        help="The reverse proxies (IP addresses or CIDR networks, at most 100) whose "
        "X-Forwarded-For / X-Real-Ip the public endpoints believe, with "
        "ServerApp.trust_xheaders; from anyone else those headers are ignored. Empty by "
        "default: name your proxy (e.g. 127.0.0.1 for one on this machine).",
    ).tag(config=True)

    state: ServerState | None = None
    services: ServiceSupervisor | None = None

    @classmethod
    def get_extension_package(cls) -> str:
        """The package that declares the extension point (not ``nbcast`` itself)."""
        return "nbcast.server_extension"

    def environment(self) -> dict[str, str]:
        """This process's environment with the set traits laid over it."""
        env = dict(os.environ)
        for trait, variable in _ENVIRONMENT.items():
            value = getattr(self, trait)
            if value is not None:
                env[variable] = str(value)
        return env

    def options(self) -> ServerOptions:
        """The extension's own options (a bad ``trusted_proxies`` entry:
        :class:`~nbcast.errors.ConfigError`)."""
        trust_xheaders = bool(getattr(self.serverapp, "trust_xheaders", False))
        proxies = TrustedProxies.parse(self.trusted_proxies, trust_xheaders=trust_xheaders)
        if trust_xheaders and not proxies.networks:
            self.log.warning(
                "nbcast: ServerApp.trust_xheaders is on but NbcastApp.trusted_proxies is "
                "empty: forwarded addresses are ignored on the public endpoints (name "
                "your proxy, e.g. --NbcastApp.trusted_proxies=127.0.0.1)"
            )
        return ServerOptions(
            proxies=proxies,
            tenant_map=dict(self.tenant_map),
            default_tenant=self.default_tenant,
            admin_users=frozenset(self.admin_users),
            metrics_open=bool(self.metrics_open),
            ray_dashboard_url=self.ray_dashboard_url,
            link_rate_per_minute=max(1, min(int(self.link_rate_per_minute), 100_000)),
            heavy_checks_per_minute=max(1, min(int(self.heavy_checks_per_minute), 1_000)),
        )

    def wants_services(self, state: ServerState) -> bool:
        """Whether to run the embedded services (``embedded_services``, else: with
        the embedded database)."""
        if self.embedded_services is not None:
            return bool(self.embedded_services)
        return state.settings.is_embedded

    def initialize_settings(self) -> None:
        """Build the shared state (a bad setting stops the extension with one line).

        The server makes itself undumpable first (:func:`nbcast.credentials.protect_process`):
        its environment holds its token and nbcast's secrets, its memory the cookie secret.
        """
        protect_process()
        self.state = ServerState.create(self.environment(), self.options())
        self.settings[STATE_KEY] = self.state
        self.log.info(
            "nbcast: home %s, database %s",
            self.state.settings.home,
            "embedded SQLite" if self.state.settings.is_embedded else "external",
        )
        if self.wants_services(self.state):
            self.services = ServiceSupervisor(self.state.environ, self.log)
            self.settings[SERVICES_KEY] = self.services

    def initialize_handlers(self) -> None:
        """Every registered route."""
        self.handlers.extend(tornado_handlers(registered()))

    async def _start_jupyter_server_extension(self, serverapp: object) -> None:
        """Start the embedded services once the event loop runs (on its thread, which
        lives as long as the server: :mod:`nbcast.server_extension.services`)."""
        if self.services is not None and self.state is not None:
            state = self.state
            try:  # migrate once here, rather than in three children at once
                await state.run(lambda: state.db)
            except Exception as exc:  # the children will say it again, and back off
                self.log.error("nbcast: cannot open the database: %s", exc)
            self.services.start()

    async def stop_extension(self) -> None:
        """Stop the embedded services, then release the state, when the server stops."""
        if self.services is not None:
            await self.services.stop()
        if self.state is not None:
            self.state.close()


class ServeApp(NbcastApp):
    """``nbcast serve``: a jupyter-server with this extension alone (no JupyterLab,
    no other extension found on the machine), landing on the status page, that
    refuses to start without authentication unless told ``--no-auth``
    (:class:`~nbcast.server_extension.authentication.AuthenticatingServerApp`)."""

    serverapp_class = AuthenticatingServerApp
    serverapp_config = {  # noqa: RUF012 - jupyter-server's class attribute
        "jpserver_extensions": {"nbcast.server_extension": True},
    }
    load_other_extensions = False
