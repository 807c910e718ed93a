"""A jupyter-server authorizer that refuses the resource ``nbcast`` to everyone, and
writes down each refusal (and :class:`ContentsRefusingAuthorizer`, which refuses
``contents`` instead) — for :mod:`tests.server.test_authorization`, which runs a
live server with it (``--ServerApp.authorizer_class=``) and checks that every nbcast
route asks it.

Each refusal is a JSON line (handler class, method, path, action, resource) appended
to the file named by ``NBCAST_TEST_REFUSALS``; every other resource is allowed, so
the rest of jupyter-server works as usual.
"""

from __future__ import annotations

import json
import os
from typing import Any

from jupyter_server.auth.authorizer import Authorizer
from jupyter_server.auth.identity import User

__all__ = ["REFUSALS_ENV", "ContentsRefusingAuthorizer", "RefusingAuthorizer"]

REFUSALS_ENV = "NBCAST_TEST_REFUSALS"
"""The environment variable naming the file refusals are written to."""


def _write_down(handler: Any, action: str, resource: str) -> None:
    record = {
        "handler": type(handler).__name__,
        "method": handler.request.method,
        "path": handler.request.path,
        "action": action,
        "resource": resource,
    }
    with open(os.environ[REFUSALS_ENV], "a", encoding="utf-8") as out:
        out.write(json.dumps(record) + "\n")


class RefusingAuthorizer(Authorizer):
    """``nbcast``: no, to anyone (and written down); anything else: yes."""

    def is_authorized(self, handler: Any, user: User, action: str, resource: str) -> bool:
        """Refuse ``nbcast`` (module docstring)."""
        if resource != "nbcast":
            return True
        _write_down(handler, action, resource)
        return False


class ContentsRefusingAuthorizer(Authorizer):
    """``contents``: no, to any named user (and written down); the server's own token
    and every other resource: yes — a server whose files its users may not read, for
    :mod:`tests.server.test_publish_by_path`."""

    def is_authorized(self, handler: Any, user: User, action: str, resource: str) -> bool:
        """Refuse ``contents`` to named users."""
        if resource != "contents" or user.name.startswith("Anonymous "):
            return True
        _write_down(handler, action, resource)
        return False
