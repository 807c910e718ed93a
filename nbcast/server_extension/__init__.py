"""nbcast's jupyter-server extension: the REST API, the status UI, signed links,
one-click unsubscribe, Prometheus metrics and the embedded services.

Installing nbcast enables it for ``jupyter server`` and ``jupyter lab`` (the config
file ``jupyter-config/jupyter_server_config.d/nbcast.json`` in the wheel's shared
data); ``nbcast serve`` runs a jupyter-server with this extension alone. The
application is :class:`nbcast.server_extension.app.NbcastApp`.
"""

from __future__ import annotations

from typing import Any

__all__: list[str] = []


def _jupyter_server_extension_points() -> list[dict[str, Any]]:
    from nbcast.server_extension.app import NbcastApp

    return [{"module": "nbcast.server_extension", "app": NbcastApp}]
