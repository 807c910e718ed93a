"""Who a request is: jupyter-server's identity, and nbcast's tenant for it.

Authentication is jupyter-server's own (its token, a password, or JupyterHub when the
server runs under it): nbcast never sees a credential. What nbcast adds:

- :class:`TokenIdentityProvider`, for ``nbcast serve`` without JupyterHub: a token per
  person (``c.TokenIdentityProvider.user_tokens = {"<token>": "alice"}``), so each
  request has a stable user name to map to a tenant. The server's own token still
  works and stays anonymous.
- :func:`caller_for`: the :class:`~nbcast.access.Caller` a user acts as. A named user
  is a **jupyter** identity, ``jupyter:<user name>`` (:mod:`nbcast.access`): the roles
  and operators of the OS user of the same name are not theirs, so a web user called
  ``root`` is not the server's owner ``root``. Their tenant is the one the configured
  mapping (``NbcastApp.tenant_map``, keyed by the bare user name) gives them, else
  ``NbcastApp.default_tenant`` (``default``; None refuses unmapped users).
  jupyter-server's shared-token user is a new random "Anonymous …" identity per
  browser: whoever holds the server's own token is the person who started the
  server (the token is in the owner's environment and runtime files), so nbcast acts
  for them as the server's **owner** — an **OS** identity (``NBCAST_USER``, else the
  login name of the server's process), in a personal ``jupyter lab`` the same person
  as on the command line.
"""

from __future__ import annotations

import hmac
import re
from collections.abc import Mapping
from typing import Any

from jupyter_server.auth.identity import IdentityProvider, User
from traitlets import Dict, Unicode

from nbcast.access import MAX_JUPYTER_NAME, Caller, Source
from nbcast.config import check_tenant_name
from nbcast.errors import AccessDeniedError, ConfigError
from nbcast.limits import clip

__all__ = ["TokenIdentityProvider", "caller_for", "is_anonymous"]

_ANONYMOUS_ID = re.compile(r"[0-9a-f]{32}")
_USER_NAME = re.compile(f"[^\\x00-\\x1f\\x7f]{{1,{MAX_JUPYTER_NAME}}}")
"""A jupyter-server user name nbcast accepts: printable, at most 120 characters (its
identity, ``jupyter:`` and the name, fits the tables' 128)."""


def is_anonymous(user: User) -> bool:
    """Whether ``user`` is jupyter-server's generated identity for its shared token
    (a random hex id named "Anonymous …")."""
    return bool(_ANONYMOUS_ID.fullmatch(user.username)) and user.name.startswith("Anonymous ")


def caller_for(
    user: User, tenant_map: Mapping[str, str], default_tenant: str | None, owner: str
) -> Caller:
    """The caller ``user`` acts as (module docstring: a jupyter identity for a named
    user, the server's ``owner`` as an OS identity for its own token; the tenant
    mapping is looked up by the bare name either way);
    :class:`AccessDeniedError` for a name nbcast does not accept or a user the mapping
    leaves without a tenant."""
    if is_anonymous(user):
        name, source = owner, Source.os  # checked as NBCAST_USER (nbcast.config)
    else:
        name, source = user.username, Source.jupyter
        if not _USER_NAME.fullmatch(name):
            raise AccessDeniedError(f"user name {clip(name)} is not acceptable")
    tenant = tenant_map.get(name, default_tenant)
    if tenant is None:
        raise AccessDeniedError(f"user {clip(name)} belongs to no tenant")
    try:
        check_tenant_name(tenant)
        return Caller.of(tenant=tenant, name=name, source=source)
    except ConfigError as exc:
        raise AccessDeniedError(f"user {clip(name)}: {exc}") from None


class TokenIdentityProvider(IdentityProvider):
    """jupyter-server's identity provider, with a token per named user
    (``user_tokens``) besides the server's own token."""

    user_tokens = Dict(
        key_trait=Unicode(),
        value_trait=Unicode(),
        default_value={},
        help="Tokens that identify a named user: {token: user name}. A request with "
        "'Authorization: token <token>' (or ?token=) is that user.",
    ).tag(config=True)

    async def get_user_token(self, handler: Any) -> User | None:
        """The named user whose token the request carries, else the base behaviour
        (the server's own token: an anonymous user)."""
        given = self.get_token(handler)
        if given:
            presented = given.encode("utf-8", "surrogatepass")
            for token, name in self.user_tokens.items():
                # Every stored token is compared, in constant time each.
                if hmac.compare_digest(presented, token.encode("utf-8", "surrogatepass")):
                    return User(username=name, name=name, display_name=name)
        return await super().get_user_token(handler)
