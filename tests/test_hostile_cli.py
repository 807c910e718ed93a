"""Property tests: whatever a hostile user types, nbcast answers with exit 0 or with
one ``error:`` line and exit 2 — never a traceback — and a refusal writes nothing.

Hypothesis generates metadata blocks, parameters cells, ``-p`` values and whole
command lines, on SQLite and on PostgreSQL (where a NUL character or a number too
large for ``jsonb`` used to reach the database).
"""

from __future__ import annotations

import json
import os
import string
import uuid
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nbcast.cli import main
from nbcast.db import Database
from tests.notebooks import make_notebook

TABLES = (
    "tenants",
    "users",
    "report_definitions",
    "definition_versions",
    "runs",
    "schedule_states",
    "unsubscriptions",
    "signed_links",
)
PROPERTY = settings(
    max_examples=int(os.environ.get("NBCAST_HOSTILE_EXAMPLES", "40")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

# Strings a hostile user reaches for: control characters, NUL, other scripts' digits,
# very long text, huge numbers, dates at the ends of time, URLs to internal places.
HOSTILE_TEXT = st.one_of(
    st.text(max_size=20),
    st.text(alphabet="\x00\n\r\t١٢३\u202e'\"\\{}[]=+-@", max_size=10),
    st.sampled_from(
        [
            "",
            "0",
            "١m",
            "99999999999w",
            "9" * 5000,
            "x" * 10_000,
            "0001-01-01T00:00",
            "9999-12-31T23:59",
            "localtime",
            "EST5EDT",
            "file:///etc/passwd",
            "http://169.254.169.254/latest",
            "__import__('os').system('true')",
            "@daily",
            "61 * * * *",
        ]
    ),
)
JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**30), max_value=10**30)
    | st.floats(allow_nan=False, allow_infinity=False)
    | HOSTILE_TEXT,
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(HOSTILE_TEXT, children, max_size=3)
    ),
    max_leaves=6,
)
SCHEDULE_KEYS = [
    "cron",
    "every",
    "timezone",
    "start",
    "end",
    "dst",
    "misfire",
    "overlap",
    "staleness",
    "jitter",
]
SCHEDULE = st.dictionaries(
    st.sampled_from(SCHEDULE_KEYS),
    JSON
    | st.fixed_dictionaries(
        {},
        optional={
            "policy": st.sampled_from(["run_latest", "run_all", "skip"]) | HOSTILE_TEXT,
            "grace": HOSTILE_TEXT,
            "max_catchup": st.integers(min_value=-5, max_value=10**30),
            "gap": HOSTILE_TEXT,
            "fold": HOSTILE_TEXT,
            "after": HOSTILE_TEXT,
        },
    ),
    max_size=5,
)
SUBSCRIPTION = st.fixed_dictionaries(
    {"channel": st.sampled_from(["email", "slack", "link", "webhook"]) | HOSTILE_TEXT},
    optional={
        "to": HOSTILE_TEXT | st.sampled_from(["a@example.com", "A@EXAMPLE.COM"]),
        "formats": st.lists(st.sampled_from(["html", "pdf", "csv", "pptx"]), max_size=3),
        "only_if": HOSTILE_TEXT,
    },
)
BLOCK = st.one_of(
    JSON,
    st.fixed_dictionaries(
        {},
        optional={
            "name": HOSTILE_TEXT,
            "description": HOSTILE_TEXT,
            "schedule": SCHEDULE,
            "parameters": st.dictionaries(st.sampled_from(["region", "top_n", "x"]), JSON),
            "outputs": st.lists(st.sampled_from(["html", "pdf", "xlsx", "csv", "md"]), max_size=4),
            "subscriptions": st.lists(SUBSCRIPTION, max_size=3),
        },
    ),
)
PARAMETER_LINES = st.lists(
    st.one_of(
        st.sampled_from(
            [
                'region = "EMEA"',
                "top_n = 5",
                "x: int = 1",
                "x: float = 1",
                'x: __import__("os").getcwd() = 1',
                "x: List[int] = []",
                "x = [\n 1,\n]  # help",
                "x = os.getcwd()",
                "import os",
                "x, y = 1, 2",
                "x = 10**100",
                "x = " + "9" * 5000,
                "x = " + "[" * 300 + "]" * 300,
                "def f(): pass",
                "x = 'a\\x00b'",
                "x = 1; y = 2",
                "del x",
            ]
        ),
        st.text(alphabet=string.printable, max_size=30),
    ),
    max_size=4,
)


