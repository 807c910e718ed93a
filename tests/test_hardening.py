"""Hostile input against the command line: one ``error:`` line, exit 2, nothing written.

Each case here was found by trying nbcast as a hostile user would (issue 9); each
failed before the fix — a traceback, an accepted value that later stopped the
scheduler, or a row written.
"""

from __future__ import annotations

import json
import os
import resource
import stat
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from nbcast.db import Database
from nbcast.definitions.parameters import parse_parameters_cell
from nbcast.errors import ParametersCellError
from tests.command import run
from tests.members import grant_url
from tests.notebooks import make_notebook

TABLES = (
    "tenants",
    "users",
    "report_definitions",
    "definition_versions",
    "runs",
    "unsubscriptions",
    "operators",
    "audit_log",
)


def counts(url: str) -> dict[str, int]:
    db = Database.open(url)
    with db.engine.connect() as conn:
        result = {
            t: conn.execute(sa.text(f"SELECT count(*) FROM {t}")).scalar_one() for t in TABLES
        }
    db.dispose()
    return result


def assert_refused(code: int, out: str, err: str, message: str) -> None:
    assert code == 2, (out, err)
    assert len(err.strip().splitlines()) == 1, err
    assert err.startswith("error: ")
    assert "Traceback" not in err + out
    assert message in err, err
    assert len(err) < 400, f"an error line echoes too much: {len(err)} characters"


def block(**schedule: Any) -> dict[str, Any]:
    return {"schedule": {"cron": "0 7 * * *", **schedule}}


def deep_list(depth: int) -> str:
    return "[" * depth + "]" * depth


BAD_BLOCKS: dict[str, tuple[Any, str]] = {
    "start_year_1": (block(start="0001-01-01T00:00"), "schedule.start"),
    "start_year_9999_new_york": (
        block(start="9999-12-31T23:00", timezone="America/New_York"),
        "schedule.start",
    ),
    "nbcast_is_a_list": ([], "nbcast: must be a mapping"),
    "arabic_digits_every": ({"schedule": {"every": "١m"}}, "schedule.every"),
    "zone_localtime": (block(timezone="localtime"), "means this machine's zone"),
    "zone_est5edt": (block(timezone="EST5EDT"), "use 'America/New_York'"),
    "zone_us_eastern": (block(timezone="US/Eastern"), "canonical"),
    "max_catchup_huge": (
        block(misfire={"policy": "run_all", "max_catchup": 10**30}),
        "schedule.misfire.max_catchup",
    ),
    "cron_long_field": (block(cron="0 0 * * " + "x" * 3_000), "is not a number"),
    "cron_many_fields": (block(cron="1 " * 3_000), "has 3000 fields"),
    "cron_step_of_5000_digits": (block(cron="0 0 * * */" + "9" * 5_000), "out of range"),
    "cron_number_of_5000_digits": (block(cron="0 0 * * 1-" + "9" * 5_000), "outside 0-7"),
    "every_overflow": ({"schedule": {"every": "99999999999w"}}, "schedule.every"),
    "grace_overflow": (block(misfire={"grace": "99999999999w"}), "schedule.misfire.grace"),
    "jitter_overflow": (block(jitter="99999999999w"), "schedule.jitter"),
    "staleness_overflow": (block(staleness={"after": "99999999999w"}), "schedule.staleness"),
    "same_address_other_case": (
        {
            "subscriptions": [
                {"channel": "email", "to": "cfo@example.com"},
                {"channel": "email", "to": "CFO@Example.com"},
            ]
        },
        "listed twice",
    ),
    "same_webhook_other_case": (
        {
            "subscriptions": [
                {"channel": "webhook", "to": "https://Hooks.Example.com/x"},
                {"channel": "webhook", "to": "https://hooks.example.com/x"},
            ]
        },
        "listed twice",
    ),
    "same_webhook_default_port": (
        {
            "subscriptions": [
                {"channel": "webhook", "to": "HTTPS://hooks.example.com:443/x"},
                {"channel": "webhook", "to": "https://hooks.example.com/x"},
            ]
        },
        "listed twice",
    ),
    "nul_in_description": ({"description": "a\x00b"}, "description: contains a NUL"),
    "nul_in_parameter_value": ({"parameters": {"region": "E\x00MEA"}}, "region"),
    "huge_int_parameter": ({"parameters": {"top_n": 10**30}}, "top_n"),
    "long_name": ({"name": "n" * 10_000}, "name"),
    "webhook_file_url": (
        {"subscriptions": [{"channel": "webhook", "to": "file:///etc/passwd"}]},
        "subscriptions[0].to",
    ),
    "webhook_gopher": (
        {"subscriptions": [{"channel": "webhook", "to": "gopher://example.com/"}]},
        "not an https:// URL",
    ),
    "webhook_bare_word": (
        {"subscriptions": [{"channel": "webhook", "to": "hello"}]},
        "subscriptions[0].to",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_BLOCKS))
