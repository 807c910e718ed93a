"""``nbcast serve``: the server extension on a jupyter-server of its own."""

from __future__ import annotations

import click

__all__: list[str] = []

MAX_BODY_BYTES = 40 * 1024 * 1024
"""The largest request body ``nbcast serve`` reads."""


@click.command(context_settings={"ignore_unknown_options": True})
@click.option("--ip", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option(
    "--port", type=click.IntRange(1, 65535), default=8888, show_default=True, help="Port."
)
@click.option(
    "--embedded-services/--no-embedded-services",
    default=None,
    help="Run the scheduler, a worker and a delivery worker as supervised children "
    "(default: with the embedded database).",
)
@click.option(
    "--no-auth",
    is_flag=True,
    default=False,
    help="Start even though requests would not be authenticated (an empty token and "
    "no password): anyone who can connect acts as the server's owner. Without it, "
    "such a configuration is refused.",
)
@click.argument("server_args", nargs=-1, type=click.UNPROCESSED)
def serve(
    ip: str,
    port: int,
    embedded_services: bool | None,
    no_auth: bool,
    server_args: tuple[str, ...],
) -> None:
    """Start a jupyter-server with nbcast's extension alone: the API under
    /nbcast/api/v1, the status page at /nbcast/, signed links, unsubscribe and metrics.
    It prints its URL with the token. Further arguments go to jupyter-server
    (e.g. --ServerApp.base_url=/reports/ or --NbcastApp.tenant_map=…). A configuration
    in which jupyter-server would not authenticate requests (e.g.
    --IdentityProvider.token='' without a password) is refused, exit status 2, unless
    --no-auth is given."""
    from nbcast.server_extension.app import ServeApp
    from nbcast.server_extension.authentication import NO_AUTH_OPTION

    argv = [
        f"--ServerApp.ip={ip}",
        f"--ServerApp.port={port}",
        "--ServerApp.port_retries=0",
        "--ServerApp.open_browser=False",
        # Per-person tokens are for nbcast, not for kernels or files on the server
        # (nbcast.server_extension.authorizer); later arguments may say otherwise.
        "--ServerApp.authorizer_class=nbcast.server_extension.authorizer.NbcastAuthorizer",
        # No request needs more than nbcast's largest JSON body (32 MiB) and a margin;
        # jupyter-server's default would buffer 512 MiB from anyone, logged in or not.
        f"--ServerApp.max_body_size={MAX_BODY_BYTES}",
        f"--ServerApp.max_buffer_size={MAX_BODY_BYTES}",
    ]
    if embedded_services is not None:
        argv.append(f"--NbcastApp.embedded_services={embedded_services}")
    if no_auth:
        argv.append(NO_AUTH_OPTION)
    ServeApp.launch_instance(argv=[*argv, *server_args])  # type: ignore[no-untyped-call]


COMMANDS = [serve]
"""The commands this module adds to ``nbcast``."""
