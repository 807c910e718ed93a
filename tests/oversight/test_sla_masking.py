"""An SLA alert's webhook URL (``NBCAST_SLA_TO``) is a secret like a subscription's:
``nbcast sla list``'s records show it, and the URL quoted in the alert's error, whole
to the tenant's admins only — on SQLite and PostgreSQL, with the alert sent (and
refused) by the real delivery worker."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from nbcast.access import Caller
from nbcast.clock import FixedClock
from nbcast.db import Database
from nbcast.delivery.channels.webhook import WebhookChannel
from nbcast.oversight.sla_queries import SlaMissRecord, list_misses
from tests.members import grant
from tests.oversight.sla_world import ALICE, World, minutes

SLOT = datetime(2026, 11, 2, 7, 0, tzinfo=UTC)
SECRET = "s3cr3t-token"
HOOK = f"http://127.0.0.1:9/hooks/{SECRET}-a1b2"
"""Plain http: the worker's webhook channel (https only) refuses it, quoting it."""
MASKED = "http://127.0.0.1:9/…a1b2"


def _miss(world: World, user: str) -> SlaMissRecord:
    with world.db.session() as session:
        [miss] = list_misses(session, Caller(tenant="default", user=user)).items
    return miss


def test_an_sla_alerts_webhook_url_is_whole_for_admins_only(db: Database, tmp_path: Path) -> None:
    clock = FixedClock(SLOT - minutes(2))
    world = World(db, clock, tmp_path)
    world.publish("sales", {"cron": "0 7 * * *"}, email=None)  # its publisher: the admin
    grant(db, "default", "vic", "viewer")
    clock.set(SLOT + minutes(1))
    world.tick()
    clock.set(SLOT + minutes(31))
    world.check({"NBCAST_SLA_CHANNEL": "webhook", "NBCAST_SLA_TO": HOOK})
    with WebhookChannel("whsec_test") as hooks:
        worker = world.worker({"webhook": hooks})
        for _ in range(5):
            if not worker.step().busy:
                break

    seen = _miss(world, "vic")
    assert (seen.alert.state, seen.alert.channel, seen.alert.to) == ("FAILED", "webhook", MASKED)
    assert SECRET not in str(seen.to_json())
    assert seen.alert.error is not None
    assert MASKED in str(seen.alert.error)

    whole = _miss(world, ALICE.user)
    assert whole.alert.to == HOOK
    assert HOOK in str(whole.alert.error)
