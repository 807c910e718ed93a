"""nbcast's JupyterLab extension in a real ``jupyter lab``, driven in Debian's Chromium.

One Lab (with nbcast's server extension and its embedded scheduler, worker and
delivery worker on a scratch home, a local SMTP server as the mail relay) serves the
example ``daily_sales`` notebook with its ``nbcast`` block removed. The tests, in file
order, walk what a data scientist and a reviewer do: open the notebook, find
"Schedule as report…" in the toolbar, the palette and the file browser's menu; fill
the dialog (the schedule in words, next fires and DST notes, the parameter form); see
the server's refusals next to their fields with nothing written; save and publish;
reopen it on the published notebook; see the report in the Reports panel; run it now
and see the run succeed and its delivery to the recipient listed; open the executed
notebook and a rendition; pause it; publish a second version and open the diff. A
screenshot of each step is saved under ``$NBCAST_TEST_ARTIFACTS/lab`` (else
``test-artifacts/screenshots/lab``).

Without chromium the tests are skipped with the reason — except in CI (``CI=true``),
where a missing browser is a failure.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from nbcast.testing.smtp import FakeSMTPServer
from tests.browser import require_browser, script
from tests.server.live import TOKEN, LiveServer

pytestmark = [pytest.mark.chromium, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "notebooks" / "examples"
NOTEBOOK = "daily_sales.ipynb"
CLOSED = "quality_checks.ipynb"
"""A notebook that is never opened in an editor: the dialog reads and writes its file."""
BROWSER_ZONE = "America/New_York"


shots = script("ui_screenshots")
lab_ui = script("lab_ui")


def _notebook_without_block(target: Path, source: Path = EXAMPLES / NOTEBOOK) -> Path:
    notebook = json.loads(source.read_text())
    notebook["metadata"].pop("nbcast", None)
    target.write_text(json.dumps(notebook, indent=1))
    return target


@pytest.fixture(scope="module")
def artifacts() -> Path:
    base = os.environ.get("NBCAST_TEST_ARTIFACTS") or ROOT / "test-artifacts" / "screenshots"
    folder = Path(base) / "lab"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


BOUNCE = "gone@example.com"
"""A recipient the mail relay refuses for good (550): its delivery FAILS."""


@pytest.fixture(scope="module")
def mailbox() -> Iterator[FakeSMTPServer]:
    refused = {BOUNCE: "550 5.1.1 <gone@example.com>: unknown mailbox"}
    with FakeSMTPServer(refuse_recipients=refused) as smtp:
        yield smtp


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory, mailbox: FakeSMTPServer) -> Iterator[LiveServer]:
    require_browser(
        ((ROOT / "nbcast" / "labextension" / "package.json").exists(),
         "the labextension is not built (make labextension)"),
    )  # fmt: skip
    folder = tmp_path_factory.mktemp("lab")
    _notebook_without_block(folder / NOTEBOOK)
    _notebook_without_block(folder / CLOSED, EXAMPLES / "data_quality.ipynb")
    server = LiveServer(
        folder,
        command="lab",
        embedded_services=True,
        env={
            "NBCAST_LAKE": str(EXAMPLES / "lake"),
            "NBCAST_SMTP_URL": f"smtp://127.0.0.1:{mailbox.port}",
            "NBCAST_USER": "ada",
            "NBCAST_HEARTBEAT_SECONDS": "1",
        },
        extra=lab_ui.lab_arguments(folder),
    )
    with server:
        yield server


@pytest.fixture(scope="module")
def driver(lab: LiveServer, artifacts: Path) -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(**shots.launch_options())
        context = browser.new_context(
            viewport={"width": 1400, "height": 900}, timezone_id=BROWSER_ZONE
        )
        context.set_default_timeout(30_000)
        page = context.new_page()
        drive = lab_ui.LabDriver(page, lab.url, TOKEN, artifacts)
        drive.open(NOTEBOOK)
        try:
            yield drive
        finally:
            context.close()
            browser.close()


def api(lab: LiveServer, path: str) -> Any:
    with lab.client() as client:
        answer = client.get(f"/nbcast/api/v1/{path}")
        answer.raise_for_status()
        return answer.json()


def block_on_disk(lab: LiveServer) -> Any:
    return json.loads((lab.folder / NOTEBOOK).read_text())["metadata"].get("nbcast")


def text(locator: Any) -> str:
    return lab_ui.text_of(locator)


def test_schedule_is_offered_in_the_toolbar_the_palette_and_the_file_browser(driver: Any) -> None:
    dialog = driver.schedule_from_toolbar()
    driver.screenshot("01-dialog-from-toolbar")
    assert text(dialog.locator(".nbcast-Path")) == NOTEBOOK
    assert (
        text(dialog.locator(".nbcast-Status")) == "Not published yet: saving publishes version 1."
    )
    driver.cancel()
    dialog = driver.schedule_from_palette()
    assert text(dialog.locator(".nbcast-Path")) == NOTEBOOK
    driver.cancel()
    dialog = driver.schedule_from_file_browser(NOTEBOOK)
    driver.screenshot("02-dialog-from-file-browser")
    assert text(dialog.locator(".nbcast-Path")) == NOTEBOOK
    driver.cancel()


def test_the_dialog_draws_the_parameter_form_from_the_notebook(driver: Any) -> None:
    dialog = driver.schedule_from_toolbar()
    rows = dialog.locator("tr[data-parameter]")
    assert [r.get_attribute("data-parameter") for r in rows.all()] == [
        "report_date",
        "region",
        "top_n",
    ]
    # Types and help text from the parameters cell's annotations and comments.
    described = [
        [
            text(r.locator(f".nbcast-ParamName {part}"))
            for part in ("code", ".nbcast-ParamType", ".nbcast-Hint:not(.nbcast-Rule)")
        ]
        for r in rows.all()
    ]
    assert described == [
        ["report_date", "str", "trading day to report, ISO date"],
        ["region", "str", "a region, or ALL"],
        ["top_n", "int", "products in the top list"],
    ]
    assert text(rows.nth(2).locator(".nbcast-Default")) == "10"
    # region's Literal[...] annotation: its choices, and a dropdown for a value.
    assert text(rows.nth(1).locator(".nbcast-Rule")) == "one of EMEA, AMER, APAC, LATAM, ALL"
    rows.nth(1).locator("select[aria-label='region source']").select_option("value")
    choices = rows.nth(1).locator("select[aria-label='region value'] option")
    assert [o.get_attribute("value") for o in choices.all()] == [
        "EMEA",
        "AMER",
        "APAC",
        "LATAM",
        "ALL",
    ]
    rows.nth(1).locator("select[aria-label='region source']").select_option("default")
    # A string parameter may be bound to the slot's period; an int may not.
    date_sources = rows.nth(0).locator("select[aria-label='report_date source'] option")
    top_sources = rows.nth(2).locator("select[aria-label='top_n source'] option")
    assert [o.get_attribute("value") for o in date_sources.all()] == ["default", "value", "binding"]
    assert [o.get_attribute("value") for o in top_sources.all()] == ["default", "value"]
    # The default zone is the browser's, the default schedule a daily cron.
    assert driver.field("Time zone").input_value() == BROWSER_ZONE
    assert driver.field("Cron").input_value() == "0 7 * * *"
    assert driver.field("Name").input_value() == "daily_sales"


def test_the_schedule_is_described_with_its_next_fires_and_dst_notes(driver: Any) -> None:
    dialog = driver.page.locator(lab_ui.DIALOG)
    driver.set_schedule("30 2 * * *", "America/New_York")
    assert text(dialog.locator("[data-testid='describe']")) == "At 02:30 (America/New_York time)"
    preview = dialog.locator(".nbcast-Preview")
    captions = [c.text_content() for c in preview.locator(".nbcast-Caption").all()]
    assert captions == ["Next fire times (America/New_York)", "DST changes ahead"]
    ahead = preview.locator(".nbcast-Fires").nth(1).locator("li").first
    # Today is after 2026's changes: the next is 14 March 2027, when 02:30 does not exist.
    assert text(ahead) == (
        "Sun 2027-03-14 03:00 UTC−04:00 02:30 does not exist on 2027-03-14 "
        "(clocks go forward): runs at 03:00 EDT"
    )
    driver.screenshot("03-dialog-dst-notes", lab_ui.DIALOG)
    # The same schedule under the skip policy (Advanced): that slot is skipped.
    dialog.locator(".nbcast-Advanced > summary").click()
    driver.field("DST gap (a wall time that does not exist)").select_option("skip")
    driver.page.wait_for_function(
        "() => [...document.querySelectorAll('.nbcast-Dialog .nbcast-DstNote')]"
        ".some(n => n.textContent.endsWith('(clocks go forward): skipped'))"
    )
    driver.field("DST gap (a wall time that does not exist)").select_option("")
    dialog.locator(".nbcast-Advanced > summary").click()
    # A cron that is not one says why, in words, before anything is sent.
    driver.field("Cron").fill("61 * * * *")
    assert "nbcast-Bad" in (dialog.locator("[data-testid='describe']").get_attribute("class") or "")


def test_refusals_are_shown_next_to_their_fields_and_nothing_is_written(
    driver: Any, lab: LiveServer
) -> None:
    before = (lab.folder / NOTEBOOK).read_text()
    driver.field("Name").fill("daily-sales")
    driver.set_schedule("0 7 * * 1-5", "Europe/Berlin")
    driver.field("Time zone").fill("Mars/Olympus")
    driver.add_subscription("email", "not-an-address")
    driver.save()
    assert text(driver.error_for("timezone")) == "'Mars/Olympus' is not an IANA time zone"
    driver.screenshot("04-dialog-refused-zone", lab_ui.DIALOG)
    driver.set_schedule("0 7 * * 1-5", "Europe/Berlin")
    driver.save()
    assert driver.error_for("timezone").count() == 0
    assert text(driver.error_for("subscription:0")) == "'not-an-address' is not an email address"
    driver.screenshot("05-dialog-refused-recipient", lab_ui.DIALOG)
    assert (lab.folder / NOTEBOOK).read_text() == before
    assert api(lab, "definitions")["items"] == []


def _business_days_before(day: date, count: int) -> date:
    while count:
        day -= timedelta(days=1)
        count -= day.weekday() < 5
    return day


def _next_berlin_weekdays(count: int) -> list[date]:
    """The dates of the next ``count`` slots of ``0 7 * * 1-5`` in Berlin."""
    berlin = ZoneInfo("Europe/Berlin")
    now = datetime.now(berlin)
    day, found = now.date(), []
    while len(found) < count:
        if day.weekday() < 5 and datetime(day.year, day.month, day.day, 7, tzinfo=berlin) > now:
            found.append(day)
        day += timedelta(days=1)
    return found


def test_saving_writes_the_block_into_the_notebook_and_publishes_it(
    driver: Any, lab: LiveServer
) -> None:
    row = driver.page.locator(f"{lab_ui.DIALOG} .nbcast-Subscription").first
    # Channels the server's environment does not configure are marked (the server
    # has NBCAST_SMTP_URL; no Slack token, no webhook secret).
    marked = row.locator("select[aria-label='channel'] option[data-unconfigured]")
    assert {"slack", "webhook"} <= {o.get_attribute("value") for o in marked.all()}
    assert (
        row.locator("select[aria-label='channel'] option[value='email']").get_attribute(
            "data-unconfigured"
        )
        is None
    )
    # Two recipients in one row: each becomes a subscription of its own.
    row.locator("input[aria-label='recipients']").fill(f"cfo@example.com, {BOUNCE}")
    # The presets come grouped by the periods reports ask for; the builder makes the rest.
    driver.set_parameter("report_date", "binding", "previous week: its Monday")
    dialog = driver.page.locator(lab_ui.DIALOG)
    groups = dialog.locator("select[aria-label='report_date binding'] optgroup")
    assert [g.get_attribute("label") for g in groups.all()] == [
        "Day",
        "Previous week (Monday–Sunday)",
        "Month to date",
        "Previous month",
        "Previous quarter",
        "Data interval",
        "Other",
    ]
    resolved = dialog.locator("[data-resolved='report_date']")
    # Berlin weekdays at 07:00: each of the next three slots' previous-week Monday.
    slots = _next_berlin_weekdays(3)
    mondays = [(d - timedelta(days=7 + d.weekday())).isoformat() for d in slots]
    driver.wait_until(
        "the resolved Mondays", lambda: text(resolved) == f"next slots: {' · '.join(mondays)}"
    )
    row = dialog.locator("tr[data-parameter='report_date']")
    row.locator("select[aria-label='report_date binding']").select_option("build")
    row.locator("[aria-label='report_date shift']").fill("-2")
    row.locator("select[aria-label='report_date unit']").select_option("business_days")
    assert text(row.locator("[data-binding-json='report_date']")) == (
        '{"$period":"slot","steps":[{"business_days":-2}]}'
    )
    built = [_business_days_before(d, 2).isoformat() for d in slots]
    driver.wait_until(
        "the built binding resolved", lambda: text(resolved) == f"next slots: {' · '.join(built)}"
    )
    driver.screenshot("06a-dialog-binding-builder", lab_ui.DIALOG)
    driver.set_parameter("report_date", "binding", "previous business day of the slot")
    driver.set_parameter("top_n", "value", "5")
    driver.set_outputs("html")
    driver.field("What changed").fill("first version")
    driver.screenshot("06-dialog-filled", lab_ui.DIALOG)
    driver.save()
    driver.saved()
    expected = {
        "name": "daily-sales",
        "schedule": {"cron": "0 7 * * 1-5", "timezone": "Europe/Berlin"},
        "parameters": {
            "report_date": {"$period": "slot", "steps": [{"business_days": -1}]},
            "top_n": 5,
        },
        "outputs": ["html"],
        "subscriptions": [
            {"channel": "email", "to": "cfo@example.com"},
            {"channel": "email", "to": BOUNCE},
        ],
    }
    assert block_on_disk(lab) == expected
    [definition] = api(lab, "definitions")["items"]
    assert (definition["name"], definition["latest_version"], definition["paused"]) == (
        "daily-sales",
        1,
        False,
    )
    [version] = api(lab, "definitions/daily-sales/versions")["items"]
    assert (version["message"], version["nbcast"]) == ("first version", expected)


def test_a_notebook_not_open_is_scheduled_from_the_file_browser(
    driver: Any, lab: LiveServer
) -> None:
    dialog = driver.schedule_from_file_browser(CLOSED)
    assert text(dialog.locator(".nbcast-Path")) == CLOSED
    dialog.locator("input[name='nbcast-kind'][value='manual']").check()
    assert text(dialog.locator("[data-testid='describe']")) == (
        "No schedule: runs only when asked (Run now, or the API)."
    )
    driver.save()
    driver.saved()
    assert json.loads((lab.folder / CLOSED).read_text())["metadata"]["nbcast"] == {
        "name": "quality_checks",
        "outputs": ["html"],
    }
    listed = {d["name"]: d["schedule"] for d in api(lab, "definitions")["items"]}
    assert listed == {"daily-sales": "0 7 * * 1-5 (Europe/Berlin)", "quality_checks": "manual"}
    driver.activate_tab(NOTEBOOK)


def test_reopening_shows_the_published_settings_and_version(driver: Any) -> None:
    dialog = driver.schedule_from_toolbar()
    assert text(dialog.locator(".nbcast-Status")) == (
        "Published as daily-sales, version 1 — this notebook is that version."
    )
    assert driver.field("Name").input_value() == "daily-sales"
    assert driver.field("Cron").input_value() == "0 7 * * 1-5"
    assert driver.field("Time zone").input_value() == "Europe/Berlin"
    assert dialog.locator("select[aria-label='report_date binding']").input_value() == (
        "previous_business_day"
    )
    assert driver.field("top_n value").input_value() == "5"
    assert dialog.locator("input[aria-label='recipients']").input_value() == (
        f"cfo@example.com, {BOUNCE}"
    )
    driver.screenshot("07-dialog-reopened", lab_ui.DIALOG)
    driver.cancel()


def test_the_panel_lists_the_report_with_its_next_fire(driver: Any, lab: LiveServer) -> None:
    panel = driver.open_panel()
    # After publishing, the panel shows the report just published (the last one,
    # quality_checks); its back button leads to the list.
    panel.locator(".nbcast-Definition[data-definition='quality_checks']").wait_for()
    panel.locator(".nbcast-Back").click()
    row = panel.locator("tr[data-definition='daily-sales']")
    row.wait_for()
    detail = api(lab, "definitions/daily-sales")
    local = datetime.fromisoformat(detail["next_fires"][0]["local"])  # in Berlin, +01:00
    assert text(row.locator(".nbcast-NextFire")) == f"{local:%a %Y-%m-%d %H:%M} UTC+01:00"
    assert text(row.locator(".nbcast-Hint")) == "0 7 * * 1-5 (Europe/Berlin)"
    driver.screenshot("08-panel-list")


def _finished(driver: Any, row: Any) -> str:
    driver.wait_until(
        "the run to end",
        lambda: row.get_attribute("data-state") in {"SUCCEEDED", "FAILED", "TIMED_OUT"},
        timeout=180,
    )
    return str(row.get_attribute("data-state"))


def test_run_now_offers_a_test_first_and_no_subscriber_gets_it(
    driver: Any, lab: LiveServer, mailbox: FakeSMTPServer
) -> None:
    panel = driver.page.locator(lab_ui.PANEL)
    panel.locator("tr[data-definition='daily-sales']").click()
    definition = panel.locator(".nbcast-Definition[data-definition='daily-sales']")
    definition.wait_for()
    panel.get_by_role("button", name="Run now…").click()
    dialog = driver.page.locator(".jp-Dialog")
    accept = dialog.locator(".jp-Dialog-button.jp-mod-accept")
    assert dialog.locator("input[name='nbcast-run-mode']:checked").get_attribute("value") == "test"
    assert text(accept) == "Run test"
    dialog.locator("[aria-label='send to']").fill("author@example.com")
    driver.screenshot("09-run-now-test", ".jp-Dialog-content")
    accept.click()
    dialog.wait_for(state="detached")
    row = panel.locator("tr[data-run][data-kind='test']").first
    row.wait_for()
    assert "test run, to author@example.com" in text(row)
    assert _finished(driver, row) == "SUCCEEDED"
    driver.wait_until("the test mail", lambda: len(mailbox.messages) == 1, timeout=120)
    (mail,) = mailbox.messages
    assert mail.rcpt_tos == ("author@example.com",)
    assert str(mail.mail["Subject"]).startswith("[TEST] daily-sales")
    # A dry run of the next slot, sent to no one: rendered, and nobody gets mail.
    panel.get_by_role("button", name="Run now…").click()
    dialog.locator("input[name='nbcast-run-mode'][value='slot']").check()
    assert text(accept) == "Dry-run slot"
    detail = api(lab, "definitions/daily-sales")
    first_slot = next(f["slot_key"] for f in detail["next_fires"] if f["status"] != "skipped")
    assert dialog.locator("select[aria-label='slot']").input_value() == first_slot
    assert dialog.locator("[aria-label='region source']").count() == 0  # the slot decides
    dialog.locator("[aria-label='send to no one']").check()
    driver.screenshot("09b-run-now-dry-run", ".jp-Dialog-content")
    accept.click()
    dialog.wait_for(state="detached")
    dry = panel.locator(f"tr[data-run][data-kind='test']:has-text('dry run of slot {first_slot}')")
    dry.first.wait_for()
    assert _finished(driver, dry.first) == "SUCCEEDED"
    run_id = int(dry.first.get_attribute("data-run") or 0)
    dry.first.click()
    view = panel.locator(f".nbcast-Run[data-run='{run_id}']")
    view.wait_for()
    assert "dry run of slot" in text(view.locator(".nbcast-Hint").first)
    driver.wait_until(
        "its renditions",
        lambda: (
            api(lab, f"runs/{run_id}")["renditions"]
            and all(r["state"] == "DONE" for r in api(lab, f"runs/{run_id}")["renditions"])
        ),
        timeout=120,
    )
    view.locator(".nbcast-Renditions li[data-rendition]").first.wait_for()
    assert api(lab, f"runs/{run_id}")["deliveries"] == []
    assert len(mailbox.messages) == 1  # still only the test mail
    panel.locator(".nbcast-Back").click()
    definition.wait_for()


def test_run_now_succeeds_and_its_delivery_is_listed(
    driver: Any, lab: LiveServer, mailbox: FakeSMTPServer
) -> None:
    panel = driver.page.locator(lab_ui.PANEL)
    panel.locator(".nbcast-Definition[data-definition='daily-sales']").wait_for()
    panel.get_by_role("button", name="Run now…").click()
    run_dialog = driver.page.locator(".jp-Dialog")
    assert text(run_dialog.locator(".jp-Dialog-header")) == "Run daily-sales now"
    run_dialog.locator("input[name='nbcast-run-mode'][value='real']").check()
    assert text(run_dialog.locator(".jp-Dialog-button.jp-mod-accept")) == "Run for subscribers"
    run_dialog.locator("select[aria-label='region source']").select_option("value")
    run_dialog.locator("select[aria-label='region value']").select_option("EMEA")
    driver.screenshot("09c-run-now-dialog", ".jp-Dialog-content")
    run_dialog.locator(".jp-Dialog-button.jp-mod-accept").click()
    run_row = panel.locator("tr[data-run][data-kind='manual']").first
    run_row.wait_for()
    driver.wait_until(
        "the run to succeed",
        lambda: run_row.get_attribute("data-state") in {"SUCCEEDED", "FAILED", "TIMED_OUT"},
        timeout=180,
    )
    assert run_row.get_attribute("data-state") == "SUCCEEDED"
    run_id = int(run_row.get_attribute("data-run") or 0)
    run_row.click()
    view = panel.locator(f".nbcast-Run[data-run='{run_id}']")
    view.wait_for()
    parameters = view.locator("[data-section='Parameters']")
    assert text(parameters.locator("tr", has_text="region")) == "region EMEA"
    assert text(parameters.locator("tr", has_text="top_n")) == "top_n 5"
    # The context: times to the second (no microseconds), a dash for nothing, never null.
    context = text(view.locator("[data-section='Context']"))
    assert "null" not in context
    assert re.search(r"interval_end \d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}[+-]\d{2}:\d{2}", context), (
        context
    )
    assert not re.search(r"\d{2}:\d{2}:\d{2}\.\d", context), context
    delivery = view.locator("tr[data-delivery='cfo@example.com']")
    delivery.wait_for()
    driver.wait_until(
        "the delivery to be sent",
        lambda: delivery.get_attribute("data-state") in {"SENT", "FAILED"},
        timeout=120,
    )
    assert delivery.get_attribute("data-state") == "SENT"
    real = [m for m in mailbox.messages if not str(m.mail["Subject"]).startswith("[TEST]")]
    assert [m.rcpt_tos for m in real] == [("cfo@example.com",)]
    bounced = view.locator(f"tr[data-delivery='{BOUNCE}']")
    driver.wait_until(
        "the refused delivery to fail", lambda: bounced.get_attribute("data-state") == "FAILED"
    )
    assert "refused" in text(bounced)
    assert text(bounced.locator(".nbcast-DeliveryError")) == (
        f"SMTP RCPT TO refused: 550 5.1.1 <{BOUNCE}>: unknown mailbox"
    )
    driver.screenshot("10-panel-run-detail")
    # Retry it from the panel: the ledger row goes back to PENDING and is tried again.
    [before] = api(lab, f"deliveries?run={run_id}&state=FAILED")["items"]
    view.get_by_role("button", name="Retry failed deliveries (1)").click()
    driver.wait_until(
        "the retried delivery to fail again",
        lambda: (
            api(lab, f"deliveries?run={run_id}&state=FAILED")["items"]
            and api(lab, f"deliveries?run={run_id}&state=FAILED")["items"][0]["attempts"]
            > before["attempts"]
        ),
    )
    assert len(mailbox.refused) == 2


def test_the_executed_notebook_and_a_rendition_open(driver: Any) -> None:
    view = driver.page.locator(f"{lab_ui.PANEL} .nbcast-Run")
    view.get_by_role("button", name="Open notebook").click()
    executed = driver.page.locator(".nbcast-Executed[data-rendered]")
    executed.wait_for()
    # Lab's own notebook widget (not the HTML fallback), read-only, with the outputs the
    # worker's kernel wrote: the markdown title, the tables, no kernel of its own.
    assert executed.get_attribute("data-rendered") == "notebook"
    notebook = executed.locator(".nbcast-ExecutedNotebook")
    notebook.locator("h1", has_text="Daily sales by region").wait_for()
    assert notebook.locator(".jp-OutputArea-output").count() > 0
    # Outputs stored as lists of lines are drawn joined: no line of commas around a
    # table (a list drawn as text is its items joined by commas).
    tables = notebook.locator(".jp-OutputArea-output table")
    assert tables.count() > 0
    for output in notebook.locator(".jp-OutputArea-output").all():
        lines = [line.strip() for line in output.inner_text().splitlines()]
        assert not any(line and set(line) == {","} for line in lines), lines[:5]
    # Typing into a cell changes nothing (the cells are read-only).
    source = notebook.locator(".jp-CodeCell .cm-content").first
    before = source.inner_text()
    source.click()
    driver.page.keyboard.type("zzz")
    assert source.inner_text() == before
    assert text(executed.locator(".nbcast-ExecutedHeader")).startswith("daily-sales, run ")
    driver.screenshot("11-executed-notebook")
    link = view.locator(".nbcast-Renditions li[data-rendition='html'] a")
    href = link.get_attribute("href") or ""
    assert href.endswith("?disposition=inline")
    assert link.get_attribute("target") == "_blank"
    answer = driver.page.request.get(href)
    assert answer.status == 200
    assert answer.headers["content-type"].startswith("text/html")
    assert answer.headers["content-disposition"].startswith("inline;")
    assert answer.headers["content-security-policy"].startswith("sandbox;")


def test_two_reports_compared_in_a_tab(driver: Any) -> None:
    """The manual run (region EMEA) compared with the dry run of the coming slot."""
    view = driver.page.locator(f"{lab_ui.PANEL} .nbcast-Run")
    choice = view.locator("select[aria-label='compare with run']")
    choice.wait_for()
    assert "dry run of slot" in text(choice.locator("option").first)
    view.get_by_role("button", name="Compare reports").click()
    driver.page.locator(".jp-MainAreaWidget[data-compare]").wait_for()
    frame = driver.page.frame_locator(".nbcast-CompareFrame iframe").first
    frame.locator("h1", has_text="Reports compared").wait_for()
    body = frame.locator("body").inner_text()
    assert "Table revenue_by_region: changed" in body
    assert "execution_count" not in body
    assert frame.locator("script").count() == 0
    driver.screenshot("11b-compare-reports")


def test_pause_from_the_panel(driver: Any, lab: LiveServer) -> None:
    panel = driver.page.locator(lab_ui.PANEL)
    panel.locator(".nbcast-Back").click()
    definition = panel.locator(".nbcast-Definition[data-definition='daily-sales']")
    definition.wait_for()
    definition.get_by_role("button", name="Pause").click()
    definition.locator("h3 .nbcast-Paused").wait_for()
    definition.get_by_role("button", name="Resume").wait_for()
    assert api(lab, "definitions/daily-sales")["paused"] is True
    driver.screenshot("12-panel-paused")
    definition.get_by_role("button", name="Resume").click()
    definition.get_by_role("button", name="Pause").wait_for()
    assert definition.locator("h3 .nbcast-Paused").count() == 0
    assert api(lab, "definitions/daily-sales")["paused"] is False


def test_backfill_from_the_panel(driver: Any, lab: LiveServer) -> None:
    definition = driver.page.locator(f"{lab_ui.PANEL} .nbcast-Definition")
    definition.get_by_role("button", name="Backfill…").click()
    dialog = driver.page.locator(".jp-Dialog")
    assert text(dialog.locator(".jp-Dialog-header")) == "Backfill daily-sales"
    # Monday 23 and Tuesday 24 November 2026, 07:00 Berlin: two weekday slots.
    dialog.locator("[aria-label='Backfill from']").fill("2026-11-23")
    dialog.locator("[aria-label='Backfill until']").fill("2026-11-25")
    dialog.locator(".jp-Dialog-button.jp-mod-accept").click()
    dialog.wait_for(state="detached")
    runs = api(lab, "runs?definition=daily-sales&kind=backfill")["items"]
    assert sorted(r["slot_key"] for r in runs) == ["2026-11-23T07:00", "2026-11-24T07:00"]
    assert [r["parameters"]["report_date"] for r in sorted(runs, key=lambda r: r["slot_key"])] == [
        "2026-11-20",
        "2026-11-23",
    ]


def test_a_second_version_and_the_diff_of_the_two(driver: Any, lab: LiveServer) -> None:
    driver.activate_tab(NOTEBOOK)
    driver.page.click(".jp-NotebookPanel-toolbar [data-command='nbcast:schedule']")
    driver.wait_dialog()
    driver.set_parameter("top_n", "value", "7")
    driver.field("What changed").fill("top 7")
    driver.save()
    driver.saved()
    assert [v["message"] for v in api(lab, "definitions/daily-sales/versions")["items"]] == [
        "first version",
        "top 7",
    ]
    panel = driver.open_panel()
    definition = panel.locator(".nbcast-Definition[data-definition='daily-sales']")
    driver.wait_until(
        "version 2 listed", lambda: definition.locator("tr[data-version='2']").count()
    )
    assert definition.locator("select[aria-label='diff from version']").input_value() == "1"
    assert definition.locator("select[aria-label='diff to version']").input_value() == "2"
    # The backfilled slots of v1 have run by now (the embedded worker): one of them is
    # what "Compare outputs" starts from.
    driver.wait_until(
        "a backfilled run of v1 to succeed",
        lambda: any(
            r["state"] == "SUCCEEDED" and r["slot_key"] and r["version"] == 1
            for r in api(lab, "runs?definition=daily-sales&kind=backfill")["items"]
        ),
        timeout=180,
    )
    definition.get_by_role("button", name="Show diff").click()
    diff = driver.page.locator(".nbcast-Diff[data-rendered]")
    diff.wait_for()
    # nbdime's own web components, not the fallback frame.
    assert diff.get_attribute("data-rendered") == "nbdime"
    # What changes for recipients comes first: the value runs get, in plain words.
    summary = diff.locator(".nbcast-ReviewSummary")
    summary.wait_for()
    assert text(summary.locator("ul[data-section='parameters'] li")) == (
        "top_n: runs with 5 → 7 (the metadata block)"
    )
    view = diff.locator(".nbcast-NbdimeDiff")
    # The one change is in the notebook's metadata (the nbcast block): nbdime shows it
    # collapsed, and opened, the two values of top_n.
    view.get_by_text("Notebook metadata changed").click()
    driver.wait_until("the metadata diff", lambda: "top_n" in view.inner_text())
    assert text(diff.locator(".nbcast-DiffHeader .nbcast-Hint")) == (
        "nbdime's diff of the two versions (1 top-level change)"
    )
    tab = driver.page.locator(".lm-TabBar-tab.lm-mod-current .lm-TabBar-tabLabel", has_text="v1")
    assert text(tab) == "daily-sales: v1 → v2"
    driver.screenshot("13-diff")
    # Compare outputs: v2 dry-run on a slot v1 ran, the two reports side by side.
    bar = diff.locator(".nbcast-CompareOutputs")
    slots = bar.locator("select[aria-label='compare outputs on slot'] option")
    slots.first.wait_for(state="attached")
    bar.get_by_role("button", name="Compare outputs").click()
    status = bar.locator("[data-compare-status]")
    driver.wait_until(
        "the dry run of v2 and its comparison",
        lambda: status.get_attribute("data-compare-status") in {"done", "failed"},
        timeout=240,
    )
    assert status.get_attribute("data-compare-status") == "done", text(status)
    frame = driver.page.frame_locator(".nbcast-VersionCompare iframe").first
    frame.locator("h1", has_text="Reports compared").wait_for()
    body = frame.locator("body").inner_text()
    assert "Table top_products: changed" in body
    assert "5 → 7 rows" in body  # top_n runs with 5 in v1, 7 in v2
    driver.screenshot("13b-diff-compare-outputs")


def test_the_panel_polls_while_visible_and_not_while_hidden(driver: Any) -> None:
    driver.open_panel()
    start = driver.refreshes()
    driver.wait_until("two refreshes", lambda: driver.refreshes() >= start + 2, timeout=20)
    driver.show_sidebar("filebrowser")  # hides the panel: its poll stops
    driver.page.wait_for_timeout(200)
    hidden = driver.refreshes()
    driver.page.wait_for_timeout(6_500)  # three intervals of 2 s
    assert driver.refreshes() == hidden
    driver.open_panel()
    driver.wait_until("a refresh on show", lambda: driver.refreshes() > hidden, timeout=10)


def test_no_console_errors(driver: Any) -> None:
    """Only the refusals the tests asked for: the previews of a zone that does not exist
    and of a cron that is not one (400s the dialog shows next to the schedule)."""
    unexpected = [
        (message, url)
        for message, url in driver.console_errors
        if not ("status of 400" in message and "/nbcast/api/v1/schedule/preview" in url)
    ]
    assert unexpected == []
