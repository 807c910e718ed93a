"""``nbcast.testing``: the local peers users' tests can import, used as a user would.

The peers' protocol behaviour is exercised by the channel tests (``tests/delivery``);
here: what is new in the public package — the SMTP mailbox folder, the optional
dependency's message, the scratch PostgreSQL database — and that importing the
stdlib-only peers needs nothing more.
"""

from __future__ import annotations

import smtplib
import subprocess
import sys
import urllib.request
from email.message import EmailMessage
from pathlib import Path

import pytest
import sqlalchemy as sa

from nbcast.testing.http import HTTPReply, HTTPRequest, LocalHTTPServer, free_port
from nbcast.testing.postgres import PostgresUnavailable, scratch_database
from nbcast.testing.smtp import smtp_server
from tests.conftest import PG_ADMIN_URL, service_missing


def _mail(to: list[str], subject: str) -> EmailMessage:
    message = EmailMessage()
    message["From"] = "reports@example.com"
    message["To"] = ", ".join(to)
    message["Subject"] = subject
    message.set_content("the report")
    return message


def test_the_smtp_mailbox_writes_one_eml_file_per_recipient(tmp_path: Path) -> None:
    folder = tmp_path / "mailbox"  # created by the server
    with smtp_server(folder=folder, accept_reply="250 2.0.0 Ok: saved") as server:
        with smtplib.SMTP(server.host, server.port, timeout=5) as client:
            refused = client.send_message(_mail(["cfo@example.com", "ops+x@example.com"], "one"))
            assert refused == {}
            client.send_message(_mail(["board <b@example.com>"], "two"))
            assert client.noop()[0] == 250
        files = server.files
        messages = server.messages
    assert [path.name for path in files] == [
        "001-cfo@example.com.eml",
        "002-ops+x@example.com.eml",
        "003-b@example.com.eml",
    ]
    assert all(path.parent == folder for path in files)
    assert files[0].read_bytes() == files[1].read_bytes() == messages[0].raw
    assert files[2].read_bytes() == messages[1].raw
    assert sorted(folder.iterdir()) == files


def test_the_smtp_mailbox_answers_with_the_accept_reply() -> None:
    with smtp_server(accept_reply="250 2.0.0 Ok: saved") as server:
        client = smtplib.SMTP(server.host, server.port, timeout=5)
        try:
            client.ehlo()
            client.mail("reports@example.com")
            client.rcpt("cfo@example.com")
            code, reply = client.data(_mail(["cfo@example.com"], "x").as_bytes())
        finally:
            client.quit()
        assert server.files == []  # no folder, no files
    assert (code, reply) == (250, b"2.0.0 Ok: saved")


def _run_without_aiosmtpd(code: str) -> subprocess.CompletedProcess[str]:
    # None in sys.modules makes `import aiosmtpd` fail, as on an install without it.
    prelude = "import sys; sys.modules['aiosmtpd'] = None\n"
    return subprocess.run(
        [sys.executable, "-c", prelude + code], capture_output=True, text=True, check=False
    )


def test_without_aiosmtpd_the_smtp_fake_names_the_extra_that_brings_it() -> None:
    done = _run_without_aiosmtpd(
        "try:\n    import nbcast.testing.smtp\nexcept ImportError as exc:\n    print(exc)\n"
    )
    assert done.returncode == 0, done.stderr
    assert "pip install 'nbcast[testing]'" in done.stdout
    assert "aiosmtpd" in done.stdout


def test_the_other_peers_need_no_optional_dependency() -> None:
    done = _run_without_aiosmtpd(
        "import nbcast.testing, nbcast.testing.http, nbcast.testing.slack_api, "
        "nbcast.testing.webhook, nbcast.testing.postgres"
    )
    assert done.returncode == 0, done.stderr


def test_local_http_server_answers_with_its_app() -> None:
    seen: list[HTTPRequest] = []

    def app(request: HTTPRequest) -> HTTPReply:
        seen.append(request)
        return HTTPReply(201, b"made", {"X-Peer": "fake"})

    with LocalHTTPServer(app) as server:
        request = urllib.request.Request(f"{server.root}/things?a=1", data=b"{}", method="POST")
        with urllib.request.urlopen(request, timeout=5) as answer:
            assert (answer.status, answer.read(), answer.headers["X-Peer"]) == (
                201,
                b"made",
                "fake",
            )
    assert [(r.method, r.path, r.query, r.body) for r in seen] == [
        ("POST", "/things", {"a": ["1"]}, b"{}")
    ]


# --- scratch PostgreSQL --------------------------------------------------------------------


def _databases(admin: sa.Engine, prefix: str) -> list[str]:
    with admin.connect() as conn:
        rows = conn.execute(
            sa.text("SELECT datname FROM pg_database WHERE datname LIKE :p"), {"p": prefix + "%"}
        )
        return [row[0] for row in rows]


@pytest.mark.postgres
def test_a_scratch_database_is_created_empty_and_dropped_with_open_connections() -> None:
    try:
        admin = sa.create_engine(PG_ADMIN_URL)
        with admin.connect():
            pass
    except sa.exc.OperationalError as exc:
        service_missing("PostgreSQL on 127.0.0.1:5432", str(exc.orig).splitlines()[0])
    prefix = "nbcast_scratchtest"
    try:
        with scratch_database(PG_ADMIN_URL, prefix=prefix) as url:
            name = sa.engine.make_url(url).database
            assert name is not None
            assert name.startswith(prefix + "_")
            assert _databases(admin, prefix) == [name]
            engine = sa.create_engine(url)
            leftover = engine.connect()  # what a killed worker leaves behind
            assert leftover.execute(sa.text("SELECT current_database()")).scalar() == name
            tables = leftover.execute(
                sa.text("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'")
            )
            assert tables.scalar() == 0
        assert _databases(admin, prefix) == []
        engine.dispose()
    finally:
        admin.dispose()


@pytest.mark.postgres
def test_two_scratch_databases_never_share_a_name() -> None:
    try:
        with (
            scratch_database(PG_ADMIN_URL, prefix="nbcast_twin") as first,
            scratch_database(PG_ADMIN_URL, prefix="nbcast_twin") as second,
        ):
            assert first != second
    except PostgresUnavailable as exc:
        service_missing("PostgreSQL on 127.0.0.1:5432", str(exc))


def test_an_unreachable_server_is_postgres_unavailable() -> None:
    url = f"postgresql+psycopg://postgres@127.0.0.1:{free_port()}/postgres?connect_timeout=5"
    with pytest.raises(PostgresUnavailable), scratch_database(url):
        pytest.fail("nothing is yielded")


def test_a_scratch_database_prefix_must_be_a_plain_identifier() -> None:
    with pytest.raises(ValueError, match="prefix"), scratch_database(PG_ADMIN_URL, prefix='x"; --'):
        pytest.fail("nothing is yielded")
