"""``nbcast worker``: the execution plane's service."""

from __future__ import annotations

import os
from typing import Any

import click

from nbcast.cli.app import AppContext, configure_logging, pass_app, supervise

__all__: list[str] = []


@click.command()
@click.option(
    "--engine",
    type=click.Choice(["local", "ray"]),
    default="local",
    show_default=True,
    help="Where notebooks run.",
)
@click.option(
    "--concurrency",
    type=int,
    default=2,
    show_default=True,
    help="Attempts this worker runs at once.",
)
@click.option(
    "--ray-address",
    default=None,
    help="Join a Ray cluster: 'auto' or 'ray://host:10001' (default: start a local Ray).",
)
@click.option(
    "--lease-seconds",
    type=float,
    default=30.0,
    show_default=True,
    help="Lease length; heartbeats renew it every third of it.",
)
@click.option("--name", default=None, help="Worker name (default host:pid).")
@click.option(
    "--exit-when-idle", is_flag=True, help="Exit once nothing is due and nothing is running."
)
@click.option("--no-warm-kernels", is_flag=True, help="Start a fresh kernel per run.")
@click.option(
    "--retry-backoff",
    type=float,
    default=30.0,
    show_default=True,
    help="Base seconds of the exponential backoff before a retry.",
)
@pass_app
def worker(
    app: AppContext,
    engine: str,
    concurrency: int,
    ray_address: str | None,
    lease_seconds: float,
    name: str | None,
    exit_when_idle: bool,
    no_warm_kernels: bool,
    retry_backoff: float,
) -> None:
    """Claim runs and execute them with papermill, locally or on Ray; stop with SIGTERM."""
    from nbcast.daemon import service_name
    from nbcast.executor.engines import engines
    from nbcast.executor.worker import Worker, default_work_dir
    from nbcast.governance.tenants import list_tenants

    configure_logging()
    options: dict[str, Any] = {"capacity": concurrency}
    if engine == "ray":
        with app.db.session() as session:
            options["tenants"] = {t.name: t.max_concurrent_runs for t in list_tenants(session)}
        options["address"] = ray_address
        options["temp_dir"] = os.environ.get("NBCAST_RAY_TEMP_DIR")
        if no_warm_kernels:
            os.environ["NBCAST_RAY_WARM_KERNELS"] = "0"
    else:
        options["warm_kernels"] = not no_warm_kernels
    settings = app.settings
    with engines.create(engine, **options) as runner:
        service = Worker(
            app.db,
            app.clock,
            runner,
            name=service_name(name),
            artifacts=str(settings.artifacts_dir),
            work_dir=default_work_dir(settings.home),
            lease_seconds=lease_seconds,
            lake=os.environ.get("NBCAST_LAKE"),
            backoff_base=retry_backoff,
        )
        service.exit_when_idle = exit_when_idle
        supervise(app, service)
        stats = service.stats
    click.echo(
        f"worker done: {stats.succeeded} succeeded, {stats.failed} failed, "
        f"{stats.rejected} late outcomes refused"
    )


COMMANDS = [worker]
"""The commands this module adds to ``nbcast``."""