def test_bad_metadata_blocks_are_refused(
    use_db: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str
) -> None:
    nbcast, message = BAD_BLOCKS[case]
    path = make_notebook(tmp_path / "bad.ipynb", nbcast=nbcast)
    assert run(capsys, "db", "upgrade")[0] == 0
    before = counts(use_db)
    assert_refused(*run(capsys, "publish", str(path)), message)
    assert counts(use_db) == before


@pytest.mark.parametrize(
    ("spelling", "endpoint"),
    [
        ("https://Hooks.Example.com/x", "https://hooks.example.com/x"),
        ("HTTPS://HOOKS.EXAMPLE.COM:443/x", "https://hooks.example.com/x"),
        ("http://Hooks.Example.com:80/x", "http://hooks.example.com/x"),
        ("https://hooks.example.com", "https://hooks.example.com/"),
        ("https://hooks.example.com/x#part", "https://hooks.example.com/x"),
        (
            "https://Hooks.Example.com:8443/Path/X?Key=Val",
            "https://hooks.example.com:8443/Path/X?Key=Val",
        ),
        ("https://hooks.example.com:80/x", "https://hooks.example.com:80/x"),
        ("http://hooks.example.com:443/x", "http://hooks.example.com:443/x"),
        ("https://[2001:DB8::1]:443/x", "https://[2001:db8::1]/x"),
        ("hello", "hello"),
        ("https://hooks.example.com:99999/x", "https://hooks.example.com:99999/x"),
    ],
)
def test_webhook_recipients_compare_by_endpoint(spelling: str, endpoint: str) -> None:
    """Scheme and host without case, no default port; path and query keep theirs;
    what is no webhook URL stays as it is (publish refuses it anyway)."""
    from nbcast.delivery.channels.webhook import WebhookChannel

    assert WebhookChannel.normalize_recipient(spelling) == endpoint
    assert WebhookChannel.normalize_recipient(endpoint) == endpoint


def _raw_notebook(tmp_path: Path, document: str) -> Path:
    path = tmp_path / "raw.ipynb"
    path.write_text(document)
    return path