def _counts(url: str) -> dict[str, int]:
    db = Database.open(url)
    with db.engine.connect() as conn:
        result = {
            t: conn.execute(sa.text(f"SELECT count(*) FROM {t}")).scalar_one() for t in TABLES
        }
    db.dispose()
    return result


def _check(capsys: pytest.CaptureFixture[str], url: str, argv: list[str]) -> tuple[int, str, str]:
    before = _counts(url)
    code = main(argv)
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err, err
    assert code in (0, 2), (argv[:4], code, err)
    if code == 2:
        assert err.startswith("error: "), err
        assert len(err.strip().splitlines()) == 1, err
        assert len(err) < 1200
        assert _counts(url) == before, f"a refused command wrote rows: {argv[:4]} {err}"
    return code, out, err


@pytest.fixture
def ready(use_db: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> str:
    """A migrated database with one healthy definition, ``base``."""
    assert main(["publish", str(make_notebook(tmp_path / "base.ipynb"))]) == 0
    capsys.readouterr()
    return use_db


def _notebook(folder: Path, **kwargs: Any) -> Path:
    return make_notebook(folder / f"n{uuid.uuid4().hex[:8]}.ipynb", **kwargs)


@PROPERTY
@given(nbcast=BLOCK)
def test_hostile_metadata_blocks(
    ready: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], nbcast: Any
) -> None:
    try:
        path = _notebook(tmp_path, nbcast=nbcast)
    except ValueError:  # json.dumps refuses a number of over 4,300 digits itself
        return
    _check(capsys, ready, ["publish", str(path), "--name", "hostile"])


@PROPERTY
@given(lines=PARAMETER_LINES)
def test_hostile_parameters_cells(
    ready: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], lines: list[str]
) -> None:
    path = _notebook(tmp_path, parameters="\n".join(lines) + "\n")
    _check(capsys, ready, ["publish", str(path), "--name", "hostile"])


@PROPERTY
@given(values=st.lists(st.tuples(st.sampled_from(["region", "top_n", "x", ""]), JSON), max_size=3))
def test_hostile_run_parameters(
    ready: str, capsys: pytest.CaptureFixture[str], values: list[tuple[str, Any]]
) -> None:
    argv = ["run", "base"]
    for name, value in values:
        try:
            text = value if isinstance(value, str) else json.dumps(value)
        except ValueError:
            continue
        argv += ["-p", f"{name}={text}"]
    _check(capsys, ready, argv)


COMMANDS = [
    ["definitions", "list"],
    ["definitions", "show"],
    ["versions"],
    ["diff"],
    ["schedule", "preview"],
    ["scheduler", "tick"],
    ["pause"],
    ["resume"],
    ["backfill"],
    ["run"],
    ["runs", "list"],
    ["runs", "show"],
    ["cancel"],
    ["deliveries", "list"],
    ["deliver"],
    ["unsubscribe"],
    ["links", "list"],
    ["links", "revoke"],
    ["tenants", "list"],
    ["tenants", "create"],
    ["tenants", "set-quota"],
]
OPTIONS = [
    "--json",
    "--from",
    "--to",
    "--cron",
    "--every",
    "--tz",
    "--now",
    "--limit",
    "--state",
    "--definition",
    "--version",
    "--run",
    "--token",
    "--to",
    "--report",
    "--max-concurrent",
    "--cpus",
    "--share",
    "-p",
    "--dst-gap",
    "--start",
    "--kind",
    "--since",
    "--until",
    "--after",
    "--order",
    "--channel",
]
ARGUMENT = st.one_of(
    st.sampled_from(OPTIONS),
    HOSTILE_TEXT.filter(lambda t: "\x00" not in t),  # argv cannot carry NUL
    st.sampled_from(
        ["base", "1", "-1", "2026-03-08T07:00:00Z", "2026-03-09T07:00:00Z", "0 7 * * *"]
    ),
)


@PROPERTY
@given(
    tenant=st.sampled_from([[], ["--tenant", "default"], ["--tenant", "Bad Tenant"]]),
    command=st.sampled_from(COMMANDS),
    rest=st.lists(ARGUMENT, max_size=6),
)
def test_hostile_command_lines(
    ready: str,
    capsys: pytest.CaptureFixture[str],
    tenant: list[str],
    command: list[str],
    rest: list[str],
) -> None:
    _check(capsys, ready, [*tenant, *command, *rest])
