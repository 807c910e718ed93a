"""Publishing versions and reading them back, on SQLite and PostgreSQL."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nbcast.access import Caller
from nbcast.db import Database
from nbcast.definitions.diff import diff_versions
from nbcast.definitions.diff_render import render_diff
from nbcast.definitions.versions import publish
from nbcast.errors import DuplicateDefinitionError, UnknownDefinitionError
from tests.definitions.reads import get_version, list_definitions, list_versions
from tests.members import grant
from tests.notebooks import make_notebook

BLOCK = {
    "name": "daily-sales",
    "schedule": {"cron": "0 7 * * 1-5", "timezone": "Europe/Berlin"},
    "parameters": {"region": "APAC"},
    "outputs": ["html", "pdf"],
}


def test_versions_count_up_and_identical_content_adds_none(db: Database, tmp_path: Path) -> None:
    for author in ("ana", "bob"):
        grant(db, "default", author)
    grant(db, "default", "tester", "viewer")
    path = make_notebook(tmp_path / "sales.ipynb", nbcast=BLOCK)
    first = publish(db, path, caller=Caller(tenant="default", user="ana"), message="first")
    again = publish(db, path, caller=Caller(tenant="default", user="bob"), message="again")
    assert (first.version, first.created) == (1, True)
    assert (again.version, again.created, again.sha256) == (1, False, first.sha256)
    make_notebook(path, body="print(region, top_n)", nbcast=BLOCK)
    second = publish(db, path, caller=Caller(tenant="default", user="bob"), message="show top_n")
    make_notebook(path, nbcast=BLOCK)  # back to v1's content
    third = publish(db, path, caller=Caller(tenant="default", user="ana"), message="revert")
    assert [second.version, third.version] == [2, 3]
    assert third.sha256 == first.sha256
    history = list_versions(db, "default", "daily-sales")
    assert [(v.version, v.author, v.message) for v in history] == [
        (1, "ana", "first"),
        (2, "bob", "show top_n"),
        (3, "ana", "revert"),
    ]


def test_a_version_is_stored_normalized_with_schema_and_block(db: Database, tmp_path: Path) -> None:
    grant(db, "default", "ana")
    grant(db, "default", "tester", "viewer")
    path = make_notebook(tmp_path / "sales.ipynb", nbcast=BLOCK)
    nb = json.loads(path.read_text())
    nb["cells"][1]["outputs"] = [{"output_type": "stream", "name": "stdout", "text": "x"}]
    nb["cells"][1]["execution_count"] = 4
    path.write_text(json.dumps(nb))
    publish(db, path, caller=Caller(tenant="default", user="ana"))
    info = get_version(db, "default", "daily-sales", 1)
    assert info.notebook["cells"][1]["outputs"] == []
    assert info.notebook["cells"][1]["execution_count"] is None
    assert [p.name for p in info.schema] == ["region", "top_n"]
    assert info.block == BLOCK
    assert info.spec.parameters == {"region": "APAC"}
    assert len(info.sha256) == 64
    assert info.created_at.tzinfo is not None


def test_a_name_belongs_to_its_file(db: Database, tmp_path: Path) -> None:
    grant(db, "default", "a")
    grant(db, "default", "tester", "viewer")
    publish(
        db,
        make_notebook(tmp_path / "a.ipynb", nbcast=BLOCK),
        caller=Caller(tenant="default", user="a"),
    )
    other = make_notebook(tmp_path / "b.ipynb", nbcast=BLOCK)
    with pytest.raises(DuplicateDefinitionError, match="choose another --name"):
        publish(db, other, caller=Caller(tenant="default", user="a"))
    assert publish(db, other, caller=Caller(tenant="default", user="a"), name="sales-copy").created
    assert [d.name for d in list_definitions(db, "default")] == ["daily-sales", "sales-copy"]


def test_names_are_per_tenant(db: Database, tmp_path: Path) -> None:
    for tenant in ("default", "acme"):
        grant(db, tenant, "a")
        grant(db, tenant, "tester", "viewer")
    path = make_notebook(tmp_path / "a.ipynb", nbcast=BLOCK)
    publish(db, path, caller=Caller(tenant="default", user="a"))
    other = make_notebook(tmp_path / "b.ipynb", nbcast=BLOCK)
    assert publish(db, other, caller=Caller(tenant="acme", user="a")).version == 1
    with pytest.raises(UnknownDefinitionError):
        get_version(db, "acme", "nope")
    with pytest.raises(UnknownDefinitionError, match="has no version 9"):
        get_version(db, "default", "daily-sales", 9)


def test_diff_between_versions(db: Database, tmp_path: Path) -> None:
    grant(db, "default", "ana")
    grant(db, "default", "tester", "viewer")
    path = make_notebook(tmp_path / "sales.ipynb", nbcast=BLOCK)
    publish(db, path, caller=Caller(tenant="default", user="ana"))
    make_notebook(path, parameters='region = "EMEA"\ntop_n = 20\n', nbcast=BLOCK)
    publish(db, path, caller=Caller(tenant="default", user="ana"))
    old, new = (
        get_version(db, "default", "daily-sales", 1),
        get_version(db, "default", "daily-sales", 2),
    )
    text = render_diff(old, new)
    assert "-  top_n = 5\n+  top_n = 20\n" in text  # a unified hunk
    assert "top_n = 20" in text
    structured = diff_versions(old, new)
    assert structured[0]["key"] == "cells"
    json.dumps(structured)  # serializable
    assert render_diff(old, old) == ""