BAD_NOTEBOOKS: dict[str, tuple[Callable[[Path], Path], str]] = {
    "nbformat_minor_huge": (
        lambda p: _raw_notebook(
            p, json.dumps({"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 10**30})
        ),
        "nbformat_minor",
    ),
    "nested_100000_arrays": (
        lambda p: _raw_notebook(
            p,
            '{"cells": [], "nbformat": 4, "nbformat_minor": 5, "metadata": {"x": '
            + deep_list(100_000)
            + "}}",
        ),
        "nested",
    ),
    "nested_200_arrays": (
        lambda p: _raw_notebook(
            p,
            '{"cells": [], "nbformat": 4, "nbformat_minor": 5, "metadata": {"x": '
            + deep_list(200)
            + "}}",
        ),
        "nested more than",
    ),
    "annotation_runs_code": (
        lambda p: make_notebook(
            p / "ann.ipynb",
            parameters='x: __import__("pathlib").Path("/tmp/nbcast-marker").touch() = 1\n',
        ),
        "parameters cell, line 1",
    ),
    "nul_in_parameter_default": (
        lambda p: make_notebook(p / "nul.ipynb", parameters='region = "E\\x00MEA"\n'),
        "NUL",
    ),
    "nul_in_a_cell": (
        lambda p: make_notebook(p / "nulcell.ipynb", body="print('a\x00b')"),
        "NUL",
    ),
    "too_large": (
        lambda p: make_notebook(p / "large.ipynb", body="x = '" + "a" * 5_000_000 + "'"),
        "over the limit",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_NOTEBOOKS))
def test_bad_notebooks_are_refused(
    use_db: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str
) -> None:
    make, message = BAD_NOTEBOOKS[case]
    path = make(tmp_path)
    assert run(capsys, "db", "upgrade")[0] == 0
    before = counts(use_db)
    assert_refused(*run(capsys, "publish", str(path), "--name", "bad"), message)
    assert counts(use_db) == before
    assert not Path("/tmp/nbcast-marker").exists()


def test_an_empty_name_is_refused(
    use_db: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = make_notebook(tmp_path / "ok.ipynb")
    assert_refused(*run(capsys, "publish", str(path), "--name", ""), "name: ''")


def test_annotations_are_bare_type_names_that_set_the_type() -> None:
    (ratio, name) = parse_parameters_cell("ratio: float = 1\nname: str = None  # who\n")
    assert (ratio.type, ratio.default) == ("float", 1)
    assert (name.type, name.default, name.help) == ("null", None, "who")
    for source in (
        "x: int = 'a'\n",
        "x: List[int] = []\n",
        "x: os.path = 1\n",
        "x: 'int' = 1\n",
    ):
        with pytest.raises(ParametersCellError):
            parse_parameters_cell(source)


def test_a_multi_line_default_keeps_its_help_comment() -> None:
    (b,) = parse_parameters_cell('b = [\n    "a",\n]  # Nice list\n')
    assert b.help == "Nice list"
    assert b.default == ["a"]


def test_a_toml_side_file_may_use_native_local_datetimes(
    use_db: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = make_notebook(tmp_path / "side.ipynb")
    (tmp_path / "side.nbcast.toml").write_text(
        '[schedule]\ncron = "0 7 * * *"\ntimezone = "Europe/Berlin"\nstart = 2026-11-02T07:00:00\n'
    )
    assert run(capsys, "publish", str(path))[0] == 0
    _code, out, _ = run(capsys, "definitions", "show", "side", "--json")
    assert json.loads(out)["nbcast"]["schedule"]["start"] == "2026-11-02T07:00:00"
    (tmp_path / "side.nbcast.toml").write_text(
        '[schedule]\ncron = "0 7 * * *"\nstart = 2026-11-02T07:00:00+01:00\n'
    )
    assert_refused(*run(capsys, "publish", str(path)), "drop the offset")


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (["top_n=1", "top_n=2"], "'top_n' is given twice"),
        (["region=E\x00MEA"], "region: contains a NUL"),
        (["region=" + "[" * 2000 + "]" * 2000], "nested"),
        (["top_n=" + "9" * 5000], "top_n: expected int"),
    ],
    ids=["repeated", "nul", "deep", "5000-digits"],
)
def test_bad_run_parameters_are_refused(
    use_db: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    values: list[str],
    message: str,
) -> None:
    assert run(capsys, "publish", str(make_notebook(tmp_path / "r.ipynb")))[0] == 0
    before = counts(use_db)
    argv = ["run", "r"]
    for value in values:
        argv += ["-p", value]
    assert_refused(*run(capsys, *argv), message)
    assert counts(use_db) == before


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            [
                "schedule",
                "preview",
                "--every",
                "99999999999w",
                "--from",
                "2026-01-01T00:00Z",
                "--to",
                "2026-01-02T00:00Z",
            ],
            "every",
        ),
        (
            [
                "schedule",
                "preview",
                "--cron",
                "* * * * *",
                "--tz",
                "US/Eastern",
                "--from",
                "2026-01-01T00:00Z",
                "--to",
                "2026-01-02T00:00Z",
            ],
            "use 'America/New_York'",
        ),
        (["scheduler", "tick", "--now", "9999-12-31T23:59:59Z"], "outside 1800-01-02"),
        (
            ["backfill", "x", "--from", "0001-01-01T00:00+05:00", "--to", "2026-01-01T00:00Z"],
            "outside",
        ),
    ],
    ids=["preview-every-overflow", "preview-legacy-zone", "tick-year-9999", "year-1-offset"],
)
def test_out_of_range_arguments(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    assert_refused(*run(capsys, *argv), message)


def test_database_url_errors_hide_the_password(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NBCAST_DATABASE_URL", "postgresql+psycopg://u:s3cret@host:port/db")
    code, out, err = run(capsys, "definitions", "list")
    assert_refused(code, out, err, "not a valid URL")
    assert "s3cret" not in err


def test_an_unreachable_database_is_one_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NBCAST_DATABASE_URL", "postgresql+psycopg://u:s3cret@127.0.0.1:1/db")
    code, out, err = run(capsys, "db", "upgrade")
    assert_refused(code, out, err, "cannot open database")
    assert "s3cret" not in err


def test_a_home_that_cannot_be_created_is_one_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("NBCAST_HOME", str(blocker / "home"))
    assert_refused(*run(capsys, "db", "upgrade"), "cannot create the nbcast home")


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "empty (0 bytes)"),
        (b"this is not a database at all, but it is long enough" * 100, "not an SQLite"),
    ],
    ids=["empty-file", "not-sqlite"],
)
def test_a_database_file_that_is_not_nbcasts_is_not_touched(
    capsys: pytest.CaptureFixture[str], nbcast_home: Path, content: bytes, message: str
) -> None:
    nbcast_home.mkdir(parents=True)
    (nbcast_home / "nbcast.db").write_bytes(content)
    for argv in (["db", "upgrade"], ["definitions", "list"]):
        assert_refused(*run(capsys, *argv), message)
    assert (nbcast_home / "nbcast.db").read_bytes() == content


