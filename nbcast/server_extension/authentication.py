"""``nbcast serve`` never starts a server that does not authenticate, unless told so.

jupyter-server starts happily with authentication switched off — an empty token
(``--IdentityProvider.token=''``, the deprecated ``--ServerApp.token=``, or
``need_token=False``) and no password — and only logs "All authentication is
disabled". For ``nbcast serve`` that is an open door: anyone who can connect acts as
the server's owner, an operator of every tenant.

:class:`AuthenticatingServerApp` is the jupyter-server application ``nbcast serve``
runs. Once its configuration is complete (files, environment, command line) and its
identity provider exists, it asks that provider the question jupyter-server itself
asks before that warning — :attr:`IdentityProvider.auth_enabled` — so every way of
switching authentication off is caught, whichever option or provider did it, and a
custom provider keeps its own answer. A server that would not authenticate raises
:class:`~nbcast.errors.ConfigError` before it listens on any port or loads nbcast, so
the command prints one ``error:`` line and exits with status 2. ``nbcast serve
--no-auth`` (``AuthenticatingServerApp.allow_unauthenticated``) is the explicit
choice of an open server: it starts, with a warning in its log.

``jupyter server`` and ``jupyter lab`` with nbcast's extension keep jupyter-server's
own application and behaviour: a personal server is its owner's business.
"""

from __future__ import annotations

from jupyter_server.serverapp import ServerApp
from traitlets import Bool

from nbcast.errors import ConfigError

__all__ = ["NO_AUTH_OPTION", "AuthenticatingServerApp"]

NO_AUTH_OPTION = "--AuthenticatingServerApp.allow_unauthenticated=True"
"""The jupyter-server option ``nbcast serve --no-auth`` passes."""


class AuthenticatingServerApp(ServerApp):
    """jupyter-server's application, refusing to start without authentication (module
    docstring)."""

    allow_unauthenticated = Bool(
        False,
        help="Start even though requests would not be authenticated (no token, no "
        "password): anyone who can connect acts as the server's owner. "
        "'nbcast serve --no-auth' sets it.",
    ).tag(config=True)

    def init_configurables(self) -> None:
        """jupyter-server's configurables (the identity provider among them), then the
        refusal of a server that would not authenticate."""
        super().init_configurables()
        if self.identity_provider.auth_enabled:
            return
        if not self.allow_unauthenticated:
            raise ConfigError(
                "this server would not authenticate requests (an empty token and no "
                "password): anyone who can connect would act as its owner; give it a "
                "token or a password, or start it with --no-auth to serve without "
                "authentication"
            )
        self.log.warning(
            "nbcast: started with --no-auth: requests are not authenticated, and anyone "
            "who can connect to %s acts as the server's owner",
            self.ip or "any address",
        )
