"""The oversight service: ``nbcast oversight`` — the SLA monitor and its alerts, the
audit checkpoints, retention (:mod:`nbcast.oversight.service`)."""

from __future__ import annotations

import click

from nbcast.cli.app import AppContext, Seconds, pass_app, supervise

__all__: list[str] = []


@click.command("oversight")
@click.option("--name", default=None, help="Replica name (default host:pid).")
@click.option(
    "--interval",
    type=Seconds(0.05, 3600),
    default=5.0,
    show_default=True,
    help="Seconds between two steps.",
)
@pass_app
def oversight(app: AppContext, name: str | None, interval: float) -> None:
    """Watch the SLAs and send their alerts, sign the audit heads at least hourly and
    apply retention once a day; stops on SIGTERM.

    ``NBCAST_AUDIT_EXPORT`` names a file, outside the home, the checkpoints are
    appended to as well. Alerts go through the channels the environment configures,
    as the delivery worker's do."""
    import os
    from pathlib import Path

    from nbcast.delivery.channels import build_channels
    from nbcast.delivery.settings import load_delivery_settings
    from nbcast.oversight.service import OversightService
    from nbcast.tenancy.checkpoints import load_key

    settings = load_delivery_settings()
    export = os.environ.get("NBCAST_AUDIT_EXPORT", "").strip()
    service = OversightService(
        app.db,
        app.clock,
        build_channels(settings),
        name=name,
        base_url=settings.base_url,
        audit_key=load_key(app.settings.home, create=True),
        checkpoint_export=Path(export) if export else None,
        interval=interval,
    )
    supervise(app, service)


COMMANDS = [oversight]
