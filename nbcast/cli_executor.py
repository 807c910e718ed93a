"""The execution plane's commands: ``worker``, ``cancel`` and ``tenants``."""

from __future__ import annotations

import logging
import os
import socket
from typing import Any

import click

from nbcast.cli import AppContext, _emit_json, _table, cli, pass_app

__all__: list[str] = []


@cli.command()
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
    from nbcast.executor.engines import engines
    from nbcast.executor.worker import Worker, default_work_dir
    from nbcast.governance.tenants import list_tenants

    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
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
            name=name or f"{socket.gethostname()}:{os.getpid()}",
            artifacts=str(settings.artifacts_dir),
            work_dir=default_work_dir(settings.home),
            lease_seconds=lease_seconds,
            lake=os.environ.get("NBCAST_LAKE"),
            backoff_base=retry_backoff,
        )
        service.install_signal_handlers()
        stats = service.run(exit_when_idle=exit_when_idle)
    click.echo(
        f"worker done: {stats.succeeded} succeeded, {stats.failed} failed, "
        f"{stats.rejected} late outcomes refused"
    )


@cli.command()
@click.argument("run_id", type=int)
@pass_app
def cancel(app: AppContext, run_id: int) -> None:
    """Cancel a queued or running run."""
    from nbcast.executor.control import cancel_run

    click.echo(
        f"run {run_id}: "
        + cancel_run(app.db, app.clock, app.settings.tenant, run_id, by=app.settings.user)
    )


@cli.group()
@click.option(
    "--operator",
    is_flag=True,
    help="Act as the operator of the whole installation even though a tenant is named.",
)
@pass_app
def tenants(app: AppContext, operator: bool) -> None:
    """Tenants and their quotas (operator commands: they act on every tenant).

    Until roles exist these belong to whoever operates the installation: they refuse
    to run when a tenant is named (--tenant or NBCAST_TENANT), which is how a
    tenant's user works, unless --operator says the caller is the operator.
    """
    from nbcast.errors import ConfigError

    if app.tenant_named and not operator:
        raise ConfigError(
            "tenants commands act on every tenant and are for the operator: run them "
            "without --tenant/NBCAST_TENANT, or add --operator (nbcast tenants --operator …)"
        )


_QUOTA_OPTIONS = [
    click.option(
        "--max-concurrent",
        "max_concurrent_runs",
        type=int,
        help="Runs of the tenant running at once.",
    ),
    click.option("--cpus", "cpus_per_run", type=float, help="CPUs per run (Ray num_cpus)."),
    click.option("--memory-mb", "memory_mb_per_run", type=int, help="Memory per run, MB."),
    click.option("--timeout", "run_timeout_s", type=int, help="Run timeout, seconds."),
    click.option("--max-attempts", type=int, help="Attempts before a run FAILS."),
    click.option("--share", type=float, help="Weight for fair share (default 1)."),
    click.option(
        "--budget-bytes",
        "warehouse_budget_bytes",
        type=int,
        help="Warehouse bytes per calendar month.",
    ),
]


def _quota_options(func: Any) -> Any:
    for option in reversed(_QUOTA_OPTIONS):
        func = option(func)
    return func


def _given(values: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in values.items() if v is not None}


@tenants.command("create")
@click.argument("name")
@_quota_options
@pass_app
def tenants_create(app: AppContext, /, name: str, **quota: Any) -> None:
    """Create tenant NAME (with optional quotas)."""
    from nbcast.governance.tenants import ensure_tenant, set_quota

    with app.db.session() as session:
        ensure_tenant(session, name)
        set_quota(session, name, **_given(quota))
    click.echo(f"tenant {name} ready")


@tenants.command("set-quota")
@click.argument("name")
@_quota_options
@pass_app
def tenants_set_quota(app: AppContext, /, name: str, **quota: Any) -> None:
    """Change quotas of tenant NAME."""
    from nbcast.governance.tenants import set_quota

    with app.db.session() as session:
        set_quota(session, name, **_given(quota))
    click.echo(f"tenant {name}: " + ", ".join(f"{k}={v}" for k, v in _given(quota).items()))


@tenants.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_app
def tenants_list(app: AppContext, as_json: bool) -> None:
    """List tenants with their quotas."""
    from nbcast.governance.tenants import QUOTA_FIELDS, list_tenants

    with app.db.session() as session:
        rows = [
            {"name": t.name, **{f: getattr(t, f) for f in QUOTA_FIELDS}}
            for t in list_tenants(session)
        ]
    if as_json:
        _emit_json(rows)
        return
    _table(
        None,
        [
            "tenant",
            "concurrent",
            "cpus",
            "memory MB",
            "timeout s",
            "attempts",
            "share",
            "budget bytes",
        ],
        [
            (
                r["name"],
                r["max_concurrent_runs"],
                r["cpus_per_run"],
                r["memory_mb_per_run"],
                r["run_timeout_s"],
                r["max_attempts"],
                r["share"],
                r["warehouse_budget_bytes"] or "unlimited",
            )
            for r in rows
        ],
    )
