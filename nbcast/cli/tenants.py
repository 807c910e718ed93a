"""``nbcast tenants``: tenants and their quotas (see :mod:`nbcast.tenancy.roles`)."""

from __future__ import annotations

from typing import Any

import click

from nbcast.cli.app import AppContext, pass_app
from nbcast.cli.output import emit_json, table

__all__: list[str] = []


@click.group()
def tenants() -> None:
    """Tenants and their quotas.

    Creating tenants and listing them all is for operators; an admin of a tenant
    (or an operator) changes its quotas.
    """


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
        "--processes",
        "max_processes_per_run",
        type=int,
        help="Processes and threads one run may have at once (its sandbox's limit).",
    ),
    click.option(
        "--budget-bytes",
        "budget_warehouse_bytes_per_day",
        type=int,
        help="Warehouse bytes the tenant's runs may read per UTC day.",
    ),
    click.option(
        "--budget-cpu-seconds",
        "budget_cpu_s_per_day",
        type=float,
        help="Kernel CPU seconds the tenant's runs may use per UTC day.",
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
@click.option("--admin", default=None, help="The tenant's first admin (else its first user).")
@_quota_options
@pass_app
def tenants_create(app: AppContext, /, name: str, admin: str | None, **quota: Any) -> None:
    """Create tenant NAME, with optional quotas and its first admin (operators)."""
    from nbcast.tenancy.tenants import create_tenant

    create_tenant(app.db, app.clock, app.caller, name, admin=admin, **_given(quota))
    click.echo(f"tenant {name} ready" + (f", {admin} its admin" if admin else ""))


@tenants.command("set-quota")
@click.argument("name")
@_quota_options
@pass_app
def tenants_set_quota(app: AppContext, /, name: str, **quota: Any) -> None:
    """Change quotas of tenant NAME (its admins, operators)."""
    from nbcast.tenancy.tenants import change_quota

    change_quota(app.db, app.clock, app.caller, name, **_given(quota))
    click.echo(f"tenant {name}: " + ", ".join(f"{k}={v}" for k, v in _given(quota).items()))


@tenants.command("set-ceiling")
@click.argument("name")
@_quota_options
@click.option(
    "--no-budget-ceiling",
    "unlimited",
    multiple=True,
    type=click.Choice(["bytes", "cpu-seconds"]),
    help="Let the tenant's admins remove that budget (repeatable).",
)
@pass_app
def tenants_set_ceiling(
    app: AppContext, /, name: str, unlimited: tuple[str, ...], **quota: Any
) -> None:
    """Set the ceilings tenant NAME's admins may set its quotas up to (operators).

    A quota above its new ceiling comes down to it at once. A budget with a ceiling
    cannot be removed by the tenant's admins.
    """
    from nbcast.tenancy.tenants import set_ceilings

    values = _given(quota)
    fields = {"bytes": "budget_warehouse_bytes_per_day", "cpu-seconds": "budget_cpu_s_per_day"}
    values.update({fields[kind]: None for kind in unlimited})
    record = set_ceilings(app.db, app.clock, app.caller, name, **values)
    click.echo(
        f"tenant {name} ceilings: "
        + ", ".join(
            f"{k}={record.ceilings[k] if record.ceilings[k] is not None else 'none'}"
            for k in values
        )
    )


@tenants.command("set-network")
@click.argument("name")
@click.argument("network", type=click.Choice(["host", "none"]))
@pass_app
def tenants_set_network(app: AppContext, /, name: str, network: str) -> None:
    """Set what tenant NAME's report kernels reach over the network (operators).

    host: what the worker's machine reaches (loopback services too: they must ask for
    credentials). none: a network of their own with loopback only; a warehouse is then
    reached through a unix socket its connection names (host=/run/postgresql).
    """
    from nbcast.tenancy.tenants import set_network

    set_network(app.db, app.clock, app.caller, name, network)
    click.echo(f"tenant {name}: network {network}")


@tenants.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_app
def tenants_list(app: AppContext, as_json: bool) -> None:
    """List every tenant with its quotas (operators)."""
    from nbcast.tenancy.tenants import list_tenants

    rows: list[dict[str, Any]] = []
    after = None
    with app.db.session() as session:
        while True:
            page = list_tenants(session, app.caller, app.clock.now(), limit=1000, after=after)
            rows += [t.to_json() for t in page.items]
            if page.next_after is None:
                break
            after = page.next_after
    if as_json:
        emit_json(rows)
        return
    table(
        None,
        [
            "tenant",
            "concurrent",
            "cpus",
            "memory MB",
            "timeout s",
            "attempts",
            "share",
            "bytes/day",
            "CPU s/day",
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
                r["budget_warehouse_bytes_per_day"] or "unlimited",
                r["budget_cpu_s_per_day"] or "unlimited",
            )
            for r in rows
        ],
    )


COMMANDS = [tenants]
"""The commands this module adds to ``nbcast``."""
