"""``nbcast retention``: see :mod:`nbcast.oversight.retention`.

``set`` changes the tenant's policy (admins), ``show`` prints it (any member),
``apply`` runs a pass now (admins; every tenant with ``--all-tenants``, operators),
``--dry-run`` printing what it would delete and free without writing anything.
"""

from __future__ import annotations

from typing import Any

import click

from nbcast.cli.app import AppContext, pass_app
from nbcast.cli.output import emit_json, table

__all__: list[str] = []


class RetentionDays(click.ParamType):  # type: ignore[type-arg]
    """A number of days from 1 to 36,500, or ``forever``."""

    name = "DAYS|forever"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> int | str:
        """``value`` as days (or the word ``forever``), or fail the command."""
        from nbcast.oversight.retention_plan import RETAIN_DAYS_MAX

        if isinstance(value, int) and not isinstance(value, bool):
            return value
        text = str(value).strip()
        if text.lower() == FOREVER:
            return FOREVER
        if not text.isascii() or not text.isdigit() or len(text) > 6:
            self.fail(f"{text[:40]!r} is not a number of days or 'forever'", param, ctx)
        days = int(text)
        if not 1 <= days <= RETAIN_DAYS_MAX:
            self.fail(f"{days} is not 1 to {RETAIN_DAYS_MAX:,} days", param, ctx)
        return days


FOREVER = "forever"


@click.group()
def retention() -> None:
    """How long the tenant keeps executed notebooks, renditions and rows.

    Files go after --artifacts-days, run and delivery rows after --rows-days (both
    counted from a run's fire time; 'forever' keeps them). Audit entries are kept.
    """


@retention.command("set")
@click.option(
    "--artifacts-days",
    type=RetentionDays(),
    default=None,
    help="Days to keep executed notebooks and renditions (or 'forever').",
)
@click.option(
    "--rows-days",
    type=RetentionDays(),
    default=None,
    help="Days to keep run and delivery rows; at least --artifacts-days (or 'forever').",
)
@pass_app
def retention_set(app: AppContext, artifacts_days: Any, rows_days: Any) -> None:
    """Change the tenant's retention policy (admins)."""
    from nbcast.oversight.retention import set_retention

    changes = {
        name: None if value == FOREVER else value
        for name, value in (("artifacts_days", artifacts_days), ("rows_days", rows_days))
        if value is not None
    }
    if not changes:
        raise click.UsageError("name --artifacts-days, --rows-days or both")
    policy = set_retention(app.db, app.clock, app.caller, **changes)
    click.echo(f"tenant {app.settings.tenant}: retention {policy}")


@retention.command("show")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_app
def retention_show(app: AppContext, as_json: bool) -> None:
    """Print the tenant's retention policy."""
    from nbcast.oversight.retention import retention_policy

    with app.db.session() as session:
        policy = retention_policy(session, app.caller, app.clock.now())
    if as_json:
        emit_json({"tenant": app.settings.tenant, **policy.to_json()})
        return
    click.echo(f"tenant {app.settings.tenant}: retention {policy}")


def _size(count: int) -> str:
    value = float(count)
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if value < 1000 or unit == "TB":
            return f"{count:,} B" if unit == "B" else f"{value:,.1f} {unit}"
        value /= 1000
    return f"{count:,} B"  # pragma: no cover


@retention.command("apply")
@click.option("--dry-run", is_flag=True, help="Show what would go; write nothing.")
@click.option(
    "--all-tenants", "every_tenant", is_flag=True, help="Every tenant with a policy (operators)."
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_app
def retention_apply(app: AppContext, dry_run: bool, every_tenant: bool, as_json: bool) -> None:
    """Delete what the policy no longer keeps, now (admins): runs and their rows,
    artifacts nothing kept refers to; prints what went and the bytes freed."""
    from nbcast.artifacts import open_store
    from nbcast.oversight.retention import apply_retention

    results = apply_retention(
        app.db,
        app.clock,
        app.caller,
        open_store(app.settings.artifacts_location),
        dry_run=dry_run,
        every_tenant=every_tenant,
    )
    if as_json:
        emit_json([r.to_json() for r in results])
        return
    title = "retention, dry run: what would be deleted" if dry_run else "retention: deleted"
    table(
        title,
        ["tenant", "policy", "runs", "deliveries", "artifact runs", "artifacts", "freed", "failed"],
        [
            (
                r.tenant,
                str(r.policy),
                f"{r.runs:,}",
                f"{r.deliveries:,}",
                f"{r.artifact_runs:,}",
                f"{r.artifacts:,}",
                _size(r.bytes),
                f"{r.failed:,}" if r.failed else "",
            )
            for r in results
        ],
        wrap=["policy"],
    )
    if any(r.failed for r in results):
        click.echo(
            "some artifacts could not be deleted: they are kept, with their references, "
            "and the next pass tries again"
        )
    if not results:
        click.echo("no tenant has a retention policy")


COMMANDS = [retention]
"""The commands this module adds to ``nbcast``."""
