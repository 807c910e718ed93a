"""The status pages in a real Chromium (Debian's, through Playwright): every page loads
with no console error, the pause button pauses, run-now makes a run that a worker
then runs to SUCCEEDED, the definition page's diff form shows the diff of two
versions, a recipient's unsubscribe link shows a confirmation whose button (and only
the button) unsubscribes, and full-page screenshots of every page are kept as test
artifacts (``$NBCAST_TEST_ARTIFACTS``, else ``test-artifacts/screenshots``).

Without chromium the tests are skipped with the reason — except in CI
(``CI=true``), where a missing browser is a failure."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from nbcast.access import Caller
from nbcast.delivery.models import Unsubscription
from tests.browser import require_browser, script
from tests.notebooks import make_notebook
from tests.server.deliveries import RECIPIENT, database, deliver
from tests.server.live import LiveServer, user_token
from tests.server.test_pages import Seeded, is_paused, open_database, seed

pytestmark = pytest.mark.chromium

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


shots = script("ui_screenshots")


@pytest.fixture(scope="module")
def artifacts() -> Path:
    folder = Path(
        os.environ.get("NBCAST_TEST_ARTIFACTS") or ROOT / "test-artifacts" / "screenshots"
    )
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture(scope="module")
def seeded(server: LiveServer) -> Seeded:
    require_browser()
    return seed(server)


@pytest.fixture(scope="module")
def browser(seeded: Seeded) -> Iterator[Any]:
    with shots.open_browser() as chromium:
        yield chromium


@pytest.fixture
def page(browser: Any, server: LiveServer) -> Iterator[Any]:
    """A logged-in page (alice), collecting console errors and page errors."""
    context = browser.new_context(viewport=shots.VIEWPORT)
    tab = context.new_page()
    tab.problems = []
    tab.on("console", lambda m: m.type == "error" and tab.problems.append(m.text))
    tab.on("pageerror", lambda e: tab.problems.append(str(e)))
    answer = tab.goto(f"{server.url}/nbcast/?token={user_token('alice')}")
    assert answer is not None
    assert answer.status == 200
    yield tab
    context.close()


def _open(page: Any, url: str) -> None:
    answer = page.goto(url)
    assert answer is not None, url
    assert answer.status == 200, (url, answer.status)


def test_every_page_loads_cleanly_and_is_photographed(
    page: Any, server: LiveServer, seeded: Seeded, artifacts: Path
) -> None:
    pages = {
        "overview": "/nbcast/",
        "definitions": "/nbcast/definitions",
        "definition": f"/nbcast/definitions/{seeded.failing}",
        "run-failed": f"/nbcast/runs/{seeded.failed_run}",
        "not-found": "/nbcast/runs/999999",
    }
    for name, path in pages.items():
        answer = page.goto(server.url + path)
        assert answer is not None
        assert answer.status == (404 if name == "not-found" else 200), path
        assert page.locator("header.top").is_visible()
        page.screenshot(path=str(artifacts / f"{name}.png"), full_page=True)
        assert (artifacts / f"{name}.png").stat().st_size > 5_000
        if name == "not-found":  # Chromium logs the document's own 404, and only that
            assert page.problems == [
                "Failed to load resource: the server responded with a status of 404 (Not Found)"
            ]
            page.problems.clear()
        assert page.problems == [], name
    # The failing cell's line is on the run page as text, the hostile error inert.
    _open(page, f"{server.url}/nbcast/runs/{seeded.failed_run}")
    assert "cell 2, line 1" in page.inner_text("main")
    assert page.locator("main script, main img").count() == 0
    # A phone-sized view of the overview.
    page.set_viewport_size({"width": 390, "height": 844})
    _open(page, f"{server.url}/nbcast/")
    page.screenshot(path=str(artifacts / "overview-phone.png"), full_page=True)
    assert page.problems == []


def test_a_notebooks_script_does_not_run_framed_or_alone(
    page: Any, server: LiveServer, seeded: Seeded, artifacts: Path
) -> None:
    """The failing notebook displays ``HOSTILE_OUTPUT`` (a script that would retitle
    the page and fetch a URL): shown in the run page's frame and opened alone, it
    never runs."""
    requested: list[str] = []
    page.on("request", lambda r: requested.append(r.url))
    _open(page, f"{server.url}/nbcast/runs/{seeded.failed_run}")
    assert page.locator("details.card.notebook[open] iframe.notebook[sandbox]").is_visible()
    framed = page.frame_locator("iframe.notebook")
    framed.locator("text=ValueError").first.wait_for()  # rendered, in its frame
    assert "raise ValueError(" in framed.locator("body").inner_text()
    assert page.locator("pre.traceback").first.is_visible()  # the latest attempt's, open
    assert "ValueError" in page.inner_text("pre.traceback")
    page.screenshot(path=str(artifacts / "run-failed-notebook.png"), full_page=True)
    frame = page.frame(url=f"{server.url}/nbcast/runs/{seeded.failed_run}/notebook.html")
    assert frame is not None
    assert frame.title() != "pwned"
    assert page.title() != "pwned"
    alone = page.goto(f"{server.url}/nbcast/runs/{seeded.failed_run}/notebook.html")
    assert alone is not None
    assert alone.status == 200
    assert alone.headers["content-security-policy"].startswith("sandbox; default-src 'none'")
    assert "ValueError" in page.inner_text("body")
    assert page.title() != "pwned"
    assert not [url for url in requested if "pwned" in url]
    assert page.problems == []


def test_pause_through_the_form(
    page: Any, server: LiveServer, seeded: Seeded, artifacts: Path
) -> None:
    _open(page, f"{server.url}/nbcast/definitions/{seeded.good}")
    assert "ACTIVE" in page.inner_text("h1")
    page.get_by_role("button", name="Pause").click()
    page.wait_for_url(f"{server.url}/nbcast/definitions/{seeded.good}")
    assert "PAUSED" in page.inner_text("h1")
    assert f"{seeded.good} paused" in page.inner_text(".flash")
    assert is_paused(server, seeded.good)
    page.screenshot(path=str(artifacts / "definition-paused.png"), full_page=True)
    page.get_by_role("button", name="Resume").click()
    page.wait_for_url(f"{server.url}/nbcast/definitions/{seeded.good}")
    assert "ACTIVE" in page.inner_text("h1")
    assert not is_paused(server, seeded.good)
    assert page.problems == []


def test_the_diff_of_two_versions_from_the_definition_page(
    page: Any, server: LiveServer, seeded: Seeded, artifacts: Path
) -> None:
    from nbcast.clock import clock_from_env
    from nbcast.definitions.versions import publish

    # A second version of the good report: its body changes, its parameters do not.
    notebook = make_notebook(
        server.folder / "notebooks" / "good.ipynb",
        parameters='region = "EMEA"\n',
        body="print(region, 'the second version')",
        nbcast={"name": "kpi", "schedule": {"cron": "0 7 * * 1-5", "timezone": "Europe/Berlin"}},
    )
    db = open_database(server)
    try:
        env = dict(server.env)
        publish(
            db,
            notebook,
            caller=Caller(tenant="acme", user="jupyter:alice"),
            now=clock_from_env(env).now(),
            environ=env,
        )
    finally:
        db.dispose()
    _open(page, f"{server.url}/nbcast/definitions/{seeded.good}")
    assert page.locator("select[name=a]").input_value() == "1"  # the previous version
    assert page.locator("select[name=b]").input_value() == "2"  # against the latest
    page.get_by_role("button", name="Show diff").click()
    page.wait_for_url("**/diff?*")
    assert "format=html" in page.url
    text = page.inner_text("body")
    # What changes for recipients comes first: here only the code.
    assert text.index("What changes for recipients") < text.index("1 cell changed")
    assert "the second version" in text  # the added line
    assert "print(region)" in text  # the removed one
    assert page.locator("script").count() == 0
    page.screenshot(path=str(artifacts / "diff.png"), full_page=True)
    assert page.problems == []


def test_run_now_from_the_page_runs_to_success(
    page: Any, server: LiveServer, seeded: Seeded, artifacts: Path
) -> None:
    _open(page, f"{server.url}/nbcast/definitions/{seeded.good}")
    page.fill("textarea[name=parameters]", "region=APAC")
    page.get_by_role("button", name="Run now").click()
    page.wait_for_url(f"{server.url}/nbcast/runs/*")
    assert "QUEUED" in page.inner_text("h1")
    run_url = page.url
    worker = subprocess.run(
        [
            str(BIN / "nbcast"),
            "worker",
            "--exit-when-idle",
            "--no-warm-kernels",
            "--retry-backoff",
            "0",
        ],
        env={**server.env, "NBCAST_USER": "alice"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert worker.returncode == 0, worker.stderr
    deadline = time.monotonic() + 30  # the run ended when the worker exited
    state = ""
    while time.monotonic() < deadline:
        _open(page, run_url)
        state = page.inner_text("h1")
        if "SUCCEEDED" in state:
            break
        time.sleep(0.2)
    assert "SUCCEEDED" in state
    assert '"APAC"' in page.inner_text("main")
    page.screenshot(path=str(artifacts / "run-succeeded.png"), full_page=True)
    assert page.problems == []


def test_two_reports_compared_from_the_run_page(
    page: Any, server: LiveServer, seeded: Seeded, artifacts: Path
) -> None:
    """After the APAC run above, an EMEA run; its page compares it with the APAC one:
    the printed line before and after, and no script."""
    _open(page, f"{server.url}/nbcast/definitions/{seeded.good}")
    page.fill("textarea[name=parameters]", "region=EMEA")
    page.get_by_role("button", name="Run now").click()
    page.wait_for_url(f"{server.url}/nbcast/runs/*")
    run_url = page.url
    worker = subprocess.run(
        [str(BIN / "nbcast"), "worker", "--exit-when-idle", "--no-warm-kernels"],
        env={**server.env, "NBCAST_USER": "alice"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert worker.returncode == 0, worker.stderr
    _open(page, run_url)
    assert "SUCCEEDED" in page.inner_text("h1")
    choice = page.locator("select[name=with] option").first
    assert "#" in choice.inner_text()
    page.get_by_role("button", name="Compare reports").click()
    page.wait_for_url("**/diff/**")
    text = page.inner_text("body")
    assert "Reports compared" in text
    assert "-APAC" in text.replace(" ", "")
    assert "+EMEA" in text.replace(" ", "")
    assert page.locator("script").count() == 0
    page.screenshot(path=str(artifacts / "run-compare.png"), full_page=True)
    assert page.problems == []


def test_the_demo_helper_saves_screenshots(
    server: LiveServer, seeded: Seeded, artifacts: Path
) -> None:
    # A thread of its own: Playwright's sync API runs one instance per thread, and the
    # module's browser holds this one.
    with ThreadPoolExecutor(1) as pool:
        written = pool.submit(
            shots.save_screenshots,
            server.url + "/",
            user_token("alice"),
            artifacts / "demo",
            seeded.failed_run,
        ).result(timeout=120)
    assert [p.name for p in written] == ["overview.png", f"run-{seeded.failed_run}.png"]
    assert all(p.stat().st_size > 5_000 for p in written)


def _opt_outs(server: LiveServer) -> list[tuple[str, str, str, str]]:
    db = database(server)
    try:
        with db.session() as session:
            rows = session.execute(
                sa.select(
                    Unsubscription.scope,
                    Unsubscription.channel,
                    Unsubscription.recipient,
                    Unsubscription.source,
                )
            )
            return [(str(a), str(b), str(c), str(d)) for a, b, c, d in rows]
    finally:
        db.dispose()


def test_the_unsubscribe_page_asks_and_its_button_unsubscribes(
    browser: Any, server: LiveServer, seeded: Seeded, artifacts: Path
) -> None:
    """The recipient's view: no login, no cookie. Opening the email's link (twice,
    as a mail scanner and then the person would) records nothing; the button does."""
    delivered = deliver(server, server.folder / "mailed", name="mailed", formats=["csv"])
    context = browser.new_context(viewport=shots.VIEWPORT)
    tab = context.new_page()
    problems: list[str] = []

    def console(message: Any) -> None:
        if message.type == "error":
            problems.append(message.text)

    tab.on("console", console)
    tab.on("pageerror", lambda e: problems.append(str(e)))
    try:
        for _ in range(2):
            _open(tab, delivered.unsubscribe_url)
        assert "Unsubscribe?" in tab.title()
        text = tab.inner_text("body")
        assert f"Stop sending the report “mailed” to {RECIPIENT} (email)." in text
        assert _opt_outs(server) == []  # a GET changes nothing
        tab.screenshot(path=str(artifacts / "unsubscribe-confirm.png"), full_page=True)
        with tab.expect_navigation():
            tab.get_by_role("button", name="Unsubscribe").click()
        assert "Unsubscribed" in tab.title()
        assert f"{RECIPIENT} will no longer receive the report “mailed”." in tab.inner_text("body")
        assert _opt_outs(server) == [("mailed", "email", RECIPIENT, "one-click")]
        tab.screenshot(path=str(artifacts / "unsubscribe-done.png"), full_page=True)
        assert problems == []
    finally:
        context.close()
