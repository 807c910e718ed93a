"""What a user of ``nbcast serve`` may do beyond nbcast: nothing, unless they are the
operator.

jupyter-server authenticates a request and then asks its authorizer whether that
user may perform an action on a resource (``contents``, ``kernels``, ``terminals``,
…, and ``nbcast`` for every nbcast handler). Its default authorizer says yes to
every authenticated user — right for a personal server, wrong for ``nbcast serve``,
where :class:`~nbcast.server_extension.identity.TokenIdentityProvider` hands each
person of each tenant a token: with the default, any of them could open a kernel and
run code as the server's OS user, or read nbcast's home (its database, its signing
keys) through the contents API.

:class:`NbcastAuthorizer`, which ``nbcast serve`` installs, allows the resource
``nbcast`` to every authenticated user (nbcast's command layer then scopes each to
their tenant and checks their role there, operators included), and every
other resource only to the operator: the server's own token (and a password login,
which jupyter-server also treats as that anonymous operator) and the users named in
``NbcastAuthorizer.operators``. Under JupyterHub or in a personal ``jupyter lab``,
where each user has a server of their own, jupyter-server's own authorizer stays.
"""

from __future__ import annotations

from typing import Any

from jupyter_server.auth.authorizer import Authorizer
from jupyter_server.auth.identity import User
from traitlets import List, Unicode

from nbcast.server_extension.identity import is_anonymous

__all__ = ["RESOURCE", "NbcastAuthorizer"]

RESOURCE = "nbcast"
"""The jupyter-server resource of every nbcast handler."""


class NbcastAuthorizer(Authorizer):
    """nbcast to everyone authenticated; the rest of the server to the operator."""

    operators = List(
        Unicode(),
        default_value=[],
        help="Users who may use all of jupyter-server (contents, kernels, terminals), "
        "besides the server's own token.",
    ).tag(config=True)

    def is_authorized(self, handler: Any, user: User, action: str, resource: str) -> bool:
        """Whether ``user`` may ``action`` on ``resource`` (module docstring)."""
        if resource == RESOURCE:
            return True
        return is_anonymous(user) or user.username in self.operators