def test_a_foreign_sqlite_database_is_not_touched(
    capsys: pytest.CaptureFixture[str], nbcast_home: Path
) -> None:
    import sqlite3

    nbcast_home.mkdir(parents=True)
    with sqlite3.connect(nbcast_home / "nbcast.db") as conn:
        conn.execute("CREATE TABLE accounts (id INTEGER)")
    assert_refused(*run(capsys, "db", "upgrade"), "no nbcast schema")


def test_a_corrupt_database_is_one_line(
    capsys: pytest.CaptureFixture[str], nbcast_home: Path, tmp_path: Path
) -> None:
    assert run(capsys, "publish", str(make_notebook(tmp_path / "c.ipynb")))[0] == 0
    path = nbcast_home / "nbcast.db"
    Database.open(f"sqlite:///{path}").engine.dispose()
    subprocess.run(
        [
            sys.executable,
            "-c",
            f"import sqlite3; sqlite3.connect({str(path)!r}).execute("
            "'PRAGMA wal_checkpoint(TRUNCATE)')",
        ],
        check=True,
    )
    data = bytearray(path.read_bytes())
    page = 4096
    data[page : len(data)] = os.urandom(len(data) - page)  # every page but the header's
    path.write_bytes(bytes(data))
    code, out, err = run(capsys, "definitions", "list")
    assert code == 2, (out, err)
    assert len(err.strip().splitlines()) == 1
    assert "Traceback" not in err


