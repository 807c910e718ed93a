"""``nbcast worker``: the execution plane's service."""

from __future__ import annotations

import os

import click

from nbcast.cli.app import AppContext, Seconds, configure_logging, pass_app, supervise
from nbcast.errors import ConfigError

__all__: list[str] = []


def _engine_name(ctx: click.Context, param: click.Parameter, value: str) -> str:
    """``--engine``: a name in the engine registry (built-ins and plug-ins)."""
    from nbcast.executor.engines import check_engine_name

    try:
        return check_engine_name(value)
    except ConfigError as exc:
        raise click.BadParameter(str(exc), ctx=ctx, param=param) from None


@click.command()
@click.option(
    "--engine",
    default="local",
    show_default=True,
    callback=_engine_name,
    help="Where notebooks run: the name of a registered engine (a wrong one lists them).",
)
@click.option(
    "--concurrency",
    type=click.IntRange(1, 256),
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
    type=Seconds(1, 86_400),
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
    "--sandbox",
    "sandbox",
    type=click.Choice(["on", "off"]),
    default=None,
    help="Run each attempt's kernel in a sandbox as its tenant's own user (default: on, "
    "or NBCAST_SANDBOX). 'off' runs reports as this worker's user: trusted tenants only.",
)
@click.option(
    "--tenant",
    "tenants",
    default="",
    metavar="T[,T2]",
    help="A dedicated worker: claim only these tenants' runs (default: every tenant's).",
)
@click.option(
    "--retry-backoff",
    type=Seconds(0, 86_400),
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
    sandbox: str | None,
    tenants: str,
    retry_backoff: float,
) -> None:
    """Claim runs and execute them with papermill, locally or on Ray; stop with SIGTERM."""
    from nbcast.config import check_tenant_name
    from nbcast.daemon import service_name
    from nbcast.executor.engines import open_engine
    from nbcast.executor.worker import Worker, default_work_dir
    from nbcast.executor.worker_scope import worker_scope
    from nbcast.sandbox.policy import SandboxSetting, sandbox_setting

    configure_logging()
    settings = app.settings
    names = [check_tenant_name(t.strip()) for t in tenants.split(",") if t.strip()]
    setting = SandboxSetting(sandbox) if sandbox else sandbox_setting()
    work_dir = default_work_dir(settings.home)
    scope = worker_scope(
        app.db,
        setting=setting,
        user=settings.user,
        tenants=names,
        work_dir=work_dir,
        artifacts=settings.artifacts_location,
        home=str(settings.home),
        database_file=settings.database_file,
    )
    if scope.notice:
        click.echo(f"nbcast worker: {scope.notice}", err=True)
    runner = open_engine(
        app.db,
        engine,
        capacity=concurrency,
        warm_kernels=not no_warm_kernels,
        address=ray_address,
    )
    with runner:
        service = Worker(
            app.db,
            app.clock,
            runner,
            name=service_name(name),
            artifacts=settings.artifacts_location,
            work_dir=work_dir,
            lease_seconds=lease_seconds,
            lake=os.environ.get("NBCAST_LAKE"),
            backoff_base=retry_backoff,
            sandbox=scope.sandbox,
            tenants=scope.tenants,
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
