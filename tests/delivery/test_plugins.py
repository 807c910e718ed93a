"""Open plug-in edges: a renderer and a channel from an installed distribution.

``tests/plugin`` is a real distribution (``nbcast-testplugin``, installed into the
venv by ``make install``) that registers, through entry points only, the renderer
``md`` and the channel ``teams``. nbcast names neither anywhere: a definition that
renders ``md`` and subscribes over ``teams`` is published, run, rendered and
delivered end to end — the channel configured from the environment by its own
``from_environment`` — while a format or a channel no registry knows is still
refused at publish, naming the field.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import nbformat
import pytest

from nbcast.access import Caller
from nbcast.clock import FixedClock
from nbcast.db import Database
from nbcast.delivery.channels import build_channels, channel_class, channels
from nbcast.delivery.models import DeliveryState, RenditionState
from nbcast.delivery.queries import deliveries_of_run, renditions_of_run
from nbcast.delivery.renderers import renderers
from nbcast.delivery.settings import load_delivery_settings
from nbcast.errors import MetadataError
from nbcast.testing.webhook import webhook_receiver
from tests.delivery import make_report
from tests.delivery.plane import Plane, executed_notebook

T0 = datetime(2026, 11, 2, 8, 0, tzinfo=UTC)
CALLER = Caller(tenant="default", user="t")
TEAMS_ENV = {"NBCAST_TEAMS_TOKEN": "teams-test-token"}


@pytest.fixture(autouse=True)
def _plugin_installed() -> None:
    if "md" not in renderers.names() or "teams" not in channels.names():
        pytest.fail(
            "the test plug-in is not installed: "
            ".venv/bin/uv pip install --python .venv/bin/python -e tests/plugin (make install)"
        )


@pytest.fixture
def plane(db: Database, tmp_path: Path) -> Plane:
    return Plane(db, FixedClock(T0), tmp_path)


def test_a_plugin_renderer_and_channel_deliver_end_to_end(plane: Plane) -> None:
    with webhook_receiver() as receiver:
        plane.publish(
            "sales",
            [{"channel": "teams", "to": receiver.url, "formats": ["md"]}],
            outputs=("html", "md"),
        )
        run_id = plane.succeed("sales", rows=2, marker="revenue is up")
        built = build_channels(load_delivery_settings(TEAMS_ENV), TEAMS_ENV)
        assert type(built["teams"]).__module__ == "nbcast_testplugin.teams"
        ledger = plane.ledger(built)
        try:
            plane.pump(ledger, plane.renders())
        finally:
            ledger.close()
        [request] = receiver.requests
    with plane.db.session() as session:
        [delivery] = deliveries_of_run(session, CALLER, run_id)
        renditions = {r.format: r for r in renditions_of_run(session, CALLER, run_id)}
    assert (delivery.channel, delivery.state, delivery.reason) == (
        "teams",
        DeliveryState.SENT,
        None,
    )
    assert delivery.receipt == {"status": 200}
    md = renditions["md"]
    assert md.state is RenditionState.DONE
    assert (md.media_type, md.filename) == ("text/markdown", f"sales_run-{run_id}.md")

    assert request.header("Authorization") == "Bearer teams-test-token"
    assert request.header("X-Nbcast-Delivery") == f"nbcast-d{delivery.id}-r{run_id}"
    posted = json.loads(request.body)
    # attaches_files: the md file, whose text is the card's body.
    assert [f["name"] for f in posted["files"]] == [md.filename]
    assert posted["body"].startswith(f"# sales — run {run_id}\n")
    assert "| region | sales |" in posted["body"]
    assert "| r1 | 1 |" in posted["body"]
    # sends_links: a signed link to the md file.
    [link] = posted["links"]
    assert link.startswith("https://reports.example.com/nbcast/links/")


def test_the_plugin_renderer_is_deterministic() -> None:
    notebook = nbformat.reads(executed_notebook(rows=3).decode(), as_version=4)
    first = renderers.create("md").render(notebook, make_report())
    again = renderers.create("md").render(nbformat.from_dict(notebook), make_report())
    assert first == again
    assert b"# daily-sales" in first


def test_a_plugin_channel_is_configured_only_by_its_environment() -> None:
    settings = load_delivery_settings({})
    assert set(build_channels(settings, {})) == {"link"}  # nothing else is configured
    assert set(build_channels(settings, TEAMS_ENV)) == {"link", "teams"}
    assert channel_class("teams").check_recipient("ftp://x") is not None


@pytest.mark.parametrize(
    ("outputs", "subscription", "message"),
    [
        pytest.param(
            ("html", "docx"),
            {"channel": "link", "to": "a@example.com"},
            "outputs[1]: 'docx' is not one of html|pdf|xlsx|csv|md",
            id="format",
        ),
        pytest.param(
            ("html", "md"),
            {"channel": "fax", "to": "a@example.com"},
            "subscriptions[0].channel: 'fax' is not one of email|slack|link|webhook|teams",
            id="channel",
        ),
        pytest.param(
            ("html", "md"),
            {"channel": "teams", "to": "https://hooks.example.com/t", "formats": ["docx"]},
            "subscriptions[0].formats[0]: 'docx' is not one of",
            id="subscription-format",
        ),
        pytest.param(
            ("html",),
            {"channel": "teams", "to": "not a url"},
            "subscriptions[0].to: 'not a url' is not an http(s):// URL",
            id="plugin-recipient-rule",
        ),
    ],
)
def test_what_no_registry_knows_is_refused_at_publish(
    plane: Plane, outputs: tuple[str, ...], subscription: dict[str, str], message: str
) -> None:
    with pytest.raises(MetadataError) as refused:
        plane.publish("sales", [subscription], outputs=outputs)
    assert message in str(refused.value)