def test_a_full_disk_during_publish_is_one_line(tmp_path: Path, nbcast_home: Path) -> None:
    env = {**os.environ, "NBCAST_HOME": str(nbcast_home), "NBCAST_MAX_NOTEBOOK_BYTES": "8000000"}
    nbcast = [sys.executable, "-m", "nbcast"]
    assert subprocess.run([*nbcast, "db", "upgrade"], env=env, capture_output=True).returncode == 0
    big = make_notebook(
        tmp_path / "big.ipynb",
        body="x = 1",
        extra_cells=[
            {
                "cell_type": "code",
                "id": f"c{i}",
                "metadata": {},
                "source": f"y{i} = '" + "a" * 500_000 + "'",
                "outputs": [],
                "execution_count": None,
            }
            for i in range(5)
        ],
    )

    def small_disk() -> None:  # writes past 400 kB fail as on a full disk
        resource.setrlimit(resource.RLIMIT_FSIZE, (400_000, 400_000))

    done = subprocess.run(
        [*nbcast, "publish", str(big)],
        env=env,
        capture_output=True,
        text=True,
        preexec_fn=small_disk,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert done.stderr.startswith("error: ")
    url = f"sqlite:///{nbcast_home / 'nbcast.db'}"
    assert counts(url)["definition_versions"] == 0


def test_the_home_is_private_and_an_open_home_is_tightened(
    tmp_path: Path, nbcast_home: Path
) -> None:
    nbcast_home.mkdir(mode=0o755, parents=True)
    nbcast_home.chmod(0o755)
    env = {**os.environ, "NBCAST_HOME": str(nbcast_home)}
    done = subprocess.run(
        [sys.executable, "-m", "nbcast", "publish", str(make_notebook(tmp_path / "p.ipynb"))],
        env=env,
        capture_output=True,
        text=True,
        preexec_fn=lambda: os.umask(0o022),
    )
    assert done.returncode == 0, done.stderr
    assert "made it private" in done.stderr
    assert stat.S_IMODE(nbcast_home.stat().st_mode) == 0o700
    for path in nbcast_home.iterdir():
        if path.is_file():
            assert stat.S_IMODE(path.stat().st_mode) & 0o077 == 0, path


def test_tenant_commands_are_for_operators_and_quotas_for_admins(
    use_db: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The home's first user (tester) is its operator; bob, an admin of tenant b, may
    change b's quotas and nothing that is an operator's — nor claim tenant c, which has
    no members yet, by naming it from b; carol, an author in b, not even b's quotas."""
    assert run(capsys, "tenants", "create", "a", "--admin", "ana")[0] == 0
    assert run(capsys, "tenants", "create", "b", "--admin", "bob")[0] == 0
    assert run(capsys, "tenants", "create", "c")[0] == 0  # no members: claimed where one acts
    code, out, _ = run(capsys, "tenants", "list", "--json")
    assert (code, [t["name"] for t in json.loads(out)]) == (0, ["a", "b", "c", "default"])
    grant_url(use_db, "b", "carol", "author")
    before = counts(use_db)
    for user, argv, message in (
        (
            "bob",
            ["--tenant", "b", "tenants", "set-quota", "a", "--cpus", "2"],
            "no role in tenant 'a'",
        ),
        (
            "bob",
            ["--tenant", "b", "tenants", "set-quota", "c", "--cpus", "2"],
            "no role in tenant 'c'",
        ),
        ("bob", ["--tenant", "b", "tenants", "list"], "is for operators"),
        ("bob", ["--tenant", "b", "tenants", "create", "c"], "is for operators"),
        ("bob", ["tenants", "list"], "is for operators"),
        ("carol", ["--tenant", "b", "tenants", "set-quota", "b", "--cpus", "2"], "needs the admin"),
    ):
        monkeypatch.setenv("NBCAST_USER", user)
        assert_refused(*run(capsys, *argv), message)
    assert counts(use_db) == before
    monkeypatch.setenv("NBCAST_USER", "bob")  # within its ceilings only (they start at 1)
    assert_refused(
        *run(capsys, "--tenant", "b", "tenants", "set-quota", "b", "--cpus", "2"),
        "above the tenant's ceiling of 1.0",
    )
    monkeypatch.setenv("NBCAST_USER", "tester")
    assert run(capsys, "tenants", "set-ceiling", "b", "--cpus", "4")[0] == 0
    monkeypatch.setenv("NBCAST_USER", "bob")
    assert run(capsys, "--tenant", "b", "tenants", "set-quota", "b", "--cpus", "2")[0] == 0
    monkeypatch.setenv("NBCAST_USER", "tester")
    assert run(capsys, "--tenant", "b", "tenants", "set-quota", "a", "--cpus", "3")[0] == 0
    code, out, _ = run(capsys, "tenants", "list", "--json")
    quotas = {t["name"]: t["cpus_per_run"] for t in json.loads(out)}
    assert (quotas["a"], quotas["b"]) == (3.0, 2.0)


def test_an_unsubscribe_token_acts_only_within_its_tenant(
    use_db: str, capsys: pytest.CaptureFixture[str], nbcast_home: Path
) -> None:
    from nbcast.delivery.signing import load_signer
    from nbcast.delivery.unsubscribe import unsubscribe_token

    assert run(capsys, "tenants", "create", "a")[0] == 0
    assert run(capsys, "tenants", "create", "b")[0] == 0
    db = Database.open(use_db)
    with db.engine.connect() as conn:
        tenant_a = conn.execute(sa.text("SELECT id FROM tenants WHERE name = 'a'")).scalar_one()
    db.dispose()
    token = unsubscribe_token(
        load_signer(nbcast_home),
        tenant_id=tenant_a,
        scope="*",
        channel="email",
        recipient="x@example.com",
    )
    before = counts(use_db)
    assert_refused(*run(capsys, "--tenant", "b", "unsubscribe", "--token", token), "another tenant")
    assert counts(use_db) == before
    assert run(capsys, "--tenant", "a", "unsubscribe", "--token", token)[0] == 0
    assert counts(use_db)["unsubscriptions"] == before["unsubscriptions"] + 1


def test_an_internal_error_is_one_line_with_the_log(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, nbcast_home: Path
) -> None:
    import nbcast.views.definitions as queries

    def broken(*_: Any, **__: Any) -> Any:
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr(queries, "list_definitions", broken)
    code, _out, err = run(capsys, "definitions", "list")
    assert code == 1
    assert len(err.strip().splitlines()) == 1
    assert "internal error (ZeroDivisionError: a bug)" in err
    log = nbcast_home / "logs" / "errors.log"
    assert "Traceback" in log.read_text()
    assert "Traceback" not in err


@pytest.mark.parametrize(
    "option",
    [
        ["--cpus", "nan"],
        ["--cpus", "inf"],
        ["--timeout", "99999999999"],
        ["--max-attempts", "100000"],
        ["--share", "1e300"],
        ["--max-concurrent", "0"],
    ],
    ids=lambda o: "".join(o),
)
def test_quotas_are_bounded(
    use_db: str, capsys: pytest.CaptureFixture[str], option: list[str]
) -> None:
    assert run(capsys, "tenants", "create", "a")[0] == 0
    assert_refused(*run(capsys, "tenants", "set-quota", "a", *option), "must be above 0")


def test_backoff_is_finite_for_any_attempt() -> None:
    from datetime import timedelta

    from nbcast.retry import MAX_BACKOFF_S, backoff

    for attempt in (0, 1, 1025, 10**9):
        for base, cap in ((30.0, 3600.0), (float("nan"), float("inf")), (1e300, 1e300)):
            delay = backoff(attempt, base=base, cap=cap)
            assert timedelta(0) <= delay <= timedelta(seconds=MAX_BACKOFF_S)


# -- found by the hostile review after the first round ---------------------------------


def test_export_never_overwrites_without_force_nor_writes_into_the_home(
    use_db: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], nbcast_home: Path
) -> None:
    assert run(capsys, "publish", str(make_notebook(tmp_path / "e.ipynb")))[0] == 0
    database = nbcast_home / "nbcast.db"
    before = database.read_bytes() if database.exists() else b""
    for target, message in (
        (nbcast_home / "nbcast.db", "inside the nbcast home"),
        (tmp_path / "no" / "such" / "folder" / "x.ipynb", "does not exist"),
        (tmp_path / "e.ipynb", "add --force"),
    ):
        assert_refused(*run(capsys, "export", "e", "-o", str(target)), message)
    if before:
        assert database.read_bytes()[:16] == before[:16]
    assert not (tmp_path / "no").exists()
    assert run(capsys, "export", "e", "-o", str(tmp_path / "e.ipynb"), "--force")[0] == 0


@pytest.mark.parametrize(
    ("nbcast", "message"),
    [
        ({"description": "a\ud800b"}, "not valid Unicode"),
        ({"parameters": {"region": "\udfff"}}, "not valid Unicode"),
    ],
    ids=["description", "parameter"],
)
def test_lone_surrogates_are_bad_input(
    use_db: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], nbcast: Any, message: str
) -> None:
    path = tmp_path / "s.ipynb"
    document = json.loads(make_notebook(path).read_text())
    document["metadata"]["nbcast"] = nbcast
    path.write_text(json.dumps(document))  # \\ud800 escapes: valid JSON, invalid Unicode
    assert run(capsys, "db", "upgrade")[0] == 0
    before = counts(use_db)
    assert_refused(*run(capsys, "publish", str(path)), message)
    assert_refused(
        *run(capsys, "publish", str(make_notebook(tmp_path / "ok.ipynb")), "-m", "x\ud800"),
        "message",
    )
    assert counts(use_db) == before


