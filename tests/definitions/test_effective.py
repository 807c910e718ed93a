"""What a version runs with (issue 22): the block's value or binding over the cell's
default, on every face, and a one-line warning when a changed default is hidden."""

from __future__ import annotations

from pathlib import Path

from nbcast.access import Caller
from nbcast.db import Database
from nbcast.definitions.effective import effective_parameters, hidden_default_changes
from nbcast.definitions.parameters import Parameter
from nbcast.definitions.queries import get_version
from nbcast.definitions.versions import publish
from tests.notebooks import make_notebook

CELL = (
    Parameter(name="top_n", type="integer", default=5),
    Parameter(name="region", type="string", default="ALL"),
    Parameter(name="day", type="string", default="2026-01-01"),
)
BLOCK = {"parameters": {"top_n": 15, "day": {"$period": "slot"}}}


def test_each_parameter_says_what_runs_and_why() -> None:
    got = {p.name: (p.value, p.source, p.default) for p in effective_parameters(CELL, BLOCK)}
    assert got == {
        "top_n": (15, "metadata", 5),
        "region": ("ALL", "default", "ALL"),
        "day": ({"$period": "slot"}, "binding", "2026-01-01"),
    }
    assert [p.source for p in effective_parameters(CELL, None)] == ["default"] * 3


def test_a_changed_default_hidden_by_the_block_is_one_line() -> None:
    before = (Parameter(name="top_n", type="integer", default=10), *CELL[1:])
    assert hidden_default_changes(before, CELL, BLOCK) == [
        "parameters.top_n: the default changed 10 → 5, but runs use 15 from the metadata block"
    ]
    assert hidden_default_changes(before, CELL, {}) == []  # the new default runs
    assert hidden_default_changes(CELL, CELL, BLOCK) == []  # nothing changed


def test_publishing_the_demos_v2_warns_and_the_version_shows_15(
    db: Database, tmp_path: Path
) -> None:
    caller = Caller(tenant="default", user="t")
    block = {"name": "daily-sales", "parameters": {"top_n": 15}}
    v1 = make_notebook(tmp_path / "v1.ipynb", parameters="top_n = 10\n", nbcast=block)
    assert publish(db, v1, caller=caller).warnings == ()
    v2 = make_notebook(
        tmp_path / "v1.ipynb", parameters="top_n = 5\n", body="print(top_n)", nbcast=block
    )
    result = publish(db, v2, caller=caller)
    assert result.version == 2
    assert any(
        w.startswith("parameters.top_n: the default changed 10 → 5, but runs use 15")
        for w in result.warnings
    ), result.warnings
    with db.session() as session:
        shown = get_version(session, caller, "daily-sales", 2).to_json()
    assert shown["effective_parameters"] == [
        {"name": "top_n", "value": 15, "source": "metadata", "default": 5}
    ]
