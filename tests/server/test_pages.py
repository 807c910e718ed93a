"""The status pages against a live server: each page for its tenant, 404 pages for
another tenant's objects, hostile text escaped, forms behind XSRF with
Post/Redirect/Get. Data is seeded through the ``nbcast`` CLI with the server's own
environment (its home and database)."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from nbcast.access import Caller
from nbcast.config import load_settings
from nbcast.db import Database
from tests.members import grant
from tests.notebooks import make_notebook
from tests.server.live import LiveServer, user_token

BIN = Path(sys.executable).parent

HOSTILE_VALUE = "<img src=x onerror=alert(1)>"
HOSTILE_ERROR = "<script>alert('boom')</script>"
HOSTILE_OUTPUT = "<script>document.title = 'pwned'; fetch('/nbcast/pwned-by-a-notebook')</script>"
"""An HTML output of the failing cell: were it to run, the title would change and the
server would see the fetch."""


@dataclass(frozen=True)
class Seeded:
    """What :func:`seed` made: acme's failing definition and its run, acme's
    succeeding definition, and globex's definition and run."""

    failing: str
    failed_run: int
    good: str
    other: str
    other_run: int


def nbcast(server: LiveServer, *args: str, tenant: str | None = None, user: str = "alice") -> str:
    """Run the ``nbcast`` command with the server's environment; its output."""
    env = {**server.env, "NBCAST_USER": user}
    env.pop("NBCAST_TENANT", None)
    if tenant is not None:
        env["NBCAST_TENANT"] = tenant
    done = subprocess.run(
        [str(BIN / "nbcast"), *args], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, (args, done.stdout, done.stderr)
    return done.stdout


def open_database(server: LiveServer) -> Database:
    """The server's database, opened in this process."""
    return Database.open(load_settings(dict(server.env)).database_url)


def seed(server: LiveServer) -> Seeded:
    """Tenants acme (one attempt per run) and globex; in acme a definition whose
    notebook raises hostile text, run once with a hostile parameter value and failed,
    and one that succeeds; in globex a definition with a queued run. Through the
    command layer in this process (what the CLI calls), with the server's environment;
    the worker is the real ``nbcast worker``. Alice and bob are authors in their
    tenants, and "test" (:func:`is_paused`) a viewer in both."""
    from nbcast.clock import clock_from_env
    from nbcast.definitions.versions import publish
    from nbcast.scheduler.control import run_now
    from nbcast.scheduler.materializer import Materializer
    from nbcast.scheduler.service import scheduler_lock
    from nbcast.tenancy.tenants import set_quota

    env = dict(server.env)
    folder = server.folder / "notebooks"
    failing = make_notebook(
        folder / "failing.ipynb",
        parameters='region = "EMEA"\n',
        # One line, so the failing line is still "cell 2, line 1".
        body="from IPython.display import HTML, display; "
        f"display(HTML({HOSTILE_OUTPUT!r})); raise ValueError({HOSTILE_ERROR!r} + region)",
        nbcast={
            "name": "sales.daily",
            "schedule": {"cron": "30 1 * * *", "timezone": "America/New_York"},
        },
    )
    good = make_notebook(
        folder / "good.ipynb",
        parameters='region = "EMEA"\n',
        body="print(region)",
        nbcast={"name": "kpi", "schedule": {"cron": "0 7 * * 1-5", "timezone": "Europe/Berlin"}},
    )
    other = make_notebook(
        folder / "other.ipynb",
        body="print(region)",
        nbcast={"name": "globex-secret", "schedule": {"cron": "0 * * * *"}},
    )
    db = open_database(server)
    clock = clock_from_env(env)
    try:
        for tenant, author in (("acme", "jupyter:alice"), ("globex", "jupyter:bob")):
            grant(db, tenant, author)
            grant(db, tenant, "test", "viewer")
        with db.session() as session:
            set_quota(session, "acme", max_attempts=1)
        for path, tenant, author in (
            (failing, "acme", "jupyter:alice"),
            (good, "acme", "jupyter:alice"),
        ):
            publish(
                db, path, caller=Caller(tenant=tenant, user=author), now=clock.now(), environ=env
            )
        publish(
            db,
            other,
            caller=Caller(tenant="globex", user="jupyter:bob"),
            now=clock.now(),
            environ=env,
        )
        with scheduler_lock(db):
            Materializer(db, clock, name="tick").tick()
        alice = Caller(tenant="acme", user="jupyter:alice")
        failed_run = run_now(db, clock, alice, "sales.daily", {"region": HOSTILE_VALUE})
        nbcast(server, "worker", "--exit-when-idle", "--no-warm-kernels", "--retry-backoff", "0")
        # Made after the worker left: globex's run stays QUEUED.
        other_run = run_now(
            db, clock, Caller(tenant="globex", user="jupyter:bob"), "globex-secret", {}
        )
    finally:
        db.dispose()
    return Seeded("sales.daily", failed_run, "kpi", "globex-secret", other_run)


@pytest.fixture(scope="module")
def seeded(server: LiveServer) -> Seeded:
    return seed(server)


def is_paused(server: LiveServer, name: str, tenant: str = "acme") -> bool:
    """Whether ``name`` is paused, read through the command layer."""
    from nbcast.views.definitions import get_definition

    db = open_database(server)
    try:
        with db.session() as session:
            return get_definition(session, Caller(tenant=tenant, user="test"), name).paused
    finally:
        db.dispose()


@pytest.fixture
def browser(server: LiveServer) -> Iterator[httpx.Client]:
    """An httpx client that logs in like a browser: ``?token=`` once, cookies after
    (so XSRF applies, as it does to a browser's forms)."""
    with httpx.Client(base_url=server.url, timeout=30) as client:
        answer = client.get("/nbcast/", params={"token": user_token("alice")})
        assert answer.status_code == 200
        yield client


def xsrf_of(page: str) -> str:
    """The XSRF token in a page's first form."""
    found = re.search(r'name="_xsrf" value="([^"]+)"', page)
    assert found, "the page has no form with an XSRF token"
    return found.group(1)


def test_each_page_answers_for_its_tenant(server: LiveServer, seeded: Seeded) -> None:
    with server.client("alice") as client:
        pages = {
            "/nbcast/": [seeded.failing, seeded.good, "scheduler", "Failed deliveries"],
            "/nbcast/definitions": [seeded.failing, seeded.good, "Run now"],
            f"/nbcast/definitions/{seeded.failing}": [
                "America/New_York",
                "Next fire times",
                f"#{seeded.failed_run}",
                "notebook_error",
            ],
            f"/nbcast/runs/{seeded.failed_run}": [
                "FAILED",
                "ValueError",
                "cell 2, line 1",
                f"/nbcast/api/v1/runs/{seeded.failed_run}/notebook",
                "Rerun",
            ],
        }
        for path, expected in pages.items():
            answer = client.get(path)
            assert answer.status_code == 200, (path, answer.text[:500])
            assert answer.headers["content-type"].startswith("text/html")
            for text in expected:
                assert text in answer.text, (path, text)
            assert seeded.other not in answer.text, path
        css = re.search(r'<link rel="stylesheet" href="([^"]+)"', answer.text)
        assert css is not None
        sheet = client.get(css.group(1))
        assert sheet.status_code == 200
        assert ".state-failed" in sheet.text


def test_another_tenants_objects_are_404_pages(server: LiveServer, seeded: Seeded) -> None:
    with server.client("alice") as client:
        for path in (
            f"/nbcast/definitions/{seeded.other}",
            f"/nbcast/runs/{seeded.other_run}",
            "/nbcast/runs/999999",
            "/nbcast/runs/not-a-number",
        ):
            answer = client.get(path)
            assert answer.status_code == 404, path
            assert answer.headers["content-type"].startswith("text/html")
            assert "Not found" in answer.text
            assert "Traceback" not in answer.text
    with server.client("bob") as client:
        assert client.get(f"/nbcast/runs/{seeded.failed_run}").status_code == 404
        assert client.get(f"/nbcast/definitions/{seeded.failing}").status_code == 404
        overview = client.get("/nbcast/")
        assert overview.status_code == 200
        assert seeded.other in overview.text
        assert seeded.failing not in overview.text


def test_hostile_text_is_escaped(server: LiveServer, seeded: Seeded) -> None:
    with server.client("alice") as client:
        run = client.get(f"/nbcast/runs/{seeded.failed_run}").text
        assert HOSTILE_VALUE not in run
        assert HOSTILE_ERROR not in run
        assert "&lt;img src=x onerror=alert(1)&gt;" in run  # the parameter, shown as text
        assert "&lt;script&gt;alert(" in run  # the error, shown as text
        missing = client.get("/nbcast/definitions/%3Cscript%3Ealert(1)%3C%2Fscript%3E")
        assert missing.status_code == 404
        assert "<script>alert(1)" not in missing.text
        assert "&lt;script&gt;alert(1)" in missing.text
        assert "<script" not in client.get("/nbcast/").text


def test_a_browser_without_a_login_goes_to_the_login_page(server: LiveServer) -> None:
    answer = httpx.get(f"{server.url}/nbcast/", follow_redirects=False, timeout=30)
    assert answer.status_code == 302
    assert "/login?next=" in answer.headers["location"]
    posted = httpx.post(f"{server.url}/nbcast/definitions/kpi/pause", timeout=30)
    assert posted.status_code == 403
    with server.client("alice") as client:
        bare = client.get("/nbcast", params={"x": "1"})
    assert bare.status_code == 302
    assert bare.headers["location"] == "/nbcast/?x=1"


def test_a_form_without_xsrf_is_refused_and_writes_nothing(
    server: LiveServer, seeded: Seeded, browser: httpx.Client
) -> None:
    assert not is_paused(server, seeded.good)
    answer = browser.post(f"/nbcast/definitions/{seeded.good}/pause", data={})
    assert answer.status_code == 403
    assert "Traceback" not in answer.text
    assert not is_paused(server, seeded.good)


def test_pause_and_resume_through_the_forms(
    server: LiveServer, seeded: Seeded, browser: httpx.Client
) -> None:
    page = browser.get(f"/nbcast/definitions/{seeded.good}")
    assert "▶ ACTIVE" in page.text
    answer = browser.post(
        f"/nbcast/definitions/{seeded.good}/pause", data={"_xsrf": xsrf_of(page.text)}
    )
    assert answer.status_code == 302
    assert answer.headers["location"] == f"/nbcast/definitions/{seeded.good}"
    assert is_paused(server, seeded.good)
    after = browser.get(answer.headers["location"])
    assert "⏸ PAUSED" in after.text
    assert f"{seeded.good} paused" in after.text  # the flash message, once
    assert f"{seeded.good} paused" not in browser.get(answer.headers["location"]).text
    answer = browser.post(
        f"/nbcast/definitions/{seeded.good}/resume",
        data={"_xsrf": xsrf_of(after.text), "back": "overview"},
    )
    assert answer.status_code == 302
    assert answer.headers["location"] == "/nbcast/"
    assert not is_paused(server, seeded.good)


def test_run_now_leads_to_the_new_run_and_a_refusal_is_a_flash(
    server: LiveServer, seeded: Seeded, browser: httpx.Client
) -> None:
    page = browser.get(f"/nbcast/definitions/{seeded.good}")
    answer = browser.post(
        f"/nbcast/definitions/{seeded.good}/run",
        data={"_xsrf": xsrf_of(page.text), "parameters": "region=APAC"},
    )
    assert answer.status_code == 302
    location = answer.headers["location"]
    assert re.fullmatch(r"/nbcast/runs/\d+", location)
    run = browser.get(location).text
    assert "QUEUED" in run
    assert "&#34;APAC&#34;" in run
    assert 'http-equiv="refresh"' in run  # queued: the page reloads itself
    # Bad parameters are refused: a flash message, no run, no traceback.
    answer = browser.post(
        f"/nbcast/definitions/{seeded.good}/run",
        data={"_xsrf": xsrf_of(page.text), "parameters": "no_such_parameter=1"},
    )
    assert answer.status_code == 302
    shown = browser.get(answer.headers["location"])
    assert "Refused:" in shown.text
    assert "no_such_parameter" in shown.text
    assert "Traceback" not in shown.text
    # Cancelling a finished run is refused the same way.
    failed = browser.get(f"/nbcast/runs/{seeded.failed_run}").text
    answer = browser.post(
        f"/nbcast/runs/{seeded.failed_run}/cancel", data={"_xsrf": xsrf_of(failed)}
    )
    assert answer.status_code == 302
    shown = browser.get(answer.headers["location"])
    assert "Refused:" in shown.text
    # Rerun queues a new run and goes there.
    answer = browser.post(
        f"/nbcast/runs/{seeded.failed_run}/rerun", data={"_xsrf": xsrf_of(failed)}
    )
    assert answer.status_code == 302
    rerun = browser.get(answer.headers["location"]).text
    assert f"#{seeded.failed_run}" in rerun
    assert "rerun" in rerun


def test_forms_on_another_tenants_objects_are_404(
    server: LiveServer, seeded: Seeded, browser: httpx.Client
) -> None:
    token = xsrf_of(browser.get("/nbcast/definitions").text)
    answer = browser.post(f"/nbcast/definitions/{seeded.other}/pause", data={"_xsrf": token})
    assert answer.status_code == 404
    assert not is_paused(server, seeded.other, tenant="globex")
    answer = browser.post(f"/nbcast/runs/{seeded.other_run}/cancel", data={"_xsrf": token})
    assert answer.status_code == 404
    answer = browser.post(f"/nbcast/definitions/{seeded.good}/explode", data={"_xsrf": token})
    assert answer.status_code == 404


def test_dst_notes_and_the_ray_dashboard_link(tmp_path: Path) -> None:
    # The server's clock stands at 00:45 EDT on the night New York falls back
    # (2027-11-07 01:00-02:00 happens twice).
    clock = {"NBCAST_CLOCK": "fixed:2027-11-07T04:45:00Z"}
    ray = "--NbcastApp.ray_dashboard_url=http://127.0.0.1:8265/"
    with LiveServer(tmp_path, users={"alice": "acme"}, env=clock, extra=(ray,)) as live:
        # The server's owner (NBCAST_USER) operates the fresh home and publishes; the
        # server's user alice is acme's admin.
        owner = live.env["NBCAST_USER"]
        nbcast(live, "tenants", "create", "acme", "--admin", "jupyter:alice", user=owner)
        schedules = {
            "nightly": {"cron": "30 1 * * *", "timezone": "America/New_York"},
            "hourly": {"cron": "30 * * * *", "timezone": "America/New_York"},
            "berlin": {"cron": "0 7 * * *", "timezone": "Europe/Berlin"},
        }
        for name, schedule in schedules.items():
            notebook = make_notebook(tmp_path / f"{name}.ipynb", nbcast={"schedule": schedule})
            nbcast(live, "publish", str(notebook), tenant="acme", user=owner)
        nbcast(live, "scheduler", "tick")
        with live.client("alice") as client:
            page = client.get("/nbcast/definitions/nightly")
            listing = client.get("/nbcast/definitions")
            overview = client.get("/nbcast/")
    assert 'href="http://127.0.0.1:8265/"' in overview.text  # the Ray dashboard, when set
    assert page.status_code == 200
    assert "01:30 happens twice on 2027-11-07: runs the first pass only (EDT)" in page.text
    assert "2027-11-08 01:30 EST" in page.text
    # The list: each definition's next three fire times in its own zone, DST noted.
    assert listing.status_code == 200
    rows = {
        name: re.sub(r"<[^>]+>", "", row)
        for name, row in re.findall(
            r'<tr>\s*<td><a href="/nbcast/definitions/([^"]+)">(.*?)</tr>', listing.text, re.S
        )
    }
    assert set(rows) == set(schedules)
    nightly = rows["nightly"]
    assert "2027-11-07 01:30 EDT (Sun)" in nightly
    assert "01:30 happens twice on 2027-11-07: runs the first pass only (EDT)" in nightly
    assert "2027-11-08 01:30 EST (Mon)" in nightly
    assert "2027-11-09 01:30 EST (Tue)" in nightly
    hourly = rows["hourly"]
    assert "2027-11-07 01:30 EDT (Sun)" in hourly
    assert "01:30 happens twice on 2027-11-07: runs both (EDT, then EST)" in hourly
    assert "2027-11-07 01:30 EST (Sun)" in hourly
    assert "this is the second pass (EST)" in hourly
    assert "2027-11-07 02:30 EST (Sun)" in hourly
    assert "2027-11-07 03:30" not in hourly  # three fire times, no more
    berlin = rows["berlin"]
    assert "2027-11-07 07:00 CET (Sun)" in berlin  # Berlin's own zone, not New York's
    assert "happens twice" not in berlin
    assert listing.text.count('<li class="dst">') == 3  # the notes mark their rows


NOTEBOOK_VIEW_CSP = (
    "sandbox; default-src 'none'; img-src data:; style-src 'unsafe-inline'; "
    "font-src data:; frame-ancestors 'self'"
)


def test_a_failed_attempt_shows_its_traceback(server: LiveServer, seeded: Seeded) -> None:
    with server.client("alice") as client:
        page = client.get(f"/nbcast/runs/{seeded.failed_run}").text
    found = re.search(r'<pre class="traceback">(.*?)</pre>', page, re.S)
    assert found, page[:2000]
    traceback = found.group(1)
    assert "Traceback of attempt 1" in page
    assert "ValueError" in traceback
    assert "raise ValueError(" in traceback  # IPython's frame: the failing line
    assert "&lt;script&gt;alert(" in traceback  # the hostile message, as text
    assert "<script" not in traceback
    assert "\x1b[" not in traceback
    assert "[0;31m" not in traceback
    assert "traceback unavailable" not in page


def test_the_executed_notebook_rendered_sandboxed(server: LiveServer, seeded: Seeded) -> None:
    path = f"/nbcast/runs/{seeded.failed_run}/notebook.html"
    with server.client("alice") as client:
        page = client.get(f"/nbcast/runs/{seeded.failed_run}").text
        view = client.get(path)
    # The run page frames it, open (the run failed), with a link to open it alone.
    assert '<details class="card notebook" open>' in page
    assert re.search(rf'<iframe class="notebook" sandbox src="{re.escape(path)}"', page)
    assert f'href="{path}" target="_blank"' in page
    assert view.status_code == 200, view.text[:500]
    assert view.headers["content-type"].startswith("text/html")
    assert view.headers["content-security-policy"] == NOTEBOOK_VIEW_CSP
    assert view.headers["x-content-type-options"] == "nosniff"
    assert view.headers["cache-control"] == "no-store"
    text = re.sub(r"<[^>]+>", "", view.text)  # what a reader sees
    assert "raise ValueError(" in text  # the code is shown
    assert "ValueError" in view.text
    assert "&lt;script&gt;alert(" in view.text
    assert "<script" not in view.text.lower()  # the output's script never reaches the page


def test_the_rendered_notebook_is_the_tenants_and_bounded(
    server: LiveServer, seeded: Seeded
) -> None:
    with server.client("bob") as client:
        mine = client.get(f"/nbcast/runs/{seeded.other_run}/notebook.html")  # queued: none yet
        theirs = client.get(f"/nbcast/runs/{seeded.failed_run}/notebook.html")
    assert mine.status_code == 404
    assert "no executed notebook" in mine.text
    assert mine.headers["content-security-policy"] == NOTEBOOK_VIEW_CSP
    assert theirs.status_code == 404
    assert "ValueError" not in theirs.text
    assert "Traceback" not in theirs.text
    with server.client("alice") as client:
        assert client.get(f"/nbcast/runs/{seeded.other_run}/notebook.html").status_code == 404
        assert client.get("/nbcast/runs/not-a-run/notebook.html").status_code == 404
    # Unauthenticated: to the login page, like every page.
    with httpx.Client(base_url=server.url, timeout=30) as anonymous:
        answer = anonymous.get(f"/nbcast/runs/{seeded.failed_run}/notebook.html")
    assert answer.status_code in (302, 303)
    assert "login" in answer.headers["location"]


def test_an_unreadable_notebook_does_not_break_the_run_page(
    server: LiveServer, seeded: Seeded
) -> None:
    from nbcast.artifacts import LocalArtifactStore, open_store
    from nbcast.views.run_files import MAX_VIEW_BYTES
    from nbcast.views.runs import get_run

    db = open_database(server)
    try:
        with db.session() as session:
            run = get_run(session, Caller(tenant="acme", user="jupyter:alice"), seeded.failed_run)
    finally:
        db.dispose()
    assert run.notebook_sha256 is not None
    store = open_store(load_settings(dict(server.env)).artifacts_location)
    assert isinstance(store, LocalArtifactStore)
    stored = store.path(run.notebook_sha256)
    original = stored.read_bytes()
    try:
        stored.write_bytes(b"{not json")
        with server.client("alice") as client:
            page = client.get(f"/nbcast/runs/{seeded.failed_run}")
            view = client.get(f"/nbcast/runs/{seeded.failed_run}/notebook.html")
        assert page.status_code == 200
        assert "traceback unavailable: the executed notebook is not JSON" in page.text
        assert "cell 2, line 1" in page.text  # the summary still comes from the row
        assert view.status_code == 422
        assert "is not a notebook (not JSON)" in view.text
        with stored.open("wb") as handle:  # one byte over the page's limit (sparse)
            handle.truncate(MAX_VIEW_BYTES + 1)
        with server.client("alice") as client:
            view = client.get(f"/nbcast/runs/{seeded.failed_run}/notebook.html")
            page = client.get(f"/nbcast/runs/{seeded.failed_run}")
        assert view.status_code == 422
        assert "larger than the 32.0 MB shown here: download the .ipynb instead" in view.text
        assert page.status_code == 200
        assert "traceback unavailable: the executed notebook is not JSON" in page.text
        stored.unlink()
        with server.client("alice") as client:
            page = client.get(f"/nbcast/runs/{seeded.failed_run}")
            view = client.get(f"/nbcast/runs/{seeded.failed_run}/notebook.html")
        assert page.status_code == 200
        assert "not in the artifact store" in page.text
        assert view.status_code == 404
    finally:
        stored.write_bytes(original)


def test_the_overview_says_when_embedded_services_are_off(
    server: LiveServer, seeded: Seeded
) -> None:
    with server.client("alice") as client:
        page = client.get("/nbcast/").text
    assert "embedded services" in page
    assert "off (run on their own)" in page
    assert "this server&#39;s children" not in page
    assert "this server's children" not in page


def test_a_path_that_is_not_utf8_is_a_plain_error_page(server: LiveServer) -> None:
    with server.client("alice") as alice:
        answer = alice.get("/nbcast/definitions/%ff")
    assert 400 <= answer.status_code < 500
    assert "<html" in answer.text.lower()
    assert "Traceback" not in server.log()


def test_the_overview_warns_while_a_worker_runs_reports_unsandboxed(
    server: LiveServer, seeded: Seeded
) -> None:
    """A live worker whose heartbeat says ``sandbox: off`` puts a warning on the overview
    for as long as it beats; one that sandboxes, or one long gone, does not."""
    from datetime import UTC, datetime, timedelta

    from nbcast.heartbeats import ServiceHeartbeat

    now = datetime.now(UTC)
    db = open_database(server)
    try:
        with db.session() as session:
            for name, sandbox, beat in (
                ("host-a:11", "off", now),
                ("host-b:12", "on", now),
                ("host-c:13", "off", now - timedelta(hours=1)),
            ):
                session.add(
                    ServiceHeartbeat(
                        kind="worker", name=name, host=name.split(":")[0], pid=1,
                        version="test", state="running", started_at=beat, beat_at=beat,
                        detail={"sandbox": sandbox},
                    )
                )  # fmt: skip
        with server.client("alice") as client:
            page = client.get("/nbcast/").text
        assert 'id="unsandboxed"' in page
        warning = page.split('id="unsandboxed"', 1)[1].split("</p>", 1)[0]
        assert "without a sandbox" in warning
        assert "host-a:11" in warning
        assert "host-b:12" not in warning
        assert "host-c:13" not in warning
        with db.session() as session:
            session.query(ServiceHeartbeat).filter(ServiceHeartbeat.name == "host-a:11").delete()
        with server.client("alice") as client:
            assert 'id="unsandboxed"' not in client.get("/nbcast/").text
    finally:
        db.dispose()