def test_a_surrogate_in_the_command_line_never_breaks_the_error_path(
    tmp_path: Path, nbcast_home: Path
) -> None:
    notebook = make_notebook(tmp_path / "none.ipynb")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "nbcast",
            "publish",
            str(notebook),
            "-m",
            b"\xed\xa0\x80",
        ],
        env={**os.environ, "NBCAST_HOME": str(nbcast_home)},
        capture_output=True,
    )
    assert b"message" in done.stderr
    assert done.returncode == 2
    assert b"Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_numbers_the_database_cannot_hold_are_refused_at_the_edge(
    use_db: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(capsys, "publish", str(make_notebook(tmp_path / "v.ipynb")))[0] == 0
    huge = "99999999999999999999"
    for argv in (
        ["definitions", "show", "v", "--version", huge],
        ["diff", "v", "1", huge],
        ["export", "v", "--version", huge, "-o", str(tmp_path / "x.ipynb")],
    ):
        assert_refused(*run(capsys, *argv), "is not in the range")


@pytest.mark.parametrize(
    "argv",
    [
        ["worker", "--concurrency", "0"],
        ["worker", "--retry-backoff", "inf"],
        ["worker", "--lease-seconds", "1e-9"],
        ["scheduler", "run", "--max-sleep", "1e308"],
        ["scheduler", "run", "--max-sleep", "nan"],
        ["scheduler", "run", "--max-sleep", "-1"],
        ["delivery-worker", "--poll", "nan"],
    ],
    ids=lambda a: " ".join(a),
)
def test_service_options_are_bounded(capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    code, out, err = run(capsys, *argv)
    assert_refused(code, out, err, "")


def test_passwords_in_query_parameters_are_masked(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(
        "NBCAST_DATABASE_URL", "postgresql+psycopg://postgres@127.0.0.1:1/x?password=topsecret"
    )
    code, out, err = run(capsys, "runs", "list")
    assert_refused(code, out, err, "password=***")
    assert "topsecret" not in err


def test_control_characters_never_reach_the_terminal(
    use_db: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(capsys, "publish", str(make_notebook(tmp_path / "c.ipynb")))[0] == 0
    # JSON escapes: the decoded key holds a real ESC and BEL.
    code, _out, err = run(capsys, "run", "c", "-p", r'region={"\u001b]0;pwned\u0007": 1}')
    assert code == 2
    assert "\x1b" not in err
    assert "\x07" not in err


def test_duplicate_keys_and_cell_ids_are_refused(
    use_db: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(capsys, "publish", str(make_notebook(tmp_path / "d.ipynb")))[0] == 0
    assert_refused(*run(capsys, "run", "d", "-p", 'region={"a": 1, "a": 2}'), "given twice")
    twice = make_notebook(
        tmp_path / "twice.ipynb",
        extra_cells=[
            {"cell_type": "markdown", "id": "body", "metadata": {}, "source": "again"},
        ],
    )
    assert_refused(*run(capsys, "publish", str(twice)), "repeats the cell id")
    raw = tmp_path / "keys.ipynb"
    raw.write_text(
        '{"cells": [], "metadata": {"nbcast": {"name": "a", "name": "b"}}, '
        '"nbformat": 4, "nbformat_minor": 5}'
    )
    assert_refused(*run(capsys, "publish", str(raw)), "appears twice")


def test_a_shared_folder_is_not_made_private_but_refused(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    monkeypatch.setenv("NBCAST_HOME", str(shared))
    assert_refused(*run(capsys, "definitions", "list"), "shared folder")
    assert stat.S_IMODE(shared.stat().st_mode) == 0o1777


def test_a_hard_linked_database_is_refused(
    capsys: pytest.CaptureFixture[str],
    nbcast_home: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert run(capsys, "db", "upgrade")[0] == 0
    os.link(nbcast_home / "nbcast.db", tmp_path / "other-name.db")
    monkeypatch.setenv("NBCAST_DATABASE_URL", f"sqlite:///{tmp_path / 'other-name.db'}")
    assert_refused(*run(capsys, "scheduler", "tick"), "hard links")


def test_the_error_log_is_never_written_through_a_planted_link(
    tmp_path: Path, nbcast_home: Path
) -> None:
    nbcast_home.mkdir(parents=True)
    (nbcast_home / "logs").write_text("a file where the log folder should be")
    planted = tmp_path / "tmp" / f"nbcast-{os.getuid()}"
    planted.mkdir(parents=True)
    planted.chmod(0o777)
    victim = tmp_path / "victim.txt"
    victim.write_text("")
    (planted / "errors.log").symlink_to(victim)
    code = (
        "import sys, nbcast.cli as c\n"
        "def boom(*a, **k): raise ZeroDivisionError('a bug')\n"
        "import nbcast.views.definitions as q; q.list_definitions = boom\n"
        "sys.exit(c.main(['definitions', 'list']))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "NBCAST_HOME": str(nbcast_home), "TMPDIR": str(tmp_path / "tmp")},
        capture_output=True,
        text=True,
    )
    assert done.returncode == 1
    assert "internal error" in done.stderr
    assert victim.read_text() == ""


def test_an_accelerated_clock_stops_at_the_end_of_the_domain(nbcast_home: Path) -> None:
    env = {
        **os.environ,
        "NBCAST_HOME": str(nbcast_home),
        "NBCAST_CLOCK": "accelerated:2026-01-01T00:00:00Z:1e9",
        "NBCAST_CLOCK_EPOCH": "1",
    }
    done = subprocess.run(
        [sys.executable, "-m", "nbcast", "scheduler", "tick", "--json"],
        env=env,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
