"""``nbcast tenants``: tenants and their quotas (the operator's commands)."""

from __future__ import annotations

from typing import Any

import click

from nbcast.cli.app import AppContext, pass_app
from nbcast.cli.output import emit_json, table

__all__: list[str] = []


@click.group()
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
    from nbcast.governance.tenants import QUOTA_FIELDS, all_tenants

    with app.db.session() as session:
        rows = [
            {"name": t.name, **{f: getattr(t, f) for f in QUOTA_FIELDS}}
            for t in all_tenants(session)
        ]
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


COMMANDS = [tenants]
"""The commands this module adds to ``nbcast``."""
